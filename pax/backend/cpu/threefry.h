// Threefry-2x32 (20 rounds), the counter-based block cipher behind jax.random,
// over contiguous ranges: vectorised with Highway (dispatched at run time to
// the best SIMD target). Callers split large ranges across threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pax::cpu {

// (y0[i], y1[i]) = threefry2x32(key (k0, k1), counter (x0[i], x1[i])) for i in
// [0, n). A key flagged as broadcast is the single value k[0] for every i;
// otherwise it is an array of n values like the counters.
void threefry2x32(const uint32_t* k0, bool k0_broadcast, const uint32_t* k1, bool k1_broadcast, const uint32_t* x0,
                  const uint32_t* x1, uint32_t* y0, uint32_t* y1, size_t n);

// Blocks [begin, end) of jax.random's (non-partitionable) threefry random_bits
// for n u32 outputs. With m = ceil(n / 2), block i < m encrypts the counter
// pair (i, m + i), or (i, 0) for the padding block when n is odd, and writes
// y0 to out[i] and y1 to out[m + i] when m + i < n. Requires n < 2^32 - 1.
void threefry_random_bits(uint32_t k0, uint32_t k1, uint64_t n, uint64_t begin, uint64_t end, uint32_t* out);

}  // namespace pax::cpu

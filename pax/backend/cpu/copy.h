// The strided copy engine behind every data-movement primitive (transpose,
// broadcast_in_dim, rev, slice, pad, concatenate, dynamic slices, gathers):
// copy an N-d index space from one strided layout to another. Dimensions are
// merged where both layouts allow, contiguous rows become memcpy, stride-0
// rows become fills, and transposes run in cache-sized tiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pax::cpu {

// For every index i over `dims`:
//   dst[sum_d i[d] * dst_strides[d]] = src[sum_d i[d] * src_strides[d]]
// Strides are in elements of `width` bytes and may be zero (broadcast) or
// negative (reversal; `src` then points at the element of index 0).
// Runs in parallel over the outer dimensions.
void strided_copy(size_t width, std::span<const int64_t> dims, const void* src, std::span<const int64_t> src_strides,
                  void* dst, std::span<const int64_t> dst_strides);

// dst[0..n) = *value (an element of `width` bytes), in parallel.
void fill(size_t width, const void* value, void* dst, int64_t n);

// Parallel memcpy for large buffers.
void copy_bytes(void* dst, const void* src, size_t nbytes);

}  // namespace pax::cpu

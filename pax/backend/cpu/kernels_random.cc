// CPU kernels of the random-number primitives, threefry2x32 and random_bits:
// the Threefry loops of threefry.h split across threads. Every output depends
// only on its index, so results are the same for any thread count and
// chunking.
#include <cstdint>

#include "pax/backend/cpu/kernels.h"
#include "pax/core/parallel.h"
#include "pax/backend/cpu/threefry.h"

namespace pax::cpu {
namespace {

void threefry2x32_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                         std::span<const TensorView> out) {
  const TensorView &k0 = in[0], &k1 = in[1], &x0 = in[2], &x1 = in[3];
  const int64_t n = x0.numel();
  // A 0-d key with 0-d counters is also "broadcast"; either reading is right.
  const bool b0 = k0.rank() == 0, b1 = k1.rank() == 0;
  parallel_for(n, grain_for(4 * sizeof(uint32_t)), [&](int64_t b, int64_t e) {
    cpu::threefry2x32(k0.as<uint32_t>() + (b0 ? 0 : b), b0, k1.as<uint32_t>() + (b1 ? 0 : b), b1, x0.as<uint32_t>() + b,
                      x1.as<uint32_t>() + b, out[0].as<uint32_t>() + b, out[1].as<uint32_t>() + b, size_t(e - b));
  });
}

void random_bits_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const uint32_t* key = in[0].as<uint32_t>();
  const int64_t n = out[0].numel();
  const int64_t blocks = (n + 1) / 2;
  uint32_t* y = out[0].as<uint32_t>();
  // Each block writes two u32; about 256 KiB of output per chunk.
  parallel_for(blocks, grain_for(2 * sizeof(uint32_t)), [&](int64_t b, int64_t e) {
    cpu::threefry_random_bits(key[0], key[1], uint64_t(n), uint64_t(b), uint64_t(e), y);
  });
}

}  // namespace

void register_random_kernels(CpuKernelTable& t) {
  t[size_t(Prim::threefry2x32)] = threefry2x32_kernel;
  t[size_t(Prim::random_bits)] = random_bits_kernel;
}

}  // namespace pax::cpu

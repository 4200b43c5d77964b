// CUDA kernels of the random-number primitives, threefry2x32 and random_bits:
// a thread per Threefry block, the rounds of reduce_index_math.h, so every
// output is bit-identical to the CPU's (each depends only on its index).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/reduce_index_math.h"

namespace pax::cuda {
namespace {

// A key flagged as broadcast is its element 0 for every counter.
__global__ void threefry_elements(uint32_t* y0, uint32_t* y1, const uint32_t* k0, bool b0, const uint32_t* k1, bool b1,
                                  const uint32_t* x0, const uint32_t* x1, int64_t n) {
  PAX_GRID_STRIDE(i, n) { reduce::threefry2x32(k0[b0 ? 0 : i], k1[b1 ? 0 : i], x0[i], x1[i], y0[i], y1[i]); }
}

// The key is read on the device (two u32).
__global__ void random_bits_blocks(uint32_t* out, const uint32_t* key, uint64_t n) {
  const uint64_t m = (n + 1) / 2;
  PAX_GRID_STRIDE(i, int64_t(m)) {
    uint32_t y0, y1;
    const bool keep = reduce::random_bits_block(key[0], key[1], n, uint64_t(i), y0, y1);
    out[i] = y0;
    if (keep) out[m + uint64_t(i)] = y1;
  }
}

void threefry2x32_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                         std::span<const TensorView> out) {
  const TensorView &k0 = in[0], &k1 = in[1], &x0 = in[2], &x1 = in[3];
  const int64_t n = x0.numel();
  if (n == 0) return;
  threefry_elements<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(ctx.stream)>>>(
      out[0].as<uint32_t>(), out[1].as<uint32_t>(), k0.as<const uint32_t>(), k0.rank() == 0, k1.as<const uint32_t>(),
      k1.rank() == 0, x0.as<const uint32_t>(), x1.as<const uint32_t>(), n);
  PAX_CUDA_CHECK(cudaGetLastError());
}

void random_bits_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  PAX_CHECK(out[0].dtype == DType::u32, "random_bits: the CUDA kernel writes uint32, got ", dtype_name(out[0].dtype));
  random_bits_blocks<<<blocks_for((n + 1) / 2), kThreads, 0, static_cast<cudaStream_t>(ctx.stream)>>>(
      out[0].as<uint32_t>(), in[0].as<const uint32_t>(), uint64_t(n));
  PAX_CUDA_CHECK(cudaGetLastError());
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::threefry2x32, threefry2x32_kernel},
    {Prim::random_bits, random_bits_kernel},
});

}  // namespace
}  // namespace pax::cuda

// What the hand-written CUDA kernels (*.cu) share: the block size and grid
// of a one-thread-per-element launch, the grid-stride loop, the stream of a
// kernel context, and a dispatch on an element's width for kernels that
// only move bytes. Included by .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "pax/backend/kernel.h"
#include "pax/core/error.h"

namespace pax::cuda {

inline constexpr int kThreads = 256;

// Blocks of kThreads for n elements (a grid-stride loop covers the rest).
inline unsigned blocks_for(int64_t n) {
  return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Calls f(U{}) with the unsigned type of the dtype's width.
template <class F>
void visit_width(const char* op, DType dtype, F&& f) {
  switch (itemsize(dtype)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
  }
  PAX_FAIL(op, ": no CUDA kernel for ", dtype_name(dtype));
}

}  // namespace pax::cuda

// for (int64_t i = ...) over [0, n) in a grid-stride loop.
#define PAX_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

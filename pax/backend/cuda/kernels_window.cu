// CUDA kernels of the windowed reductions: reduce_window_max,
// select_and_scatter_add and select_and_gather_add (max pooling and the two
// linear maps of its derivatives; pax/prims/window.cc defines them). The
// window arithmetic and the selection rule (the first NaN, else the first
// maximum; padding takes no part) are in reduce_index_math.h.
//
// reduce_window_max and select_and_gather_add run a thread per output
// position. select_and_scatter_add runs a thread per operand element, which
// visits the windows that cover it in output order and adds the source of
// those that select it, as the CPU adds them (16-bit floats rounded after each
// addition); windows that tile the operand write the source as it is. No
// atomics: results equal the CPU's bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/reduce_index_math.h"

namespace pax::cuda {
namespace {

using reduce::Bf16Bits;
using reduce::F16Bits;
using reduce::WindowMap;

// The type window elements are compared and added in: f32 for 16-bit floats.
template <class T>
using Value = std::conditional_t<reduce::kIsHalf<T>, float, T>;

// Input offset of the element window `pos` selects (-1: all padding).
template <class T>
__device__ int64_t selected(const WindowMap& m, const T* x, int64_t pos, Value<T>& best) {
  return reduce::window_select(
      m, pos, [x](int64_t off) { return reduce::load_as<Value<T>>(x[off]); }, best);
}

template <class T>
__global__ void window_max(T* y, const T* x, WindowMap m) {
  PAX_GRID_STRIDE(pos, m.out_count) {
    Value<T> best = Value<T>(0);
    const int64_t at = selected(m, x, pos, best);
    y[pos] = reduce::store_as<T>(at < 0 ? -reduce::plus_infinity<Value<T>>() : best);
  }
}

template <class T>
__global__ void window_gather(T* y, const T* t, const T* x, WindowMap m) {
  PAX_GRID_STRIDE(pos, m.out_count) {
    Value<T> best = Value<T>(0);
    const int64_t at = selected(m, x, pos, best);
    y[pos] = at < 0 ? reduce::store_as<T>(Value<T>(0)) : t[at];
  }
}

template <class T>
__global__ void window_scatter(T* y, const T* s, const T* x, WindowMap m, int64_t n) {
  PAX_GRID_STRIDE(e, n) {
    int64_t lo[reduce::kMaxRank], hi[reduce::kMaxRank];
    const int64_t count = reduce::covering_windows(m, e, lo, hi);
    T acc = reduce::store_as<T>(Value<T>(0));
    for (int64_t j = 0; j < count; ++j) {
      const int64_t pos = reduce::box_position(m, lo, hi, j);
      Value<T> best = Value<T>(0);
      if (selected(m, x, pos, best) != e) continue;
      // Tiling windows: e lies in this one window only, and takes its source.
      acc = m.tiles ? s[pos] : reduce::store_as<T>(reduce::load_as<Value<T>>(acc) + reduce::load_as<Value<T>>(s[pos]));
    }
    y[e] = acc;
  }
}

template <class F>
void visit_float(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(Bf16Bits{});
    case DType::f16: return f(F16Bits{});
    default: break;
  }
  PAX_FAIL(op, ": no CUDA kernel for ", dtype_name(dtype), "; valid dtypes: float32, float64, bfloat16, float16");
}

WindowMap map_of(Prim prim, const TensorView& x, const Shape& out, const Params& p) {
  return reduce::window_map(prim_name(prim), *x.shape, out, window_of(prim, AVal{*x.shape, x.dtype, false}, p));
}

void reduce_window_max_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  if (y.numel() == 0) return;
  const WindowMap m = map_of(Prim::reduce_window_max, x, *y.shape, p);
  visit_float("reduce_window_max", x.dtype, [&](auto t) {
    using T = decltype(t);
    window_max<T><<<blocks_for(m.out_count), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), x.as<const T>(), m);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

void select_and_scatter_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                                   std::span<const TensorView> out) {
  const TensorView &s = in[0], &x = in[1], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const WindowMap m = map_of(Prim::select_and_scatter_add, x, *s.shape, p);
  visit_float("select_and_scatter_add", x.dtype, [&](auto t) {
    using T = decltype(t);
    window_scatter<T>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), s.as<const T>(), x.as<const T>(), m, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

void select_and_gather_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                                  std::span<const TensorView> out) {
  const TensorView &t = in[0], &x = in[1], &y = out[0];
  if (y.numel() == 0) return;
  const WindowMap m = map_of(Prim::select_and_gather_add, x, *y.shape, p);
  visit_float("select_and_gather_add", x.dtype, [&](auto v) {
    using T = decltype(v);
    window_gather<T>
        <<<blocks_for(m.out_count), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), t.as<const T>(), x.as<const T>(), m);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::reduce_window_max, reduce_window_max_kernel},
    {Prim::select_and_scatter_add, select_and_scatter_add_kernel},
    {Prim::select_and_gather_add, select_and_gather_add_kernel},
});

}  // namespace
}  // namespace pax::cuda

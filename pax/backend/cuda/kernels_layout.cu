// CUDA kernels of the shape primitives that move data: transpose,
// broadcast_in_dim, slice, rev, pad, concatenate, dynamic_slice and
// dynamic_update_slice. Each is a grid-stride loop over the elements it
// writes, moving elements by width only (so every dtype shares one kernel per
// width), with its index arithmetic in layout_index_math.h. The start indices
// of the dynamic ones are read on the device, by every thread, so the host
// never waits for them.
#include <algorithm>
#include <cstdint>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/layout_index_math.h"
#include "pax/prims/shape_params.h"

namespace pax::cuda {
namespace {

using layout::DynamicStarts;
using layout::PadMap;
using layout::StridedMap;

// out[i] = in[src(i)].
template <class T>
__global__ void copy_from_map(T* out, const T* in, StridedMap src, int64_t n) {
  PAX_GRID_STRIDE(i, n) out[i] = in[layout::map_offset(src, i)];
}

// out[dst(i)] = in[i].
template <class T>
__global__ void copy_to_map(T* out, const T* in, StridedMap dst, int64_t n) {
  PAX_GRID_STRIDE(i, n) out[layout::map_offset(dst, i)] = in[i];
}

template <class T>
__global__ void pad_elements(T* out, const T* in, const T* value, PadMap m, int64_t n) {
  PAX_GRID_STRIDE(i, n) {
    const int64_t src = layout::pad_source(m, i);
    out[i] = src < 0 ? *value : in[src];
  }
}

template <class T>
__global__ void dynamic_slice_elements(T* out, const T* in, DynamicStarts starts, StridedMap src, int64_t n) {
  const int64_t base = layout::dynamic_start_offset(starts);
  PAX_GRID_STRIDE(i, n) out[i] = in[base + layout::map_offset(src, i)];
}

template <class T>
__global__ void dynamic_update_elements(T* out, const T* update, DynamicStarts starts, StridedMap dst, int64_t n) {
  const int64_t base = layout::dynamic_start_offset(starts);
  PAX_GRID_STRIDE(i, n) out[base + layout::map_offset(dst, i)] = update[i];
}

// out = in read through `src`, over out's elements.
void launch_copy_from(const char* op, const KernelContext& ctx, const TensorView& in, const TensorView& out,
                      const StridedMap& src) {
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_width(op, out.dtype, [&](auto w) {
    using T = decltype(w);
    copy_from_map<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(out.as<T>(), in.as<const T>(), src, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

void transpose_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                      std::span<const TensorView> out) {
  launch_copy_from("transpose", ctx, in[0], out[0], layout::transpose_source(*in[0].shape, p.ints("permutation")));
}

void broadcast_in_dim_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                             std::span<const TensorView> out) {
  launch_copy_from("broadcast_in_dim", ctx, in[0], out[0],
                   layout::broadcast_source(*in[0].shape, *out[0].shape, p.ints("broadcast_dimensions")));
}

void slice_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  launch_copy_from("slice", ctx, in[0], out[0],
                   layout::slice_source(s, *out[0].shape, p.ints("start_indices"), slice_strides(p, size_t(s.rank()))));
}

void rev_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  launch_copy_from("rev", ctx, in[0], out[0],
                   layout::rev_source(s, normalize_axes(p.ints("dimensions"), s.rank(), "rev")));
}

void pad_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const PadMap m = layout::pad_map(*x.shape, *y.shape, p.ints("padding_config"));
  visit_width("pad", y.dtype, [&](auto w) {
    using T = decltype(w);
    pad_elements<T>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), x.as<const T>(), in[1].as<const T>(), m, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

void concatenate_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const int64_t dim = p.i("dimension");
  const TensorView& y = out[0];
  int64_t offset = 0;
  // One launch per operand, each writing its own block of the output.
  for (const TensorView& x : in) {
    const int64_t n = x.numel();
    if (n > 0) {
      const StridedMap dst = layout::concatenate_destination(*x.shape, *y.shape, dim, offset);
      visit_width("concatenate", y.dtype, [&](auto w) {
        using T = decltype(w);
        copy_to_map<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), x.as<const T>(), dst, n);
      });
      PAX_CUDA_CHECK(cudaGetLastError());
    }
    offset += x.dim(dim);
  }
}

void dynamic_slice_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                          std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const Shape& s = *x.shape;
  const DynamicStarts starts = layout::dynamic_starts("dynamic_slice", s, p.ints("slice_sizes"), in.subspan(1));
  const StridedMap src = layout::strided_map("dynamic_slice", y.shape->dims(), s.strides());
  visit_width("dynamic_slice", y.dtype, [&](auto w) {
    using T = decltype(w);
    dynamic_slice_elements<T>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), x.as<const T>(), starts, src, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

void dynamic_update_slice_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                                 std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& u = in[1];
  const TensorView& y = out[0];
  if (y.data != x.data && y.nbytes() > 0) {
    PAX_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, y.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
  }
  const int64_t n = u.numel();
  if (n == 0) return;
  const Shape& s = *x.shape;
  const DynamicStarts starts = layout::dynamic_starts("dynamic_update_slice", s, u.shape->dims(), in.subspan(2));
  const StridedMap dst = layout::strided_map("dynamic_update_slice", u.shape->dims(), s.strides());
  visit_width("dynamic_update_slice", y.dtype, [&](auto w) {
    using T = decltype(w);
    dynamic_update_elements<T>
        <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), u.as<const T>(), starts, dst, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void copy_into_strided(const KernelContext& ctx, const TensorView& in, void* out,
                       const std::vector<int64_t>& out_strides) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const StridedMap dst = layout::strided_map("a strided copy", in.shape->dims(), out_strides);
  visit_width("a strided copy", in.dtype, [&](auto w) {
    using T = decltype(w);
    copy_to_map<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<T*>(out), in.as<const T>(), dst, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

namespace {

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::transpose, transpose_kernel},
    {Prim::broadcast_in_dim, broadcast_in_dim_kernel},
    {Prim::slice, slice_kernel},
    {Prim::rev, rev_kernel},
    {Prim::pad, pad_kernel},
    {Prim::concatenate, concatenate_kernel},
    {Prim::dynamic_slice, dynamic_slice_kernel},
    {Prim::dynamic_update_slice, dynamic_update_slice_kernel},
});

}  // namespace
}  // namespace pax::cuda

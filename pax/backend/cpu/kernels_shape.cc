// CPU kernels of the shape primitives that move data: transpose,
// broadcast_in_dim, rev, slice, dynamic_slice, dynamic_update_slice,
// concatenate, pad and iota (reshape, squeeze and expand_dims share their
// operand's buffer and have none). All data movement goes through the
// strided copy engine (copy.h).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/parallel.h"
#include "pax/prims/shape_params.h"

namespace pax::cpu {
namespace {

void transpose_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                      std::span<const TensorView> out) {
  const Ints& perm = p.ints("permutation");
  const std::vector<int64_t> in_strides = in[0].shape->strides();
  std::vector<int64_t> src_strides;
  for (int64_t a : perm) src_strides.push_back(in_strides[size_t(a)]);
  cpu::strided_copy(itemsize(in[0].dtype), out[0].shape->dims(), in[0].data, src_strides, out[0].data,
                    out[0].shape->strides());
}

void broadcast_in_dim_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                             std::span<const TensorView> out) {
  const Ints& bdims = p.ints("broadcast_dimensions");
  const Shape& s = *in[0].shape;
  const std::vector<int64_t> in_strides = s.strides();
  std::vector<int64_t> src_strides(size_t(out[0].rank()), 0);
  for (size_t i = 0; i < bdims.size(); ++i) {
    if (s[int64_t(i)] != 1) src_strides[size_t(bdims[i])] = in_strides[i];
  }
  const size_t w = itemsize(in[0].dtype);
  if (in[0].numel() == 1) {
    cpu::fill(w, in[0].data, out[0].data, out[0].numel());
    return;
  }
  cpu::strided_copy(w, out[0].shape->dims(), in[0].data, src_strides, out[0].data, out[0].shape->strides());
}

void rev_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  Ints dims = normalize_axes(p.ints("dimensions"), s.rank(), "rev");
  std::vector<int64_t> strides = s.strides();
  int64_t offset = 0;
  for (int64_t d : dims) {
    if (s[d] == 0) return;
    offset += (s[d] - 1) * strides[size_t(d)];
    strides[size_t(d)] = -strides[size_t(d)];
  }
  const size_t w = itemsize(in[0].dtype);
  cpu::strided_copy(w, s.dims(), in[0].as<char>() + offset * int64_t(w), strides, out[0].data, s.strides());
}

void slice_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  const Ints& start = p.ints("start_indices");
  Ints steps = slice_strides(p, size_t(s.rank()));
  std::vector<int64_t> strides = s.strides();
  int64_t offset = 0;
  for (size_t d = 0; d < strides.size(); ++d) {
    offset += start[d] * strides[d];
    strides[d] *= steps[d];
  }
  const size_t w = itemsize(in[0].dtype);
  cpu::strided_copy(w, out[0].shape->dims(), in[0].as<char>() + offset * int64_t(w), strides, out[0].data,
                    out[0].shape->strides());
}

// dynamic_slice / dynamic_update_slice: start indices are clamped so that the
// slice lies inside the operand, as in XLA.
int64_t read_index(const TensorView& v) {
  int64_t out = 0;
  convert_host(v.dtype, v.data, DType::i64, &out, 1);
  return out;
}

// Clamped start offset (in elements) of a window of `sizes` inside `s`.
int64_t clamped_offset(const Shape& s, std::span<const int64_t> sizes, std::span<const TensorView> starts) {
  std::vector<int64_t> strides = s.strides();
  int64_t offset = 0;
  for (int64_t d = 0; d < s.rank(); ++d) {
    int64_t st = std::clamp<int64_t>(read_index(starts[size_t(d)]), 0, s[d] - sizes[size_t(d)]);
    offset += st * strides[size_t(d)];
  }
  return offset;
}

void dynamic_slice_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                          std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  const size_t w = itemsize(in[0].dtype);
  int64_t offset = clamped_offset(s, p.ints("slice_sizes"), in.subspan(1));
  cpu::strided_copy(w, out[0].shape->dims(), in[0].as<char>() + offset * int64_t(w), s.strides(), out[0].data,
                    out[0].shape->strides());
}

void dynamic_update_slice_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                                 std::span<const TensorView> out) {
  const Shape& s = *in[0].shape;
  const size_t w = itemsize(in[0].dtype);
  cpu::copy_bytes(out[0].data, in[0].data, in[0].nbytes());
  int64_t offset = clamped_offset(s, in[1].shape->dims(), in.subspan(2));
  cpu::strided_copy(w, in[1].shape->dims(), in[1].data, in[1].shape->strides(), out[0].as<char>() + offset * int64_t(w),
                    s.strides());
}

void concatenate_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const int64_t dim = p.i("dimension");
  const size_t w = itemsize(out[0].dtype);
  const std::vector<int64_t> out_strides = out[0].shape->strides();
  int64_t offset = 0;
  for (const TensorView& x : in) {
    cpu::strided_copy(w, x.shape->dims(), x.data, x.shape->strides(),
                      out[0].as<char>() + offset * out_strides[size_t(dim)] * int64_t(w), out_strides);
    offset += x.dim(dim);
  }
}

// pad: padding_config is [lo, hi, interior] per dimension, flattened; lo / hi
// may be negative (cropping).
void pad_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  const Ints& cfg = p.ints("padding_config");
  const size_t w = itemsize(x.dtype);
  cpu::fill(w, in[1].data, y.data, y.numel());
  const std::vector<int64_t> xs = x.shape->strides(), ys = y.shape->strides();
  std::vector<int64_t> dims(size_t(x.rank())), src_strides(dims.size()), dst_strides(dims.size());
  int64_t src_off = 0, dst_off = 0;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const size_t i = size_t(d);
    const int64_t lo = cfg[3 * i], step = cfg[3 * i + 2] + 1;
    const int64_t n = x.dim(d), out_n = y.dim(d);
    // Input index k lands at lo + k * step; keep those inside [0, out_n).
    int64_t first = lo >= 0 ? 0 : (-lo + step - 1) / step;
    int64_t end = out_n - lo <= 0 ? 0 : std::min(n, (out_n - lo + step - 1) / step);
    int64_t count = std::max<int64_t>(0, end - first);
    if (count == 0) return;
    dims[i] = count;
    src_off += first * xs[i];
    dst_off += (lo + first * step) * ys[i];
    src_strides[i] = xs[i];
    dst_strides[i] = ys[i] * step;
  }
  cpu::strided_copy(w, dims, x.as<char>() + src_off * int64_t(w), src_strides, y.as<char>() + dst_off * int64_t(w),
                    dst_strides);
}

// iota: out[..., i, ...] = i along `dimension`.
void iota_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView>,
                 std::span<const TensorView> out) {
  const TensorView& y = out[0];
  const int64_t dim = p.i("dimension");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= y.dim(d);
  for (int64_t d = dim + 1; d < y.rank(); ++d) inner *= y.dim(d);
  const int64_t n = y.dim(dim);
  cpu::visit_dtype(y.dtype, [&](auto t) {
    using T = decltype(t);
    T* data = y.as<T>();
    parallel_for(outer * n, std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T v;
        if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) v = T(float(r % n));
        else v = T(r % n);
        std::fill(data + r * inner, data + (r + 1) * inner, v);
      }
    });
  });
}

}  // namespace

void register_shape_kernels(CpuKernelTable& t) {
  t[size_t(Prim::transpose)] = transpose_kernel;
  t[size_t(Prim::broadcast_in_dim)] = broadcast_in_dim_kernel;
  t[size_t(Prim::rev)] = rev_kernel;
  t[size_t(Prim::slice)] = slice_kernel;
  t[size_t(Prim::dynamic_slice)] = dynamic_slice_kernel;
  t[size_t(Prim::dynamic_update_slice)] = dynamic_update_slice_kernel;
  t[size_t(Prim::concatenate)] = concatenate_kernel;
  t[size_t(Prim::pad)] = pad_kernel;
  t[size_t(Prim::iota)] = iota_kernel;
}

}  // namespace pax::cpu

// VJP and JVP rules of conv_general_dilated. The convolution is bilinear: the
// JVP is conv(t_lhs, rhs) + conv(lhs, t_rhs), and each operand's cotangent is
// itself a convolution (jax.lax's _conv_general_dilated_transpose_lhs / _rhs):
//   lhs: the cotangent convolved with the spatially reversed kernel, its
//        feature axes swapped, with the forward strides as lhs dilation;
//        feature (or batch) groups move from the kernel's output features
//        into its input features.
//   rhs: lhs convolved with the cotangent as kernel, batch and feature axes
//        swapped, the forward strides as rhs dilation; feature groups become
//        batch groups and batch groups feature groups.
// Cotangents come back in the operands' dtype whatever preferred_element_type
// the forward used: the transposed convolutions run in the cotangent's dtype.
#include <algorithm>
#include <array>
#include <utility>

#include "pax/interp/interpreter.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

constexpr int64_t kSpatial = 2;

using Padding = std::vector<std::pair<int64_t, int64_t>>;

struct Conv {
  Ints window_strides, lhs_dilation, rhs_dilation;
  Padding padding;
  lax::ConvDimensionNumbers dims;
  int64_t feature_group_count, batch_group_count;
};

Conv conv_of(const Params& p) {
  Conv c{p.ints("window_strides"),
         p.ints("lhs_dilation"),
         p.ints("rhs_dilation"),
         {},
         {p.ints("lhs_spec"), p.ints("rhs_spec"), p.ints("out_spec")},
         p.i("feature_group_count"),
         p.i("batch_group_count")};
  // Empty dilations mean 1, as in jax.lax.
  if (c.lhs_dilation.empty()) c.lhs_dilation = Ints(kSpatial, 1);
  if (c.rhs_dilation.empty()) c.rhs_dilation = Ints(kSpatial, 1);
  const Ints& flat = p.ints("padding");
  for (size_t i = 0; i + 1 < flat.size(); i += 2) c.padding.emplace_back(flat[i], flat[i + 1]);
  return c;
}

int64_t dilated_size(int64_t size, int64_t dilation) { return size == 0 ? 0 : (size - 1) * dilation + 1; }

// (batch, feature, spatial...) -> (feature, batch, spatial...).
Ints swap_leading(Ints spec) {
  std::swap(spec[0], spec[1]);
  return spec;
}

// Splits axis `src` of x into (size1, dim / size1), size1 the major part.
Array reshape_axis_out_of(int64_t src, int64_t size1, const Array& x) {
  Ints shape = x.shape().dims();
  const int64_t size2 = shape[size_t(src)] / size1;
  shape[size_t(src)] = size2;
  shape.insert(shape.begin() + src, size1);
  return lax::reshape(x, shape);
}

// Merges axis `src` of x into axis `dst` (numbered with src removed) as its
// major part.
Array reshape_axis_into(int64_t src, int64_t dst, const Array& x) {
  Ints perm;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i != src) perm.push_back(i);
  }
  perm.insert(perm.begin() + dst, src);
  Ints shape;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i != src) shape.push_back(x.dim(i));
  }
  shape[size_t(dst)] *= x.dim(src);
  return lax::reshape(lax::transpose(x, perm), shape);
}

// Per spatial axis of the forward convolution: the dilated input, kernel
// window and (stride-dilated) output extents, and the low padding.
struct Extents {
  int64_t in, window, out, lo;
};

std::array<Extents, kSpatial> extents(const Array& g, const Array& lhs, const Array& rhs, const Conv& c) {
  const lax::ConvDimensionNumbers& d = c.dims;
  std::array<Extents, kSpatial> e{};
  for (size_t i = 0; i < size_t(kSpatial); ++i) {
    e[i] = {dilated_size(lhs.dim(d.lhs_spec[2 + i]), c.lhs_dilation[i]),
            dilated_size(rhs.dim(d.rhs_spec[2 + i]), c.rhs_dilation[i]),
            dilated_size(g.dim(d.out_spec[2 + i]), c.window_strides[i]), c.padding[i].first};
  }
  return e;
}

Array as_dtype(const Array& x, DType dtype) { return x.dtype() == dtype ? x : lax::convert_element_type(x, dtype); }

Array lhs_cotangent(const Array& g, const Array& lhs, const Array& rhs_in, const Conv& c) {
  const lax::ConvDimensionNumbers& d = c.dims;
  Array rhs = as_dtype(rhs_in, g.dtype());
  const int64_t groups = std::max(c.feature_group_count, c.batch_group_count);
  if (groups > 1) {
    rhs = reshape_axis_out_of(d.rhs_spec[0], groups, rhs);
    rhs = reshape_axis_into(d.rhs_spec[0], d.rhs_spec[1], rhs);
  }
  Padding padding;
  for (const Extents& e : extents(g, lhs, rhs_in, c)) {
    const int64_t before = e.window - e.lo - 1;
    padding.emplace_back(before, e.in + e.window - 1 - e.out - before);
  }
  Array reversed = lax::rev(rhs, {d.rhs_spec[2], d.rhs_spec[3]});
  Array out = lax::conv_general_dilated(g, reversed, c.lhs_dilation, padding, c.window_strides, c.rhs_dilation,
                                        {d.out_spec, swap_leading(d.rhs_spec), d.lhs_spec}, groups, 1);
  if (c.batch_group_count > 1) {
    out = reshape_axis_out_of(d.lhs_spec[1], c.batch_group_count, out);
    out = reshape_axis_into(d.lhs_spec[1], d.lhs_spec[0], out);
  }
  return as_dtype(out, lhs.dtype());
}

Array rhs_cotangent(const Array& g, const Array& lhs_in, const Array& rhs, const Conv& c) {
  const lax::ConvDimensionNumbers& d = c.dims;
  Array lhs = as_dtype(lhs_in, g.dtype());
  Padding padding;
  for (const Extents& e : extents(g, lhs, rhs, c)) {
    padding.emplace_back(e.lo, (e.out - e.in) + (e.window - e.lo - 1));
  }
  // Feature groups pair input channel groups with output feature groups, as
  // batch groups do once the batch and feature axes are swapped (and back).
  Array out = lax::conv_general_dilated(lhs, g, c.rhs_dilation, padding, c.lhs_dilation, c.window_strides,
                                        {swap_leading(d.lhs_spec), swap_leading(d.out_spec), swap_leading(d.rhs_spec)},
                                        /*feature_group_count=*/c.batch_group_count,
                                        /*batch_group_count=*/c.feature_group_count);
  return as_dtype(out, rhs.dtype());
}

std::vector<Array> conv_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                            const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array()};
  const Array &lhs = in[0], &rhs = in[1], &g = ct[0];
  // Empty operands or outputs: the gradient is an empty sum (and the
  // transposed convolutions would be degenerate).
  if (g.size() == 0 || lhs.size() == 0 || rhs.size() == 0) return {ad::zeros_like(lhs), ad::zeros_like(rhs)};
  const Conv c = conv_of(p);
  return {needs_cotangent(needs, 0) ? lhs_cotangent(g, lhs, rhs, c) : Array(),
          needs_cotangent(needs, 1) ? rhs_cotangent(g, lhs, rhs, c) : Array()};
}

std::vector<Array> conv_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                            const Params& p) {
  Array result;
  if (t[0].defined()) result = bind1(Prim::conv_general_dilated, {t[0], in[1]}, p);
  if (t[1].defined()) result = ad::add(result, bind1(Prim::conv_general_dilated, {in[0], t[1]}, p));
  return {result};
}

}  // namespace

void register_conv_ad(PrimTable& t) { set_ad_rules(t, Prim::conv_general_dilated, conv_vjp, conv_jvp); }

}  // namespace pax

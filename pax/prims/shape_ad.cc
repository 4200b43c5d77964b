// VJP and JVP rules of the shape primitives. They are all linear in their
// array operands: the JVP applies the primitive to the tangents, and the VJP
// is its transpose (reshape back, inverse permutation, sum over broadcast
// axes, pad a slice back with zeros, unpad a pad, split a concatenation...).
// Start indices of dynamic slices have no gradient.
#include <numeric>

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// The JVP of a primitive linear in its first operand.
std::vector<Array> linear_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                              Prim prim, const Params& p) {
  if (!t[0].defined()) return std::vector<Array>(out.size());
  std::vector<Array> args(in.begin(), in.end());
  args[0] = t[0];
  return bind(prim, args, p);
}

template <Prim P>
std::vector<Array> unary_linear_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                                    const Params& p) {
  return linear_jvp(in, t, out, P, p);
}

// reshape / squeeze / expand_dims: the cotangent takes the input's shape.
std::vector<Array> reshape_back_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                    const Params&, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {lax::reshape(ct[0], in[0].shape().dims())};
}

std::vector<Array> transpose_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array> ct,
                                 const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  const Ints& perm = p.ints("permutation");
  Ints inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[size_t(perm[i])] = int64_t(i);
  return {lax::transpose(ct[0], inverse)};
}

std::vector<Array> broadcast_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                 const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {ad::unbroadcast(ct[0], in[0].shape(), p.ints("broadcast_dimensions"))};
}

std::vector<Array> rev_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array> ct, const Params& p,
                           const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {lax::rev(ct[0], p.ints("dimensions"))};
}

// slice: scatter the cotangent back with zeros between and around it.
std::vector<Array> slice_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                             const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  const Ints& start = p.ints("start_indices");
  Ints strides = p.has("strides") && !p.ints("strides").empty() ? p.ints("strides") : Ints(start.size(), 1);
  std::vector<lax::PadConfig> config;
  for (int64_t d = 0; d < in[0].ndim(); ++d) {
    const size_t i = size_t(d);
    const int64_t n = out[0].dim(d);
    const int64_t last = n > 0 ? start[i] + (n - 1) * strides[i] + 1 : start[i];
    config.push_back({start[i], in[0].dim(d) - last, n > 0 ? strides[i] - 1 : 0});
  }
  return {lax::pad(ct[0], scalar(0.0, ct[0].dtype()), config)};
}

std::vector<Array> dynamic_slice_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                     const Params&, const CotangentMask& needs) {
  std::vector<Array> out(in.size());
  if (!ct[0].defined()) return out;
  std::vector<Array> starts(in.begin() + 1, in.end());
  out[0] = lax::dynamic_update_slice(ad::zeros_like(in[0]), ct[0], starts);
  return out;
}

std::vector<Array> dynamic_update_slice_vjp(std::span<const Array> in, std::span<const Array>,
                                            std::span<const Array> ct, const Params&, const CotangentMask& needs) {
  std::vector<Array> out(in.size());
  if (!ct[0].defined()) return out;
  std::vector<Array> starts(in.begin() + 2, in.end());
  if (is_floating(in[0].dtype())) out[0] = lax::dynamic_update_slice(ct[0], ad::zeros_like(in[1]), starts);
  if (is_floating(in[1].dtype())) out[1] = lax::dynamic_slice(ct[0], starts, in[1].shape().dims());
  return out;
}

std::vector<Array> dynamic_update_slice_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                                            const Params&) {
  if (!t[0].defined() && !t[1].defined()) return {Array()};
  std::vector<Array> starts(in.begin() + 2, in.end());
  return {lax::dynamic_update_slice(ad::instantiate(t[0], in[0]), ad::instantiate(t[1], in[1]), starts)};
}

std::vector<Array> concatenate_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                   const Params& p, const CotangentMask& needs) {
  std::vector<Array> out(in.size());
  if (!ct[0].defined()) return out;
  const int64_t dim = p.i("dimension");
  Ints start(size_t(ct[0].ndim()), 0), limit = ct[0].shape().dims();
  int64_t offset = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    start[size_t(dim)] = offset;
    limit[size_t(dim)] = offset + in[i].dim(dim);
    out[i] = lax::slice(ct[0], start, limit);
    offset += in[i].dim(dim);
  }
  return out;
}

std::vector<Array> concatenate_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                                   const Params& p) {
  bool any = false;
  for (const Array& x : t) any = any || x.defined();
  if (!any) return {Array()};
  std::vector<Array> parts;
  for (size_t i = 0; i < in.size(); ++i) parts.push_back(ad::instantiate(t[i], in[i]));
  return {lax::concatenate(parts, p.i("dimension"))};
}

// pad: the operand's cotangent un-pads (negated lo / hi, then a strided
// slice drops the interior); the padding value gets everything else.
std::vector<Array> pad_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                           const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array()};
  const Ints& cfg = p.ints("padding_config");
  std::vector<lax::PadConfig> unpad;
  Ints strides;
  for (int64_t d = 0; d < in[0].ndim(); ++d) {
    unpad.push_back({-cfg[size_t(3 * d)], -cfg[size_t(3 * d + 1)], 0});
    strides.push_back(cfg[size_t(3 * d + 2)] + 1);
  }
  Array unpadded = lax::pad(ct[0], scalar(0.0, ct[0].dtype()), unpad);
  Array operand_ct = lax::slice(unpadded, Ints(size_t(in[0].ndim()), 0), unpadded.shape().dims(), strides);
  Ints all(size_t(ct[0].ndim()));
  std::iota(all.begin(), all.end(), 0);
  Ints all_in(size_t(in[0].ndim()));
  std::iota(all_in.begin(), all_in.end(), 0);
  Array value_ct = lax::sub(lax::reduce_sum(ct[0], all), lax::reduce_sum(operand_ct, all_in));
  return {operand_ct, value_ct};
}

std::vector<Array> pad_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                           const Params& p) {
  if (!t[0].defined() && !t[1].defined()) return {Array()};
  return {bind1(Prim::pad, {ad::instantiate(t[0], in[0]), ad::instantiate(t[1], in[1])}, p)};
}

}  // namespace

void register_shape_ad(PrimTable& t) {
  set_ad_rules(t, Prim::reshape, reshape_back_vjp, unary_linear_jvp<Prim::reshape>);
  set_ad_rules(t, Prim::squeeze, reshape_back_vjp, unary_linear_jvp<Prim::squeeze>);
  set_ad_rules(t, Prim::expand_dims, reshape_back_vjp, unary_linear_jvp<Prim::expand_dims>);
  set_ad_rules(t, Prim::transpose, transpose_vjp, unary_linear_jvp<Prim::transpose>);
  set_ad_rules(t, Prim::broadcast_in_dim, broadcast_vjp, unary_linear_jvp<Prim::broadcast_in_dim>);
  set_ad_rules(t, Prim::rev, rev_vjp, unary_linear_jvp<Prim::rev>);
  set_ad_rules(t, Prim::slice, slice_vjp, unary_linear_jvp<Prim::slice>);
  set_ad_rules(t, Prim::dynamic_slice, dynamic_slice_vjp, unary_linear_jvp<Prim::dynamic_slice>);
  set_ad_rules(t, Prim::dynamic_update_slice, dynamic_update_slice_vjp, dynamic_update_slice_jvp);
  set_ad_rules(t, Prim::concatenate, concatenate_vjp, concatenate_jvp);
  set_ad_rules(t, Prim::pad, pad_vjp, pad_jvp);
}

}  // namespace pax

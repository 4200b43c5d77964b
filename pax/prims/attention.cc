// dot_product_attention and its backward: the shape rules, and each as a
// composite of other primitives (jax.nn.dot_product_attention's XLA
// formulation, in f32, or f64 for f64 operands). The composites are the primitives' `expand`: what
// forward-mode differentiation processes, what a backend without a kernel
// runs, and the reference the tests compare the kernels with. The kernels
// (pax/backend/cpu/attention.h) compute the same without the [T, S] matrix.
#include <cmath>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/prims/attention_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// The logit a masked key gets (as pax/backend/cpu/attention.h's kernels).
constexpr double kMaskedLogit = -0.7 * 3.40282347e38;

bool is_float(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f64; }

// Checks an operand that broadcasts against the logits [B, N, T, S].
void check_broadcastable(const char* op, const char* what, const AVal& x, const Ints& logits) {
  PAX_CHECK(x.shape.rank() == 4, op, ": ", what, " ", x.str(), " must have rank 4, broadcastable to the logits ",
            ints_str(logits), " (batch, heads, queries, keys)");
  for (int64_t d = 0; d < 4; ++d) {
    PAX_CHECK(x.shape[d] == 1 || x.shape[d] == logits[size_t(d)], op, ": ", what, " ", x.str(), " axis ", d,
              " has size ", x.shape[d], "; it must be 1 or ", logits[size_t(d)], " to broadcast to the logits ",
              ints_str(logits), " (batch, heads, queries, keys)");
  }
}

void check_lengths(const char* op, const char* what, const AVal& x, int64_t batch) {
  PAX_CHECK(x.dtype == DType::i32 && x.shape.rank() == 1 && x.shape[0] == batch, op, ": ", what, " ", x.str(),
            " must be int32[", batch, "], one length per example");
}

// Checks q, k, v and the optional operands; returns the logits' shape.
Ints check_operands(const char* op, std::span<const AVal> in, const AttentionParams& a) {
  PAX_CHECK(int64_t(in.size()) == a.num_operands, op, ": takes ", a.num_operands,
            " operands for its has_* parameters, got ", in.size());
  const AVal &q = in[0], &k = in[1], &v = in[2];
  PAX_CHECK(q.shape.rank() == 4 && k.shape.rank() == 4 && v.shape.rank() == 4, op,
            ": query, key and value must have rank 4 ([batch, length, heads, head_dim]); got ", q.str(), ", ", k.str(),
            ", ", v.str());
  PAX_CHECK(is_float(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype, op,
            ": query, key and value must share one float dtype; got ", q.str(), ", ", k.str(), ", ", v.str());
  PAX_CHECK(k.shape == v.shape, op, ": key ", k.str(), " and value ", v.str(), " must have the same shape");
  PAX_CHECK(k.shape[0] == q.shape[0] && k.shape[3] == q.shape[3], op, ": key ", k.str(),
            " must have the query's batch size and head_dim (query ", q.str(), ")");
  PAX_CHECK(k.shape[2] >= 1 && q.shape[2] % k.shape[2] == 0, op, ": the query's ", q.shape[2],
            " heads must be a multiple of the key's ", k.shape[2], " (grouped-query attention)");
  const Ints logits{q.shape[0], q.shape[2], q.shape[1], k.shape[1]};
  PAX_CHECK(a.logit_cap >= 0 && std::isfinite(a.logit_cap), op, ": logit_cap must be >= 0 (0: none), got ",
            a.logit_cap);
  if (a.bias >= 0) {
    PAX_CHECK(is_float(in[size_t(a.bias)].dtype), op, ": bias ", in[size_t(a.bias)].str(), " must be a float");
    check_broadcastable(op, "bias", in[size_t(a.bias)], logits);
  }
  if (a.mask >= 0) {
    PAX_CHECK(in[size_t(a.mask)].dtype == DType::bool_, op, ": mask ", in[size_t(a.mask)].str(), " must be bool");
    check_broadcastable(op, "mask", in[size_t(a.mask)], logits);
  }
  if (a.q_lengths >= 0) check_lengths(op, "query_seq_lengths", in[size_t(a.q_lengths)], q.shape[0]);
  if (a.kv_lengths >= 0) check_lengths(op, "key_value_seq_lengths", in[size_t(a.kv_lengths)], q.shape[0]);
  return logits;
}

std::vector<AVal> attention_rule(std::span<const AVal> in, const Params& p) {
  const AttentionParams a = attention_params(p, Prim::dot_product_attention);
  const Ints logits = check_operands("dot_product_attention", in, a);
  return {AVal{in[0].shape, in[0].dtype}, AVal{Shape(Ints{logits[0], logits[1], logits[2]}), DType::f32}};
}

std::vector<AVal> attention_bwd_rule(std::span<const AVal> in, const Params& p) {
  const AttentionParams a = attention_params(p, Prim::dot_product_attention_bwd);
  PAX_CHECK(int64_t(in.size()) == a.num_operands, "dot_product_attention_bwd: takes ", a.num_operands,
            " operands for its has_* parameters, got ", in.size());
  std::vector<AVal> fwd{in[0], in[1], in[2]};
  for (int i = kAttentionBackwardOperands; i < a.num_operands; ++i) fwd.push_back(in[size_t(i)]);
  const Ints logits =
      check_operands("dot_product_attention_bwd", fwd, attention_params(p, Prim::dot_product_attention));
  const AVal lse{Shape(Ints{logits[0], logits[1], logits[2]}), DType::f32};
  PAX_CHECK(in[3].shape == in[0].shape && in[3].dtype == in[0].dtype && in[5].shape == in[0].shape &&
                in[5].dtype == in[0].dtype,
            "dot_product_attention_bwd: out ", in[3].str(), " and dout ", in[5].str(), " must be like query ",
            in[0].str());
  PAX_CHECK(
      in[4].shape == lse.shape && in[4].dtype == DType::f32 && in[6].shape == lse.shape && in[6].dtype == DType::f32,
      "dot_product_attention_bwd: lse ", in[4].str(), " and dlse ", in[6].str(), " must be ", lse.str());
  std::vector<AVal> out{AVal{in[0].shape, in[0].dtype}, AVal{in[1].shape, in[1].dtype}, AVal{in[2].shape, in[2].dtype}};
  if (a.bias >= 0) out.push_back(AVal{in[size_t(a.bias)].shape, in[size_t(a.bias)].dtype});
  return out;
}

// ---------------------------------------------------------------------------
// The composites.

// The dtype the composites compute in: f64 for f64 operands, else f32.
DType compute_dtype(const Array& q) { return q.dtype() == DType::f64 ? DType::f64 : DType::f32; }

Array as(const Array& x, DType d) { return x.dtype() == d ? x : lax::convert_element_type(x, d); }

Array filled(double value, DType dtype, const Ints& shape) {
  return lax::broadcast_in_dim(scalar(value, dtype), shape, {});
}

// [B, S, K, H] -> [B, S, K * G, H], head n reading head n / G.
Array repeat_heads(const Array& x, int64_t g) {
  if (g == 1) return x;
  const Ints d = x.shape().dims();
  const Array b = lax::broadcast_in_dim(x, {d[0], d[1], d[2], g, d[3]}, {0, 1, 2, 4});
  return lax::reshape(b, {d[0], d[1], d[2] * g, d[3]});
}

// The sum over the query heads of each group: [B, S, K * G, H] -> [B, S, K, H].
Array sum_heads(const Array& x, int64_t g) {
  if (g == 1) return x;
  const Ints d = x.shape().dims();
  return lax::reduce_sum(lax::reshape(x, {d[0], d[1], d[2] / g, g, d[3]}), {3});
}

Array broadcast_logits(const Array& x, const Ints& logits) { return lax::broadcast_in_dim(x, logits, {0, 1, 2, 3}); }

// What both composites share: the scaled logits with their masks applied,
// the mask of attended keys (undefined: every key), and the padding queries.
struct Logits {
  Ints shape;        // [B, N, T, S]
  Array x;           // f32 logits, masked ones kMaskedLogit
  Array attend;      // bool [B, N, T, S], or undefined
  Array valid;       // bool [B, N, T]: rows before q_lengths, or undefined
  Array qf, kf, vf;  // in the compute dtype, key and value heads repeated
  Array cap_slope;   // with a logit cap: its derivative 1 - tanh^2 [B, N, T, S], else undefined
  DType cd = DType::f32;
  int64_t groups = 1;
};

Logits logits_of(std::span<const Array> in, std::span<const Array> extras, const AttentionParams& a, int first) {
  Logits l;
  const Array &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape()[0], T = q.shape()[1], N = q.shape()[2], S = k.shape()[1];
  l.shape = {B, N, T, S};
  l.groups = N / k.shape()[2];
  l.cd = compute_dtype(q);
  l.qf = as(q, l.cd);
  l.kf = repeat_heads(as(k, l.cd), l.groups);
  l.vf = repeat_heads(as(v, l.cd), l.groups);
  auto extra = [&](int index) { return extras[size_t(index - first)]; };
  l.x = lax::dot_general(l.qf, l.kf, {{3}, {3}, {0, 2}, {0, 2}});  // [B, N, T, S]
  l.x = lax::mul(l.x, filled(a.scale, l.cd, l.shape));
  if (a.logit_cap > 0) {
    const Array th = lax::tanh(lax::div(l.x, filled(a.logit_cap, l.cd, l.shape)));
    l.x = lax::mul(th, filled(a.logit_cap, l.cd, l.shape));
    l.cap_slope = lax::sub(filled(1.0, l.cd, l.shape), lax::mul(th, th));
  }
  if (a.bias >= 0) l.x = lax::add(l.x, broadcast_logits(as(extra(a.bias), l.cd), l.shape));
  auto both = [&](const Array& m) { l.attend = l.attend.defined() ? lax::bitwise_and(l.attend, m) : m; };
  if (a.mask >= 0) both(broadcast_logits(extra(a.mask), l.shape));
  const Array s_index = lax::iota(DType::i32, l.shape, 3);
  if (a.is_causal) both(lax::le(s_index, lax::iota(DType::i32, l.shape, 2)));
  if (a.kv_lengths >= 0) both(lax::lt(s_index, lax::broadcast_in_dim(extra(a.kv_lengths), l.shape, {0})));
  if (l.attend.defined()) l.x = lax::select_n(l.attend, {filled(kMaskedLogit, l.cd, l.shape), l.x});
  if (a.q_lengths >= 0) {
    l.valid = lax::lt(lax::iota(DType::i32, {B, N, T}, 2), lax::broadcast_in_dim(extra(a.q_lengths), {B, N, T}, {0}));
  }
  return l;
}

// softmax over the keys as jax.nn.softmax computes it (exp(x - max) over
// its sum: a fully masked row is uniform), and the row log-sum-exp.
struct Softmax {
  Array probs, lse;
};
Softmax softmax_of(const Logits& l) {
  const Array m = lax::reduce_max(l.x, {3});
  const Array e = lax::exp(lax::sub(l.x, lax::broadcast_in_dim(m, l.shape, {0, 1, 2})));
  const Array sum = lax::reduce_sum(e, {3});
  return {lax::div(e, lax::broadcast_in_dim(sum, l.shape, {0, 1, 2})), lax::add(m, lax::log(sum))};
}

// The rows before q_lengths, broadcast to a [B, T, N, H] value.
Array valid_rows(const Logits& l, const Ints& dims) {
  return lax::broadcast_in_dim(lax::transpose(l.valid, {0, 2, 1}), dims, {0, 1, 2});
}

// out [B, T, N, H] in q's dtype, lse [B, N, T] f32.
std::vector<Array> attention_composite(std::span<const Array> in, const Params& p) {
  const AttentionParams a = attention_params(p, Prim::dot_product_attention);
  const Logits l = logits_of(in, in.subspan(kAttentionForwardOperands), a, kAttentionForwardOperands);
  const Ints rows{l.shape[0], l.shape[1], l.shape[2]};
  const Softmax sm = softmax_of(l);
  Array lse = as(sm.lse, DType::f32);
  Array out = lax::dot_general(sm.probs, l.vf, {{3}, {1}, {0, 1}, {0, 2}});  // [B, N, T, H]
  out = lax::transpose(out, {0, 2, 1, 3});
  if (l.valid.defined()) {
    lse = lax::select_n(l.valid, {filled(0.0, DType::f32, rows), lse});
    out = lax::select_n(valid_rows(l, out.shape().dims()), {filled(0.0, l.cd, out.shape().dims()), out});
  }
  if (out.dtype() != in[0].dtype()) out = lax::convert_element_type(out, in[0].dtype());
  return {out, lse};
}

// (dq, dk, dv, [dbias]) by the chain rule over the whole [T, S] matrix.
std::vector<Array> attention_bwd_composite(std::span<const Array> in, const Params& p) {
  const AttentionParams a = attention_params(p, Prim::dot_product_attention_bwd);
  const AttentionParams fwd = attention_params(p, Prim::dot_product_attention);
  const Logits l = logits_of(in, in.subspan(kAttentionBackwardOperands), fwd, kAttentionForwardOperands);
  const Array out = as(in[3], l.cd), dlse = as(in[6], l.cd);
  Array dout = as(in[5], l.cd);
  const Ints rows{l.shape[0], l.shape[1], l.shape[2]};
  if (l.valid.defined()) {
    dout = lax::select_n(valid_rows(l, dout.shape().dims()), {filled(0.0, l.cd, dout.shape().dims()), dout});
  }
  // The probabilities recomputed whole (the kernels' lse cannot give a fully
  // masked row's in f32: kMaskedLogit + log(S) rounds to kMaskedLogit).
  const Array probs = softmax_of(l).probs;
  // dv = p^T dout; dp = dout v^T; D = rowsum(dout * out) - dlse.
  const Array dv_rep = lax::transpose(lax::dot_general(probs, dout, {{2}, {1}, {0, 1}, {0, 2}}), {0, 2, 1, 3});
  const Array dp = lax::dot_general(dout, l.vf, {{3}, {3}, {0, 2}, {0, 2}});       // [B, N, T, S]
  Array d = lax::transpose(lax::reduce_sum(lax::mul(dout, out), {3}), {0, 2, 1});  // [B, N, T]
  d = lax::sub(d, dlse);
  if (l.valid.defined()) d = lax::select_n(l.valid, {filled(0.0, l.cd, rows), d});
  Array ds = lax::mul(probs, lax::sub(dp, lax::broadcast_in_dim(d, l.shape, {0, 1, 2})));
  if (l.attend.defined()) ds = lax::select_n(l.attend, {filled(0.0, l.cd, l.shape), ds});
  if (l.valid.defined()) {
    ds = lax::select_n(lax::broadcast_in_dim(l.valid, l.shape, {0, 1, 2}), {filled(0.0, l.cd, l.shape), ds});
  }
  // q and k see the logits before the cap; the bias after it.
  const Array dx = l.cap_slope.defined() ? lax::mul(ds, l.cap_slope) : ds;
  const Array scaled = lax::mul(dx, filled(a.scale, l.cd, l.shape));
  const Array dq = lax::transpose(lax::dot_general(scaled, l.kf, {{3}, {1}, {0, 1}, {0, 2}}), {0, 2, 1, 3});
  const Array dk_rep = lax::transpose(lax::dot_general(scaled, l.qf, {{2}, {1}, {0, 1}, {0, 2}}), {0, 2, 1, 3});
  auto typed = [](const Array& x, const Array& like) {
    return x.dtype() == like.dtype() ? x : lax::convert_element_type(x, like.dtype());
  };
  std::vector<Array> result{typed(dq, in[0]), typed(sum_heads(dk_rep, l.groups), in[1]),
                            typed(sum_heads(dv_rep, l.groups), in[2])};
  if (a.bias >= 0) {
    const Array& bias = in[size_t(a.bias)];
    Ints summed;
    for (int64_t dim = 0; dim < 4; ++dim)
      if (bias.shape()[dim] == 1 && l.shape[size_t(dim)] != 1) summed.push_back(dim);
    Array db = summed.empty() ? ds : lax::reduce_sum(ds, summed);
    result.push_back(typed(lax::reshape(db, bias.shape().dims()), bias));
  }
  return result;
}

}  // namespace

void register_attention_prims(PrimTable& t) {
  PrimDef fwd{attention_rule};
  fwd.expand = attention_composite;
  t[size_t(Prim::dot_product_attention)] = fwd;
  PrimDef bwd{attention_bwd_rule};
  bwd.expand = attention_bwd_composite;
  t[size_t(Prim::dot_product_attention_bwd)] = bwd;
}

}  // namespace pax

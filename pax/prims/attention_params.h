// dot_product_attention's parameters and the places of its optional
// operands, read by the shape rules (attention.cc), the derivative and
// batching rules and the backends' kernels.
//
// dot_product_attention(q, k, v, [bias], [mask], [q_lengths], [kv_lengths])
//   -> (out [B, T, N, H] in q's dtype, lse [B, N, T] f32)
// dot_product_attention_bwd(q, k, v, out, lse, dout, dlse, [bias], [mask],
//   [q_lengths], [kv_lengths]) -> (dq, dk, dv, [dbias])
// Params: scale (double), is_causal, has_bias, has_mask, has_q_lengths,
// has_kv_lengths (bools); logit_cap (double; absent or 0: none): the logits
// scale * q.k become logit_cap * tanh(scale * q.k / logit_cap) before the
// bias is added (praxis's atten_logit_cap).
#pragma once

#include <cstddef>

#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

struct AttentionParams {
  double scale = 1.0;
  double logit_cap = 0.0;
  bool is_causal = false;
  // The operand index of each optional operand, or -1 when absent.
  int bias = -1, mask = -1, q_lengths = -1, kv_lengths = -1;
  int num_operands = 0;
};

// The forward takes (q, k, v) before its optional operands; the backward
// (q, k, v, out, lse, dout, dlse).
inline constexpr int kAttentionForwardOperands = 3;
inline constexpr int kAttentionBackwardOperands = 7;

inline AttentionParams attention_params(const Params& p, Prim prim) {
  AttentionParams a;
  a.scale = p.f("scale");
  a.is_causal = p.b("is_causal");
  if (p.has("logit_cap")) a.logit_cap = p.f("logit_cap");
  int next = prim == Prim::dot_product_attention ? kAttentionForwardOperands : kAttentionBackwardOperands;
  if (p.b("has_bias")) a.bias = next++;
  if (p.b("has_mask")) a.mask = next++;
  if (p.b("has_q_lengths")) a.q_lengths = next++;
  if (p.b("has_kv_lengths")) a.kv_lengths = next++;
  a.num_operands = next;
  return a;
}

}  // namespace pax

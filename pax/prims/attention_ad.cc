// The derivative of dot_product_attention: its backward primitive, fed the
// forward's own outputs (out and the row log-sum-exp) as residuals, so no
// [T, S] matrix is kept between the passes. Forward mode has no rule of its
// own: it processes the primitive's composite (attention.cc).
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/attention_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

std::vector<Array> attention_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                                 const Params& p, const CotangentMask&) {
  const AttentionParams a = attention_params(p, Prim::dot_product_attention);
  std::vector<Array> grads(in.size());
  if (!ct[0].defined() && !ct[1].defined()) return grads;
  std::vector<Array> operands{
      in[0], in[1], in[2], out[0], out[1], ad::instantiate(ct[0], out[0]), ad::instantiate(ct[1], out[1])};
  for (int i = kAttentionForwardOperands; i < a.num_operands; ++i) operands.push_back(in[size_t(i)]);
  const std::vector<Array> d = bind(Prim::dot_product_attention_bwd, operands, p);
  grads[0] = d[0];
  grads[1] = d[1];
  grads[2] = d[2];
  if (a.bias >= 0) grads[size_t(a.bias)] = d[3];
  return grads;  // the mask and the lengths have none
}

}  // namespace

void register_attention_ad(PrimTable& t) { t[size_t(Prim::dot_product_attention)].vjp = attention_vjp; }

}  // namespace pax

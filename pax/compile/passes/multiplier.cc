// Folding elementwise multipliers into products: mul(dot_general(a, b), m),
// where the product's result is read by that mul alone (directly or through
// one reshape) and m has the result's shape and dtype, becomes one
// dot_general(a, b, [bias,] m) with has_multiplier, which the backend
// applies inside its GEMM (oneDNN's binary post-op; cuBLASLt's DGELU
// epilogue is the same idea) instead of a loop that reads the product back.
// A GELU's backward is such a product: the gradient of the activation times
// the derivative the forward kept (pax::nn::gelu). Through a reshape, m is
// reshaped to the product's shape and the result back to the mul's. The
// folded product takes the mul's place in the program, where m is computed.
// An m broadcast from fewer dims is left to the loop.
#include <vector>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/prims/dot_params.h"

namespace pax {

Jaxpr fold_multipliers_into_products(const Jaxpr& j, const ProductEpilogue& can_fold) {
  const passes::VarUses uses = passes::var_uses(j);
  const auto& [readers, producer] = uses;
  Jaxpr out = passes::copy_header(j);
  std::vector<bool> removed(j.eqns.size(), false);
  std::vector<std::vector<Eqn>> folded(j.eqns.size());  // per mul: what replaces it
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& mul = j.eqns[i];
    if (mul.prim != Prim::mul) continue;
    const AVal& result = j.aval(mul.outputs[0]);
    for (int side = 0; side < 2 && folded[i].empty(); ++side) {
      const Var x = mul.inputs[size_t(side)], m = mul.inputs[size_t(1 - side)];
      if (x == m || readers[size_t(x)] != 1) continue;
      if (!(j.aval(m).shape == result.shape && j.aval(m).dtype == result.dtype)) continue;
      // A broadcast factor would be written out whole for the GEMM to read
      // back: the loop that multiplies the product in place costs no more.
      if (producer[size_t(m)] >= 0 && j.eqns[size_t(producer[size_t(m)])].prim == Prim::broadcast_in_dim) continue;
      // The product, and the reshape between it and the mul if there is one.
      const std::optional<passes::ProductSource> src = passes::product_behind(j, uses, x);
      if (!src || removed[size_t(src->product)] || (src->reshape >= 0 && removed[size_t(src->reshape)])) continue;
      const int px = src->product, reshape = src->reshape;
      const Eqn& dot = j.eqns[size_t(px)];
      if (dot_has_multiplier(dot.params) || dot_has_relu(dot.params) || !can_fold(j, dot)) continue;
      const AVal& product = j.aval(dot.outputs[0]);
      if (product.dtype != result.dtype || product.shape.numel() != result.shape.numel()) continue;
      Eqn f = dot;
      f.params.set("has_multiplier", true);
      Var factor = m;
      if (reshape >= 0) {  // m in the product's shape
        factor = out.new_var(product);
        folded[i].push_back(Eqn{Prim::reshape, {m}, {factor}, Params{{"new_sizes", product.shape.dims()}}});
        removed[size_t(reshape)] = true;
      }
      f.inputs.push_back(factor);
      passes::emit_folded_product(j, out, folded[i], std::move(f), mul.outputs, reshape >= 0);
      removed[size_t(px)] = true;
    }
  }
  return passes::splice_eqns(j, std::move(out), removed, folded);
}

}  // namespace pax

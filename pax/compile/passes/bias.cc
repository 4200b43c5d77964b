// Folding bias adds into products: add(dot_general(a, b), broadcast_in_dim(c))
// where the product's result is read by that add alone and c covers the
// result's trailing dims among the rhs's free ones (broadcast along the
// leading dims, as a layer's bias is) becomes dot_general(a, b, c) with
// has_bias, which the backend computes inside its GEMM (oneDNN's matmul
// bias) instead of a loop over the whole result. The folded product takes
// the add's place in the program, where c is computed. Through one reshape
// of the product (rows regrouped, as a layer's [B*T, D] product viewed as
// [B, T, D]) when c's dims are the product's trailing dims too: the product
// takes the bias and the reshape follows it.
#include <vector>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/prims/dot_params.h"

namespace pax {
namespace {

// The bias `c` of broadcast_in_dim equation `b` when it broadcasts c along the
// leading dims of `result` onto at most `rhs_free` trailing dims, size for size.
std::optional<Var> leading_broadcast(const Jaxpr& j, const Eqn& b, const AVal& result, int64_t rhs_free) {
  if (b.prim != Prim::broadcast_in_dim) return std::nullopt;
  const AVal& c = j.aval(b.inputs[0]);
  const int64_t rank = c.shape.rank(), out_rank = result.shape.rank();
  if (rank == 0 || rank > rhs_free || c.dtype != result.dtype) return std::nullopt;
  const Ints& dims = b.params.ints("broadcast_dimensions");
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t at = out_rank - rank + i;
    if (dims[size_t(i)] != at || c.shape[i] != result.shape[at]) return std::nullopt;
  }
  return b.inputs[0];
}

}  // namespace

Jaxpr fold_bias_into_products(const Jaxpr& j, const ProductBias& can_fold) {
  const passes::VarUses uses = passes::var_uses(j);
  const auto& [readers, producer] = uses;
  Jaxpr out = passes::copy_header(j);
  std::vector<bool> removed(j.eqns.size(), false);
  std::vector<std::vector<Eqn>> folded(j.eqns.size());  // per add: what replaces it
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& add = j.eqns[i];
    if (add.prim != Prim::add) continue;
    for (int side = 0; side < 2 && folded[i].empty(); ++side) {
      const Var x = add.inputs[size_t(side)], y = add.inputs[size_t(1 - side)];
      // The product, and the reshape between it and the add if there is one.
      const std::optional<passes::ProductSource> src = passes::product_behind(j, uses, x);
      const int py = producer[size_t(y)];
      if (!src || py < 0 || readers[size_t(x)] != 1 || removed[size_t(src->product)]) continue;
      const int px = src->product, reshape = src->reshape;
      const Eqn& dot = j.eqns[size_t(px)];
      if (dot_has_bias(dot.params) || dot_has_multiplier(dot.params) || dot_has_relu(dot.params) || !can_fold(j, dot)) {
        continue;
      }
      const DotDims d = dot_dims(dot.params);
      const int64_t rhs_free =
          j.aval(dot.inputs[1]).shape.rank() - int64_t(d.rhs_contracting.size() + d.rhs_batch.size());
      const AVal& result = j.aval(add.outputs[0]);
      if (!(j.aval(x).shape == result.shape && j.aval(x).dtype == result.dtype)) continue;
      const std::optional<Var> c = leading_broadcast(j, j.eqns[size_t(py)], result, rhs_free);
      if (!c) continue;
      // Through a reshape, the bias's dims are the product's trailing dims too.
      const AVal& product = j.aval(dot.outputs[0]);
      const Shape& bias_shape = j.aval(*c).shape;
      bool same_trailing = product.shape.rank() >= bias_shape.rank();
      for (int64_t k = 1; same_trailing && k <= bias_shape.rank(); ++k) {
        same_trailing = product.shape[product.shape.rank() - k] == bias_shape[bias_shape.rank() - k];
      }
      if (!same_trailing) continue;
      Params params = dot.params;
      params.set("has_bias", true);
      passes::emit_folded_product(
          j, out, folded[i], Eqn{Prim::dot_general, {dot.inputs[0], dot.inputs[1], *c}, dot.outputs, std::move(params)},
          add.outputs, reshape >= 0);
      if (reshape >= 0) removed[size_t(reshape)] = true;
      removed[size_t(px)] = true;
    }
  }
  return passes::splice_eqns(j, std::move(out), removed, folded);
}

}  // namespace pax

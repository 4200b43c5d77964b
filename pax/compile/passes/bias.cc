// Folding bias adds into products: add(dot_general(a, b), broadcast_in_dim(c))
// where the product's result is read by that add alone and c covers the
// result's trailing dims among the rhs's free ones (broadcast along the
// leading dims, as a layer's bias is) becomes dot_general(a, b, c) with
// has_bias, which the backend computes inside its GEMM (oneDNN's matmul
// bias) instead of a loop over the whole result. The folded product takes
// the add's place in the program, where c is computed.
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
  const auto [readers, producer] = passes::var_uses(j);
  std::vector<bool> removed(j.eqns.size(), false);
  std::vector<std::optional<Eqn>> folded(j.eqns.size());
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& add = j.eqns[i];
    if (add.prim != Prim::add) continue;
    for (int side = 0; side < 2 && !folded[i]; ++side) {
      const Var x = add.inputs[size_t(side)], y = add.inputs[size_t(1 - side)];
      const int px = producer[size_t(x)], py = producer[size_t(y)];
      if (px < 0 || py < 0 || readers[size_t(x)] != 1 || removed[size_t(px)]) continue;
      const Eqn& dot = j.eqns[size_t(px)];
      if (dot.prim != Prim::dot_general || dot_has_bias(dot.params) || dot_has_multiplier(dot.params) ||
          !can_fold(j, dot)) {
        continue;
      }
      const DotDims d = dot_dims(dot.params);
      const int64_t rhs_free =
          j.aval(dot.inputs[1]).shape.rank() - int64_t(d.rhs_contracting.size() + d.rhs_batch.size());
      const AVal& result = j.aval(add.outputs[0]);
      if (!(j.aval(x).shape == result.shape && j.aval(x).dtype == result.dtype)) continue;
      const std::optional<Var> c = leading_broadcast(j, j.eqns[size_t(py)], result, rhs_free);
      if (!c) continue;
      Params params = dot.params;
      params.set("has_bias", true);
      folded[i] = Eqn{Prim::dot_general, {dot.inputs[0], dot.inputs[1], *c}, add.outputs, std::move(params)};
      removed[size_t(px)] = true;
    }
  }
  Jaxpr out = passes::copy_header(j);
  bool changed = false;
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    if (removed[i]) {
      changed = true;
      continue;
    }
    out.eqns.push_back(folded[i] ? *folded[i] : j.eqns[i]);
  }
  if (!changed) return j;
  out.outvars = j.outvars;
  return out;
}

}  // namespace pax

// partial_eval_by_shape: a dynamic trace on abstract inputs, split into the
// equations that depend on no input (evaluated) and the rest (shapes only).
#include "pax/api/partial_eval.h"

#include <memory>

#include "pax/api/transform_core.h"
#include "pax/interp/trace.h"
#include "pax/ir/jaxpr.h"

namespace pax {
namespace {

// The equations of `jaxpr` that the known outputs need, all of whose inputs
// are known (constants, or outputs of such equations), as a jaxpr without
// inputs whose outputs are those known outputs. known[v] says which variables
// are known.
Jaxpr known_part(const Jaxpr& jaxpr, std::vector<bool>& known) {
  known.assign(jaxpr.avals.size(), false);
  for (Var v : jaxpr.constvars) known[size_t(v)] = true;
  for (const Eqn& e : jaxpr.eqns) {
    bool all_known = true;
    for (Var v : e.inputs) all_known = all_known && known[size_t(v)];
    for (Var v : e.outputs) known[size_t(v)] = all_known;
  }
  Jaxpr part;
  part.avals = jaxpr.avals;
  part.constvars = jaxpr.constvars;
  part.consts = jaxpr.consts;
  std::vector<bool> needed(jaxpr.avals.size(), false);
  for (Var v : jaxpr.outvars) {
    if (!known[size_t(v)]) continue;
    needed[size_t(v)] = true;
    part.outvars.push_back(v);
  }
  // Backwards: an equation is kept when a needed variable is among its outputs.
  std::vector<const Eqn*> kept;
  for (auto it = jaxpr.eqns.rbegin(); it != jaxpr.eqns.rend(); ++it) {
    bool wanted = false;
    for (Var v : it->outputs) wanted = wanted || (needed[size_t(v)] && known[size_t(v)]);
    if (!wanted) continue;
    for (Var v : it->inputs) needed[size_t(v)] = true;
    kept.push_back(&*it);
  }
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) part.eqns.push_back(**it);
  return part;
}

}  // namespace

Tree partial_eval_by_shape(const std::function<Tree(const std::vector<Array>& inputs)>& fn,
                           const std::vector<ShapeDtypeStruct>& input_spec) {
  std::vector<AVal> in_avals;
  for (const ShapeDtypeStruct& spec : input_spec) in_avals.push_back(AVal{spec.shape, spec.dtype, false});
  auto out_def = std::make_shared<TreeDef>();
  const std::shared_ptr<Jaxpr> jaxpr = trace_to_jaxpr(
      [&](std::span<const Array> inputs) {
        auto [leaves, def] = tree_flatten(fn(std::vector<Array>(inputs.begin(), inputs.end())));
        *out_def = std::move(def);
        return leaves;
      },
      in_avals);
  std::vector<bool> known;
  const std::vector<Array> values = eval_jaxpr(known_part(*jaxpr, known), {});
  std::vector<Array> outs;
  size_t next_value = 0;
  for (Var v : jaxpr->outvars) {
    outs.push_back(known[size_t(v)] ? values[next_value++] : detail::shape_dtype_array(jaxpr->aval(v)));
  }
  return tree_unflatten(*out_def, outs);
}

}  // namespace pax

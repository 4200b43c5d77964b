// Hoisting: small computations that depend only on the program's inputs and
// constants (the casts of parameters to the compute dtype, their reshapes and
// broadcasts, step-dependent scalars) move to the start of the program, in
// their original order. A fused loop can then take such a value as an input
// wherever it is read: the grouper only joins an equation to a loop when
// every other operand exists before the loop runs, and a cast emitted in the
// middle of a layer would otherwise split that layer's elementwise work into
// several loops.
#include <algorithm>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {
namespace {

// Small values: the size constant folding also keeps to.
constexpr int64_t kMaxHoistedElements = kDefaultFoldLimit;

// Pure equations that are safe to run earlier: every elementwise primitive
// with a kernel operation (prims.def's kernel column; on small values each
// is cheap), and the data movement of casts and parameters.
bool hoistable(Prim p) {
  if (is_elementwise(p) && prim_kernel(p).kind != ElementwiseKernel::Kind::none) return true;
  switch (p) {
    case Prim::reshape:
    case Prim::squeeze:
    case Prim::expand_dims:
    case Prim::broadcast_in_dim:
    case Prim::transpose: return true;
    default: return false;
  }
}

}  // namespace

Jaxpr hoist_input_computations(const Jaxpr& j) {
  std::vector<bool> early(j.avals.size(), false);
  for (Var v : j.invars) early[size_t(v)] = true;
  for (Var v : j.constvars) early[size_t(v)] = true;
  std::vector<bool> hoisted(j.eqns.size(), false);
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    const Eqn& e = j.eqns[k];
    if (!hoistable(e.prim) || e.inputs.empty()) continue;
    const bool inputs_early = std::all_of(e.inputs.begin(), e.inputs.end(), [&](Var v) { return early[size_t(v)]; });
    const bool small = std::all_of(e.outputs.begin(), e.outputs.end(),
                                   [&](Var v) { return j.aval(v).shape.numel() <= kMaxHoistedElements; });
    if (!inputs_early || !small) continue;
    hoisted[k] = true;
    for (Var v : e.outputs) early[size_t(v)] = true;
  }
  Jaxpr out = passes::copy_header(j);
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    if (hoisted[k]) out.eqns.push_back(j.eqns[k]);
  }
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    if (!hoisted[k]) out.eqns.push_back(j.eqns[k]);
  }
  out.outvars = j.outvars;
  return out;
}

}  // namespace pax

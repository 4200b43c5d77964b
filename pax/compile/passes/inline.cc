// Inlining: the program of every jit_call equation (nested jit), and the
// body of every custom_vjp_call left in the program (one that was not
// differentiated), are spliced into the caller, so that the whole computation
// is optimised and fused as one program.
#include "pax/ir/executable.h"
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/interp/custom_vjp.h"

namespace pax {
namespace {

// Appends `e` (inputs and outputs already in out's variables), inlining it
// when it is a jit_call or custom_vjp_call: its outputs are then substituted
// by the callee's.
void emit(Jaxpr& out, passes::Subst& subst, const Eqn& e) {
  if (e.prim != Prim::jit_call && e.prim != Prim::custom_vjp_call) {
    out.eqns.push_back(e);
    return;
  }
  JaxprPtr callee_ptr;
  if (e.prim == Prim::custom_vjp_call) {
    auto rule = e.params.object<CustomVjpRule>("rule");
    callee_ptr = rule->jaxpr;
    if (!callee_ptr) {
      std::vector<AVal> avals;
      for (Var v : e.inputs) avals.push_back(out.aval(v));
      callee_ptr = trace_to_jaxpr(rule->fn, avals);
    }
  } else {
    callee_ptr = e.params.object<Program>("program")->jaxpr();
  }
  const Jaxpr& callee = *callee_ptr;
  std::vector<Var> map(callee.avals.size(), -1);
  for (size_t i = 0; i < callee.constvars.size(); ++i) {
    map[size_t(callee.constvars[i])] = passes::add_const(out, callee.consts[i]);
  }
  for (size_t i = 0; i < callee.invars.size(); ++i) map[size_t(callee.invars[i])] = e.inputs[i];
  for (const Eqn& ce : callee.eqns) {
    Eqn copy{ce.prim, {}, {}, ce.params};
    for (Var v : ce.inputs) copy.inputs.push_back(map[size_t(v)]);
    for (Var v : ce.outputs) {
      Var nv = out.new_var(callee.aval(v));
      copy.outputs.push_back(nv);
      map[size_t(v)] = nv;
    }
    subst.grow(out.avals.size());
    emit(out, subst, copy);
    // A nested jit_call's outputs were substituted by its callee's values.
    for (Var& v : copy.outputs) v = subst(v);
    for (size_t k = 0; k < ce.outputs.size(); ++k) map[size_t(ce.outputs[k])] = copy.outputs[k];
  }
  subst.grow(out.avals.size());
  for (size_t k = 0; k < e.outputs.size(); ++k) subst.set(e.outputs[k], subst(map[size_t(callee.outvars[k])]));
}

}  // namespace

Jaxpr inline_calls(const Jaxpr& j) {
  Jaxpr out = passes::copy_header(j);
  passes::Subst subst(j.avals.size());
  for (const Eqn& e : j.eqns) emit(out, subst, subst.apply(e));
  subst.finish(out, j);
  return out;
}

}  // namespace pax

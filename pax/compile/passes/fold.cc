// Constant folding: an equation whose inputs are all constants is evaluated
// at compile time (eager_apply) and its results become constants, when every
// result has at most `max_elements` elements. Larger results are left to run
// time, and so are broadcasts that add elements (a literal broadcast to an
// activation's shape) unless only folded equations read them: fused loops
// read the small operand instead of a materialised array.
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// Primitives that are plain functions of their inputs' values (collectives
// depend on the enclosing vmap, impl rules run user code or sub-programs).
bool foldable(Prim p) { return !is_collective(p) && prim_def(p).impl == nullptr; }

bool expands(const Jaxpr& j, const Eqn& e) {
  return e.prim == Prim::broadcast_in_dim && j.aval(e.outputs[0]).shape.numel() > j.aval(e.inputs[0]).shape.numel();
}

// Which equations have constant inputs and small results (before deciding
// about expanding broadcasts).
std::vector<bool> candidates(const Jaxpr& j, int64_t max_elements) {
  std::vector<bool> constant(j.avals.size(), false);
  for (Var v : j.constvars) constant[size_t(v)] = true;
  std::vector<bool> out(j.eqns.size(), false);
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    const Eqn& e = j.eqns[k];
    bool ok = foldable(e.prim);
    for (Var v : e.inputs) ok = ok && constant[size_t(v)];
    for (Var v : e.outputs) ok = ok && j.aval(v).shape.numel() <= max_elements;
    out[k] = ok;
    for (Var v : e.outputs) constant[size_t(v)] = ok;
  }
  return out;
}

}  // namespace

Jaxpr fold_constants(const Jaxpr& j, int64_t max_elements) {
  std::vector<bool> fold = candidates(j, max_elements);
  // An expanding broadcast folds only when nothing but folded equations reads it.
  std::vector<bool> read_at_run_time(j.avals.size(), false);
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    if (fold[k]) continue;
    for (Var v : j.eqns[k].inputs) read_at_run_time[size_t(v)] = true;
  }
  for (Var v : j.outvars) read_at_run_time[size_t(v)] = true;
  for (size_t k = j.eqns.size(); k-- > 0;) {
    const Eqn& e = j.eqns[k];
    if (!fold[k] || !expands(j, e) || !read_at_run_time[size_t(e.outputs[0])]) continue;
    fold[k] = false;
    read_at_run_time[size_t(e.inputs[0])] = true;
  }

  Jaxpr out = passes::copy_header(j);
  passes::ConstValues known(j);
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    const Eqn& e = j.eqns[k];
    std::vector<Array> values;
    if (fold[k]) {
      std::vector<Array> inputs;
      for (Var v : e.inputs) {
        const Array* c = known.get(v);
        if (!c || !c->is_concrete()) break;
        inputs.push_back(*c);
      }
      try {
        if (inputs.size() == e.inputs.size()) values = eager_apply(e.prim, inputs, e.params);
      } catch (const Error&) {
        values.clear();  // left to run time, which reports the error
      }
    }
    if (values.empty() && !e.outputs.empty()) {
      out.eqns.push_back(e);
      continue;
    }
    for (size_t i = 0; i < e.outputs.size(); ++i) {
      out.constvars.push_back(e.outputs[i]);
      out.consts.push_back(values[i]);
      known.set(e.outputs[i], values[i]);
    }
  }
  out.outvars = j.outvars;
  return out;
}

}  // namespace pax

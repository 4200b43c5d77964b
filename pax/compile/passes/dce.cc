// Dead code elimination: equations none of whose results reach an output are
// dropped (every primitive is pure), and so are unused constants.
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {

Jaxpr dce(const Jaxpr& j) {
  std::vector<bool> live(j.avals.size(), false);
  for (Var v : j.outvars) live[size_t(v)] = true;
  std::vector<bool> keep(j.eqns.size(), false);
  for (size_t k = j.eqns.size(); k-- > 0;) {
    const Eqn& e = j.eqns[k];
    for (Var v : e.outputs) keep[k] = keep[k] || live[size_t(v)];
    if (!keep[k]) continue;
    for (Var v : e.inputs) live[size_t(v)] = true;
  }
  Jaxpr out = passes::copy_header(j);
  out.constvars.clear();
  out.consts.clear();
  for (size_t i = 0; i < j.constvars.size(); ++i) {
    if (!live[size_t(j.constvars[i])]) continue;
    out.constvars.push_back(j.constvars[i]);
    out.consts.push_back(j.consts[i]);
  }
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    if (keep[k]) out.eqns.push_back(j.eqns[k]);
  }
  out.outvars = j.outvars;
  return out;
}

}  // namespace pax

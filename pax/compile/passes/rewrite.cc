// Pass helpers (see rewrite.h).
#include "pax/compile/passes/rewrite.h"

#include <string>

#include "pax/core/error.h"

namespace pax::passes {

Jaxpr copy_header(const Jaxpr& j) {
  Jaxpr out;
  out.avals = j.avals;
  out.constvars = j.constvars;
  out.consts = j.consts;
  out.invars = j.invars;
  return out;
}

VarUses var_uses(const Jaxpr& j) {
  VarUses u{std::vector<int>(j.avals.size(), 0), std::vector<int>(j.avals.size(), -1)};
  for (Var v : j.outvars) ++u.readers[size_t(v)];
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    for (Var v : j.eqns[i].inputs) ++u.readers[size_t(v)];
    for (Var v : j.eqns[i].outputs) u.producer[size_t(v)] = int(i);
  }
  return u;
}

Var add_const(Jaxpr& j, Array value) {
  Var v = j.new_var(value.aval());
  j.constvars.push_back(v);
  j.consts.push_back(std::move(value));
  return v;
}

void check_pass(const Jaxpr& j, const char* pass) {
#ifndef NDEBUG
  try {
    typecheck(j);
  } catch (const Error& e) {
    PAX_FAIL("compiler pass ", pass, " produced an ill-typed jaxpr: ", e.what(), "\n", j.str());
  }
#else
  (void)j;
  (void)pass;
#endif
}

}  // namespace pax::passes

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

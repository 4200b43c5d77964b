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

std::optional<ProductSource> product_behind(const Jaxpr& j, const VarUses& uses, Var x) {
  ProductSource s{uses.producer[size_t(x)], -1};
  if (s.product < 0) return std::nullopt;
  if (j.eqns[size_t(s.product)].prim == Prim::reshape) {
    const Var d = j.eqns[size_t(s.product)].inputs[0];
    if (uses.readers[size_t(d)] != 1 || uses.producer[size_t(d)] < 0) return std::nullopt;
    s.reshape = s.product;
    s.product = uses.producer[size_t(d)];
  }
  if (j.eqns[size_t(s.product)].prim != Prim::dot_general) return std::nullopt;
  return s;
}

void emit_folded_product(const Jaxpr& j, Jaxpr& out, std::vector<Eqn>& into, Eqn product,
                         const std::vector<Var>& outputs, bool reshaped) {
  if (!reshaped) {
    product.outputs = outputs;
    into.push_back(std::move(product));
    return;
  }
  const Var whole = out.new_var(j.aval(product.outputs[0]));
  product.outputs = {whole};
  into.push_back(std::move(product));
  into.push_back(Eqn{Prim::reshape, {whole}, outputs, Params{{"new_sizes", j.aval(outputs[0]).shape.dims()}}});
}

Jaxpr splice_eqns(const Jaxpr& j, Jaxpr out, const std::vector<bool>& removed,
                  std::vector<std::vector<Eqn>>& replacements, const Subst* subst) {
  bool changed = false;
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    if (removed[i]) {
      changed = true;
      continue;
    }
    if (replacements[i].empty()) {
      out.eqns.push_back(subst ? subst->apply(j.eqns[i]) : j.eqns[i]);
    } else {
      changed = true;
      for (Eqn& e : replacements[i]) out.eqns.push_back(std::move(e));
    }
  }
  if (!changed) return j;
  if (subst) {
    subst->finish(out, j);
  } else {
    out.outvars = j.outvars;
  }
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

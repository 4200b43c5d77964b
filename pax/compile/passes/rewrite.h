// Helpers shared by the passes: a jaxpr's header copied without equations,
// a variable substitution, the constant values of variables, and who reads
// and writes each variable.
#pragma once

#include <optional>
#include <vector>

#include "pax/ir/jaxpr.h"

namespace pax::passes {

// `j` without equations and outputs (avals, constants and inputs kept).
Jaxpr copy_header(const Jaxpr& j);

// Replaces variables by others (each target already final).
class Subst {
 public:
  explicit Subst(size_t num_vars) : to_(num_vars) {
    for (size_t i = 0; i < to_.size(); ++i) to_[i] = Var(i);
  }
  Var operator()(Var v) const { return size_t(v) < to_.size() ? to_[size_t(v)] : v; }
  void set(Var from, Var to) {
    if (size_t(from) >= to_.size()) grow(size_t(from) + 1);
    to_[size_t(from)] = to;
  }
  void grow(size_t num_vars) {
    for (size_t i = to_.size(); i < num_vars; ++i) to_.push_back(Var(i));
  }
  // e's inputs substituted.
  Eqn apply(Eqn e) const {
    for (Var& v : e.inputs) v = (*this)(v);
    return e;
  }
  // Sets out.outvars from j.outvars, substituted.
  void finish(Jaxpr& out, const Jaxpr& j) const {
    out.outvars.clear();
    for (Var v : j.outvars) out.outvars.push_back((*this)(v));
  }

 private:
  std::vector<Var> to_;
};

// The value of each constvar (undefined for other variables).
class ConstValues {
 public:
  explicit ConstValues(const Jaxpr& j) : values_(j.avals.size()) {
    for (size_t i = 0; i < j.constvars.size(); ++i) values_[size_t(j.constvars[i])] = j.consts[i];
  }
  const Array* get(Var v) const {
    return size_t(v) < values_.size() && values_[size_t(v)].defined() ? &values_[size_t(v)] : nullptr;
  }
  void set(Var v, Array value) {
    if (size_t(v) >= values_.size()) values_.resize(size_t(v) + 1);
    values_[size_t(v)] = std::move(value);
  }

 private:
  std::vector<Array> values_;
};

// Per variable of `j`: how many equations (and outputs) read it, and the
// index of the equation that writes it (-1: an input or a constant).
struct VarUses {
  std::vector<int> readers, producer;
};
VarUses var_uses(const Jaxpr& j);

// Where an epilogue pass (bias.cc, multiplier.cc, relu.cc) finds the
// product behind x: the dot_general that writes x, or that writes what x is
// a reshape of when that reshape alone reads it. Equation indices; reshape
// -1 when there is none; nullopt when x comes from no product.
struct ProductSource {
  int product = -1, reshape = -1;
};
std::optional<ProductSource> product_behind(const Jaxpr& j, const VarUses& uses, Var x);

// Appends a folded product (a copy of j's dot_general, its outputs still
// the original's) to `into`, writing `outputs`: directly, or, when the
// product was read through a reshape, into a new variable of the product's
// aval (made in `out`) that a reshape to `outputs` follows.
void emit_folded_product(const Jaxpr& j, Jaxpr& out, std::vector<Eqn>& into, Eqn product,
                         const std::vector<Var>& outputs, bool reshaped);

// `out` (j's header, with any new variables) given j's equations, less those
// marked removed and with those that have replacements replaced by them, in
// order, their inputs substituted by `subst` where given, and j's outputs;
// `j` itself where nothing was removed or replaced.
Jaxpr splice_eqns(const Jaxpr& j, Jaxpr out, const std::vector<bool>& removed,
                  std::vector<std::vector<Eqn>>& replacements, const Subst* subst = nullptr);

// Appends a constant to `j` and returns its variable.
Var add_const(Jaxpr& j, Array value);

// Type-checks a pass's result in debug builds.
void check_pass(const Jaxpr& j, const char* pass);

}  // namespace pax::passes

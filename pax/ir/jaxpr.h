// Jaxpr: the program a trace records — variables with avals, equations
// (primitive, input vars, output vars, params), constants and outputs. Plain
// data: it prints as text, type-checks, evaluates, and is what jit compiles.
//
//   { lambda a:f32[3]; b:f32[3] c:f32[]. let
//       d:f32[3] = mul b a
//       e:f32[] = reduce_sum[axes=(0,)] d
//     in (e,) }
//
// Constants (`consts`, bound to `constvars`) are the arrays a traced function
// closed over: concrete arrays, or tracers of an enclosing transformation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

using Var = int32_t;

struct Eqn {
  Prim prim;
  std::vector<Var> inputs;
  std::vector<Var> outputs;
  Params params;
};

class Jaxpr : public ParamObject {
 public:
  std::vector<AVal> avals;  // aval of each variable, indexed by Var
  std::vector<Var> constvars;
  std::vector<Array> consts;  // values of constvars, same order
  std::vector<Var> invars;
  std::vector<Eqn> eqns;
  std::vector<Var> outvars;

  Var new_var(const AVal& aval) {
    avals.push_back(aval);
    return Var(avals.size() - 1);
  }
  const AVal& aval(Var v) const { return avals[size_t(v)]; }
  std::vector<AVal> in_avals() const;
  std::vector<AVal> out_avals() const;
  std::string str() const override;  // the text form above
};

using JaxprPtr = std::shared_ptr<const Jaxpr>;

std::ostream& operator<<(std::ostream& os, const Jaxpr& j);

// Checks that every variable is defined once before use, that each equation's
// output avals are what its primitive's shape rule gives, and that consts
// match their avals. Throws pax::Error naming the equation.
void typecheck(const Jaxpr& jaxpr);

// Evaluates the jaxpr by binding each equation: eagerly for concrete
// arguments, or at whatever interpreter level the arguments belong to.
std::vector<Array> eval_jaxpr(const Jaxpr& jaxpr, std::span<const Array> args);

// A copy of `jaxpr` whose constvars become leading invars (closure
// conversion): the consts must then be passed as the first arguments.
std::shared_ptr<Jaxpr> convert_constvars(const Jaxpr& jaxpr);

}  // namespace pax

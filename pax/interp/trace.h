// The trace level: records every primitive application as an equation of a
// Jaxpr, knowing only avals. Used by jit, make_jaxpr and eval_shape. Values
// from lower levels (concrete arrays, or tracers of an enclosing grad / vmap)
// that the function closes over become the jaxpr's constants.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/ir/jaxpr.h"

namespace pax {

using FlatFn = std::function<std::vector<Array>(std::span<const Array>)>;

class JaxprTrace : public Trace, public std::enable_shared_from_this<JaxprTrace> {
 public:
  JaxprTrace() : jaxpr_(std::make_shared<Jaxpr>()) {}
  std::vector<Array> process(Prim prim, std::span<const Array> inputs, const Params& params) override;
  std::string name() const override { return "jit"; }

  // A new input variable of the jaxpr and its tracer.
  Array new_input(const AVal& aval);
  // The variable for `x`: its own for this level's tracers, a constvar otherwise.
  Var var_of(const Array& x);
  std::shared_ptr<Jaxpr> jaxpr() const { return jaxpr_; }

 private:
  Array tracer(Var v);
  std::shared_ptr<Jaxpr> jaxpr_;
  std::unordered_map<const void*, Var> const_vars_;  // Array::id() -> constvar
};

class JaxprTracer : public LevelTracer {
 public:
  JaxprTracer(std::shared_ptr<Trace> trace, Var var) : LevelTracer(std::move(trace)), var(var) {}
  const Var var;
};

// Traces `f` on abstract arguments of the given avals into a jaxpr (a dynamic
// trace: every op inside is recorded, even those without traced inputs).
std::shared_ptr<Jaxpr> trace_to_jaxpr(const FlatFn& f, std::span<const AVal> in_avals);

}  // namespace pax

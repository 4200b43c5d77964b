// The jaxpr-recording interpreter level.
#include "pax/interp/trace.h"

#include "pax/core/error.h"
#include "pax/prims/registry.h"

namespace pax {

Array JaxprTrace::tracer(Var v) { return Array(jaxpr_->aval(v), std::make_shared<JaxprTracer>(shared_from_this(), v)); }

Array JaxprTrace::new_input(const AVal& aval) {
  Var v = jaxpr_->new_var(aval);
  jaxpr_->invars.push_back(v);
  return tracer(v);
}

Var JaxprTrace::var_of(const Array& x) {
  if (trace_of(x) == this) return static_cast<const JaxprTracer*>(x.tracer())->var;
  auto it = const_vars_.find(x.id());
  if (it != const_vars_.end()) return it->second;
  Var v = jaxpr_->new_var(x.aval());
  jaxpr_->constvars.push_back(v);
  jaxpr_->consts.push_back(x);
  const_vars_.emplace(x.id(), v);
  return v;
}

std::vector<Array> JaxprTrace::process(Prim prim, std::span<const Array> inputs, const Params& params) {
  Eqn eqn{prim, {}, {}, params};
  std::vector<AVal> in_avals;
  for (const Array& x : inputs) {
    eqn.inputs.push_back(var_of(x));
    in_avals.push_back(x.aval());
  }
  std::vector<AVal> out_avals = infer_avals(prim, in_avals, params);
  std::vector<Array> outputs;
  for (const AVal& a : out_avals) {
    Var v = jaxpr_->new_var(a);
    eqn.outputs.push_back(v);
    outputs.push_back(tracer(v));
  }
  jaxpr_->eqns.push_back(std::move(eqn));
  return outputs;
}

std::shared_ptr<Jaxpr> trace_to_jaxpr(const FlatFn& f, std::span<const AVal> in_avals) {
  auto trace = std::make_shared<JaxprTrace>();
  std::vector<Array> outputs;
  {
    TraceScope scope(trace, /*dynamic=*/true);
    std::vector<Array> inputs;
    for (const AVal& a : in_avals) inputs.push_back(trace->new_input(a));
    outputs = f(inputs);
    for (const Array& o : outputs) {
      PAX_CHECK(o.defined(), "a traced function returned an empty Array");
      trace->jaxpr()->outvars.push_back(trace->var_of(o));
    }
  }
  return trace->jaxpr();
}

}  // namespace pax

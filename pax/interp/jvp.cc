// The jvp level.
#include "pax/interp/jvp.h"

#include "pax/ir/executable.h"
#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/interp/vjp.h"
#include "pax/ir/jaxpr.h"
#include "pax/prims/registry.h"

namespace pax {

const Array* JvpTracer::concrete() const {
  if (primal.is_concrete()) return &primal;
  return primal.is_tracer() ? primal.tracer()->concrete() : nullptr;
}

Array JvpTrace::pack(const Array& primal, const Array& tangent) {
  return Array(primal.aval(), std::make_shared<JvpTracer>(shared_from_this(), primal, tangent));
}

std::pair<Array, Array> JvpTrace::unpack(const Array& x) const {
  if (trace_of(x) == this) {
    const auto* t = static_cast<const JvpTracer*>(x.tracer());
    return {t->primal, t->tangent};
  }
  return {x, Array()};
}

std::vector<Array> JvpTrace::process(Prim prim, std::span<const Array> inputs, const Params& params) {
  // A primitive without a JVP rule that expands (jit_call's program, a
  // custom_vjp function: its rule is for reverse mode only) is
  // differentiated through its body.
  const PrimDef& def = prim_def(prim);
  if (def.expand && !def.jvp) return def.expand(inputs, params);
  std::vector<Array> primals, tangents;
  bool any = false;
  for (const Array& x : inputs) {
    auto [p, t] = unpack(x);
    any = any || t.defined();
    primals.push_back(p);
    tangents.push_back(t);
  }
  std::vector<Array> outputs = bind(prim, primals, params);
  if (!any || prim == Prim::stop_gradient) return outputs;
  bool floating = false;
  for (const Array& o : outputs) floating = floating || is_floating(o.dtype());
  if (!floating) return outputs;
  PAX_CHECK(def.jvp, "jvp: primitive ", prim_name(prim),
            " has no JVP rule, so forward-mode differentiation of it is "
            "not available (reverse mode, grad, is)");
  std::vector<Array> out_tangents = def.jvp(primals, tangents, outputs, params);
  PAX_CHECK(out_tangents.size() == outputs.size(), "jvp: the JVP rule of ", prim_name(prim), " returned ",
            out_tangents.size(), " tangents for ", outputs.size(), " outputs");
  std::vector<Array> result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (out_tangents[i].defined() && is_floating(outputs[i].dtype())) {
      PAX_CHECK(out_tangents[i].shape() == outputs[i].shape() && out_tangents[i].dtype() == outputs[i].dtype(),
                "jvp: the JVP rule of ", prim_name(prim), " gave a tangent ", out_tangents[i].aval().str(),
                " for output ", outputs[i].aval().str());
      result.push_back(pack(outputs[i], out_tangents[i]));
    } else {
      result.push_back(outputs[i]);
    }
  }
  return result;
}

std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const FlatFn& f, std::span<const Array> primals,
                                                           std::span<const Array> tangents, bool instantiate_zeros) {
  PAX_CHECK(primals.size() == tangents.size(), "jvp: ", primals.size(), " primals but ", tangents.size(), " tangents");
  auto trace = std::make_shared<JvpTrace>();
  std::vector<Array> outs, touts;
  {
    TraceScope scope(trace, /*dynamic=*/false);
    std::vector<Array> inputs;
    for (size_t i = 0; i < primals.size(); ++i) {
      if (!tangents[i].defined() || !is_floating(primals[i].dtype())) {
        inputs.push_back(primals[i]);
        continue;
      }
      PAX_CHECK(tangents[i].shape() == primals[i].shape() && tangents[i].dtype() == primals[i].dtype(), "jvp: tangent ",
                tangents[i].aval().str(), " does not match its primal ", primals[i].aval().str());
      inputs.push_back(trace->pack(primals[i], tangents[i]));
    }
    for (const Array& o : f(inputs)) {
      auto [p, t] = trace->unpack(o);
      outs.push_back(p);
      touts.push_back(is_floating(p.dtype()) ? t : Array());
    }
  }
  if (instantiate_zeros) {
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!touts[i].defined()) touts[i] = zeros_like_aval(outs[i]);
    }
  }
  return {outs, touts};
}

}  // namespace pax

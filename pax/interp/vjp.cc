// The vjp level, the backward pass and vjp over flat arrays.
#include "pax/interp/vjp.h"

#include "pax/ir/executable.h"
#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/ir/jaxpr.h"
#include "pax/ops/lax.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {

const Array* VjpTracer::concrete() const {
  if (primal.is_concrete()) return &primal;
  return primal.is_tracer() ? primal.tracer()->concrete() : nullptr;
}

Array VjpTrace::track(const Array& primal) {
  return Array(primal.aval(), std::make_shared<VjpTracer>(shared_from_this(), primal, next_id_++));
}

std::pair<Array, int> VjpTrace::unwrap(const Array& x) const {
  if (trace_of(x) == this) {
    const auto* t = static_cast<const VjpTracer*>(x.tracer());
    return {t->primal, t->id};
  }
  return {x, -1};
}

std::vector<Array> VjpTrace::process(Prim prim, std::span<const Array> inputs, const Params& params) {
  // A primitive without a VJP rule that expands (a compiled sub-program) is
  // differentiated equation by equation.
  const PrimDef& def = prim_def(prim);
  if (def.expand && !def.vjp) return def.expand(inputs, params);
  TapeEntry entry{prim, params, {}, {}, {}, {}};
  for (const Array& x : inputs) {
    auto [primal, id] = unwrap(x);
    entry.in_primals.push_back(primal);
    entry.in_ids.push_back(id);
  }
  if (def.vjp_forward) return process_with_residuals(std::move(entry), def.vjp_forward);
  std::vector<Array> outputs = bind(prim, entry.in_primals, params);
  if (prim == Prim::stop_gradient) return outputs;
  // Operations on values that do not depend on the inputs are not recorded.
  bool depends = false;
  for (int id : entry.in_ids) depends = depends || id >= 0;
  if (!depends) return outputs;
  // Only floating outputs carry gradients; the others are constants here.
  bool tracked = false;
  for (const Array& o : outputs) tracked = tracked || is_floating(o.dtype());
  if (!tracked) return outputs;
  PAX_CHECK(def.vjp, "grad: primitive ", prim_name(prim), " has no VJP rule, so it cannot be differentiated");
  entry.out_primals = outputs;
  std::vector<Array> result = track_outputs(outputs, entry);
  tape_.push_back(std::move(entry));
  return result;
}

std::vector<Array> VjpTrace::track_outputs(const std::vector<Array>& outputs, TapeEntry& entry) {
  std::vector<Array> result;
  for (const Array& o : outputs) {
    const bool tracked = is_floating(o.dtype());
    result.push_back(tracked ? track(o) : o);
    entry.out_ids.push_back(tracked ? next_id_ - 1 : -1);
  }
  return result;
}

// A primitive with a forward pass of its own under grad (custom_vjp's fwd):
// it gives the outputs and residuals; the tape entry keeps the residuals
// after the outputs for the VJP rule.
std::vector<Array> VjpTrace::process_with_residuals(TapeEntry entry, VjpForwardRule forward) {
  auto [outputs, residuals] = forward(entry.in_primals, entry.params);
  entry.out_primals = outputs;
  std::vector<Array> result = track_outputs(outputs, entry);
  for (const Array& r : residuals) {
    entry.out_primals.push_back(r);
    entry.out_ids.push_back(-1);
  }
  tape_.push_back(std::move(entry));
  return result;
}

Array zeros_like_aval(const Array& like) {
  return lax::broadcast_in_dim(scalar(0.0, like.dtype()), like.shape().dims(), {});
}

std::vector<Array> backward_pass(const VjpTrace& trace, std::span<const int> out_ids, std::span<const Array> out_cts) {
  std::vector<Array> ct(size_t(trace.num_slots()));
  for (size_t i = 0; i < out_ids.size(); ++i) {
    if (out_ids[i] < 0 || !out_cts[i].defined()) continue;
    Array& slot = ct[size_t(out_ids[i])];
    slot = slot.defined() ? lax::add(slot, out_cts[i]) : out_cts[i];
  }
  const std::vector<TapeEntry>& tape = trace.tape();
  std::vector<Array> cts_out;
  for (size_t k = tape.size(); k-- > 0;) {
    const TapeEntry& e = tape[k];
    cts_out.assign(e.out_ids.size(), Array());
    bool any = false;
    for (size_t i = 0; i < e.out_ids.size(); ++i) {
      if (e.out_ids[i] < 0) continue;
      Array& slot = ct[size_t(e.out_ids[i])];
      if (slot.defined()) {
        cts_out[i] = std::move(slot);
        slot = Array();  // released: nothing later in the tape reads it
        any = true;
      }
    }
    if (!any) continue;
    CotangentMask needs(e.in_ids.size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = e.in_ids[i] >= 0;
    const std::vector<Array> cts_in = prim_def(e.prim).vjp(e.in_primals, e.out_primals, cts_out, e.params, needs);
    PAX_CHECK(cts_in.size() == e.in_primals.size(), "grad: the VJP rule of ", prim_name(e.prim), " returned ",
              cts_in.size(), " cotangents for ", e.in_primals.size(), " inputs");
    for (size_t i = 0; i < cts_in.size(); ++i) {
      if (e.in_ids[i] < 0 || !cts_in[i].defined()) continue;
      const AVal& want = e.in_primals[i].aval();
      PAX_CHECK(cts_in[i].shape() == want.shape && cts_in[i].dtype() == want.dtype, "grad: the VJP rule of ",
                prim_name(e.prim), " gave a cotangent ", cts_in[i].aval().str(), " for input ", i, " of ", want.str());
      Array& slot = ct[size_t(e.in_ids[i])];
      slot = slot.defined() ? lax::add(slot, cts_in[i]) : cts_in[i];
    }
  }
  return ct;
}

FlatVjp vjp_flat(const FlatFn& f, std::span<const Array> primals, size_t num_aux) {
  auto trace = std::make_shared<VjpTrace>();
  std::vector<int> in_ids;
  std::vector<Array> outputs;
  std::vector<int> out_ids;
  {
    TraceScope scope(trace, /*dynamic=*/false);
    std::vector<Array> inputs;
    for (const Array& p : primals) {
      inputs.push_back(trace->track(p));
      in_ids.push_back(trace->num_slots() - 1);
    }
    std::vector<Array> results = f(inputs);
    PAX_CHECK(results.size() >= num_aux, "vjp: the function returned ", results.size(), " outputs but ", num_aux,
              " are declared auxiliary");
    for (size_t i = 0; i < results.size(); ++i) {
      auto [primal, id] = trace->unwrap(results[i]);
      outputs.push_back(primal);
      if (i < results.size() - num_aux) out_ids.push_back(id);
    }
  }
  FlatVjp out;
  out.outputs = std::move(outputs);
  out.backward = [trace, in_ids, out_ids](std::span<const Array> cts) {
    PAX_CHECK(cts.size() == out_ids.size(), "vjp: expected ", out_ids.size(), " cotangents, got ", cts.size());
    std::vector<Array> slots = backward_pass(*trace, out_ids, cts);
    std::vector<Array> result;
    for (size_t i = 0; i < in_ids.size(); ++i) result.push_back(slots[size_t(in_ids[i])]);
    return result;
  };
  return out;
}

}  // namespace pax

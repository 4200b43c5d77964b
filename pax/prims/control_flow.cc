// Control-flow primitives (cond, while, scan, remat): registration and the
// helpers their rules share (tracing closed sub-functions, fresh jvp / vmap
// levels inside a rule). The rules themselves are in control_flow_<name>.cc.
#include "pax/prims/control_flow.h"

#include "pax/core/error.h"
#include "pax/interp/jvp.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/prims/ad_util.h"

namespace pax {

const char* remat_policy_name(RematPolicy policy) {
  switch (policy) {
    case RematPolicy::nothing_saveable: return "nothing_saveable";
    case RematPolicy::dots_saveable: return "dots_saveable";
  }
  return "?";
}

std::string BranchList::str() const {
  std::string out = "(";
  for (size_t i = 0; i < branches.size(); ++i) out += (i ? ",\n" : "") + branches[i]->jaxpr()->str();
  return out + ")";
}

namespace cf {

ClosedFn trace_closed(const FlatFn& f, std::span<const AVal> in_avals, const std::string& name) {
  std::shared_ptr<Jaxpr> jaxpr = trace_to_jaxpr(f, in_avals);
  ClosedFn out;
  out.consts = jaxpr->consts;
  out.program = std::make_shared<Program>(convert_constvars(*jaxpr), name);
  return out;
}

bool same_type(const AVal& a, const AVal& b) { return a.shape == b.shape && a.dtype == b.dtype; }

bool same_types(std::span<const AVal> a, std::span<const AVal> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_type(a[i], b[i])) return false;
  }
  return true;
}

std::string avals_str(std::span<const AVal> avals) {
  std::string out = "(";
  for (size_t i = 0; i < avals.size(); ++i) out += (i ? ", " : "") + avals[i].str();
  return out + ")";
}

std::vector<AVal> avals_of(std::span<const Array> xs) {
  std::vector<AVal> out;
  out.reserve(xs.size());
  for (const Array& x : xs) out.push_back(x.aval());
  return out;
}

bool differentiated_here(Prim prim, std::span<const Array> operands, const Params& params) {
  return dynamic_cast<VjpTrace*>(find_top_trace(prim, operands, params)) != nullptr;
}

Batched batch_fn(const FlatFn& f, std::span<const Array> values, std::span<const int64_t> bdims,
                 const BatchInfo& info) {
  auto trace = std::make_shared<VmapTrace>(info.axis_size, info.axis_name);
  Batched out;
  TraceScope scope(trace, /*dynamic=*/false);
  std::vector<Array> inputs;
  for (size_t i = 0; i < values.size(); ++i) {
    inputs.push_back(bdims[i] >= 0 ? trace->batched(values[i], bdims[i]) : values[i]);
  }
  for (const Array& o : f(inputs)) {
    auto [v, d] = trace->unpack(o);
    out.values.push_back(v);
    out.bdims.push_back(d);
  }
  return out;
}

BatchedFn batch_program(const Program& program, const std::vector<bool>& in_batched, const std::vector<bool>& force_out,
                        const BatchInfo& info) {
  const Jaxpr& j = *program.jaxpr();
  std::vector<AVal> avals = j.in_avals();
  std::vector<int64_t> bdims(avals.size(), -1);
  for (size_t i = 0; i < avals.size(); ++i) {
    if (!in_batched[i]) continue;
    avals[i].shape.dims().insert(avals[i].shape.dims().begin(), info.axis_size);
    bdims[i] = 0;
  }
  std::vector<bool> out_batched(j.outvars.size(), false);
  FlatFn f = [&](std::span<const Array> xs) {
    Batched r = batch_fn([&](std::span<const Array> a) { return eval_jaxpr(j, a); }, xs, bdims, info);
    std::vector<Array> out;
    for (size_t k = 0; k < r.values.size(); ++k) {
      const bool batched = r.bdims[k] >= 0 || (!force_out.empty() && force_out[k]);
      out_batched[k] = batched;
      out.push_back(batched ? move_batch_axis(r.values[k], r.bdims[k], 0, info.axis_size) : r.values[k]);
    }
    return out;
  };
  BatchedFn out;
  out.fn = trace_closed(f, avals, program.name());
  out.out_batched = std::move(out_batched);
  return out;
}

std::vector<Array> call(const Program& program, std::span<const Array> args) {
  return eval_jaxpr(*program.jaxpr(), args);
}

std::vector<Array> call(const ClosedFn& fn, std::span<const Array> args) {
  return call(*fn.program, concat({fn.consts, args}));
}

std::vector<Array> concat(std::initializer_list<std::span<const Array>> parts) {
  std::vector<Array> out;
  for (std::span<const Array> p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<size_t> defined_positions(std::span<const Array> xs) {
  std::vector<size_t> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].defined()) out.push_back(i);
  }
  return out;
}

std::vector<size_t> floating_positions(std::span<const Array> xs) {
  std::vector<size_t> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (is_floating(xs[i].dtype())) out.push_back(i);
  }
  return out;
}

std::vector<Array> pick(std::span<const Array> xs, const std::vector<size_t>& idx) {
  std::vector<Array> out;
  for (size_t i : idx) out.push_back(xs[i]);
  return out;
}

std::vector<Array> place(size_t n, const std::vector<size_t>& idx, std::span<const Array> vals) {
  std::vector<Array> out(n);
  for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = vals[k];
  return out;
}

std::vector<Array> floating_tangents(std::span<const Array> outs, std::span<const Array> touts) {
  std::vector<Array> out;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (is_floating(outs[i].dtype())) out.push_back(ad::instantiate(touts[i], outs[i]));
  }
  return out;
}

std::vector<Array> spread_floating(std::span<const Array> outs, std::span<const Array> values) {
  std::vector<Array> out;
  size_t k = 0;
  for (const Array& o : outs) out.push_back(is_floating(o.dtype()) ? values[k++] : Array());
  return out;
}

}  // namespace cf

void register_control_flow_prims(PrimTable& table) {
  cf::register_cond(table);
  cf::register_while(table);
  cf::register_scan(table);
  cf::register_remat(table);
}

}  // namespace pax

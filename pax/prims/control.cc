// Primitives of the transformations themselves: stop_gradient, jit_call (a
// compiled sub-program) and custom_vjp_call (a function with a user backward
// pass). Their rules sit here like every primitive's: jit_call expands into
// its program under grad, jvp and vmap (which then process it equation by
// equation); custom_vjp_call has a VJP rule with a forward pass of its own
// (fwd: outputs and residuals), expands into its function under jvp, and
// under vmap becomes a custom_vjp_call of the batched function.
#include <cstring>

#include "pax/ir/executable.h"
#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/prims/control_flow.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// ---------------------------------------------------------------------------
// stop_gradient: the identity, with a zero derivative.

std::vector<AVal> identity_rule(std::span<const AVal> in, const Params&) { return {in[0]}; }

std::vector<Array> stop_gradient_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array>,
                                     const Params&, const CotangentMask& needs) {
  return {Array()};
}

std::vector<Array> stop_gradient_jvp(std::span<const Array>, std::span<const Array>, std::span<const Array>,
                                     const Params&) {
  return {Array()};
}

Batched stop_gradient_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params&,
                            const BatchInfo&) {
  return {{bind1(Prim::stop_gradient, {values[0]})}, {bdims[0]}};
}

// ---------------------------------------------------------------------------
// jit_call

std::vector<AVal> jit_call_rule(std::span<const AVal> in, const Params& p) {
  const Jaxpr& j = *p.object<Program>("program")->jaxpr();
  PAX_CHECK(in.size() == j.invars.size(), "jit_call: the program takes ", j.invars.size(), " inputs, got ", in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const AVal& want = j.aval(j.invars[i]);
    PAX_CHECK(in[i].shape == want.shape && in[i].dtype == want.dtype, "jit_call: input ", i, " is ", in[i].str(),
              " but the program was traced for ", want.str());
  }
  return j.out_avals();
}

std::vector<Array> jit_call_expand(std::span<const Array> in, const Params& p) {
  return eval_jaxpr(*p.object<Program>("program")->jaxpr(), in);
}

std::vector<Array> jit_call_impl(std::span<const Array> in, const Params& p) {
  return p.object<Program>("program")->executable()->run(std::vector<Array>(in.begin(), in.end()));
}

// ---------------------------------------------------------------------------
// custom_vjp_call

std::vector<AVal> custom_vjp_rule(std::span<const AVal>, const Params& p) {
  return p.object<CustomVjpRule>("rule")->out_avals;
}

std::vector<Array> custom_vjp_impl(std::span<const Array> in, const Params& p) {
  return p.object<CustomVjpRule>("rule")->fn(in);
}

std::pair<std::vector<Array>, std::vector<Array>> custom_vjp_forward(std::span<const Array> in, const Params& p) {
  auto rule = p.object<CustomVjpRule>("rule");
  auto [outputs, residuals] = rule->fwd(in);
  PAX_CHECK(outputs.size() == rule->out_avals.size(), rule->name, ": fwd returned ", outputs.size(),
            " outputs but the function has ", rule->out_avals.size());
  return {std::move(outputs), std::move(residuals)};
}

// The tape entry of a custom_vjp_call holds the outputs followed by the
// residuals of `fwd` (custom_vjp_forward).
std::vector<Array> custom_vjp_vjp(std::span<const Array> primals_in, std::span<const Array> primals_out,
                                  std::span<const Array> cts_out, const Params& p, const CotangentMask& needs) {
  auto rule = p.object<CustomVjpRule>("rule");
  const size_t n = rule->out_avals.size();
  std::vector<Array> cts;
  for (size_t i = 0; i < n; ++i) cts.push_back(cts_out[i].defined() ? cts_out[i] : zeros_like_aval(primals_out[i]));
  std::vector<Array> result = rule->bwd(primals_out.subspan(n), cts);
  PAX_CHECK(result.size() == primals_in.size(), rule->name, ": bwd returned ", result.size(), " cotangents for ",
            primals_in.size(), " inputs");
  for (size_t i = 0; i < result.size(); ++i) {
    if (!is_floating(primals_in[i].dtype())) result[i] = Array();
  }
  return result;
}

// Under vmap a custom_vjp_call stays one, of the batched function: its
// fn, fwd and bwd each run under a vmap level of the same axis (so that a
// collective over that axis inside bwd, as tensor parallelism's psum, binds
// to it), every input and output with its batch axis first. Inputs that
// were not batched are broadcast; the broadcast's own transpose sums their
// cotangents. (Batching through fn instead would differentiate fn, not bwd.)
Batched custom_vjp_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                         const BatchInfo& info) {
  auto rule = p.object<CustomVjpRule>("rule");
  const int64_t n = info.axis_size;
  std::vector<Array> inputs;
  for (size_t i = 0; i < values.size(); ++i) inputs.push_back(move_batch_axis(values[i], bdims[i], 0, n));
  // f over arrays whose axis 0 is the batch, its outputs with the batch first.
  auto batched = [info, n](const FlatFn& f) {
    return [f, info, n](std::span<const Array> xs) {
      const std::vector<int64_t> zeros(xs.size(), 0);
      Batched r = cf::batch_fn(f, xs, zeros, info);
      std::vector<Array> out;
      for (size_t j = 0; j < r.values.size(); ++j)
        out.push_back(r.values[j].defined() ? move_batch_axis(r.values[j], r.bdims[j], 0, n) : Array());
      return out;
    };
  };
  auto next = std::make_shared<CustomVjpRule>();
  next->name = rule->name;
  next->batched_axes = rule->batched_axes;
  if (!info.axis_name.empty()) next->batched_axes.push_back(info.axis_name);
  next->fn = batched(rule->fn);
  const size_t num_out = rule->out_avals.size();
  next->fwd = [fwd = batched([rule](std::span<const Array> xs) {
                 auto [outs, res] = rule->fwd(xs);
                 outs.insert(outs.end(), res.begin(), res.end());
                 return outs;
               }),
               num_out](std::span<const Array> xs) {
    std::vector<Array> all = fwd(xs);
    return std::make_pair(std::vector<Array>(all.begin(), all.begin() + int64_t(num_out)),
                          std::vector<Array>(all.begin() + int64_t(num_out), all.end()));
  };
  next->bwd = [bwd = batched([rule](std::span<const Array> res_and_cts) {
                 const size_t r = res_and_cts.size() - rule->out_avals.size();
                 return rule->bwd(res_and_cts.first(r), res_and_cts.subspan(r));
               })](std::span<const Array> residuals, std::span<const Array> cts) {
    std::vector<Array> both(residuals.begin(), residuals.end());
    both.insert(both.end(), cts.begin(), cts.end());
    return bwd(both);
  };
  std::vector<AVal> avals;
  for (const Array& x : inputs) avals.push_back(x.aval());
  next->jaxpr = trace_to_jaxpr(next->fn, avals);
  next->out_avals = next->jaxpr->out_avals();
  std::vector<Array> out =
      bind(Prim::custom_vjp_call, inputs, Params{{"rule", std::static_pointer_cast<const ParamObject>(next)}});
  return {out, std::vector<int64_t>(out.size(), 0)};
}

}  // namespace

void register_control_prims(PrimTable& t) {
  t[size_t(Prim::stop_gradient)] = PrimDef{.shape_rule = identity_rule, .output_aliases_input = 0};
  t[size_t(Prim::stop_gradient)].vjp = stop_gradient_vjp;
  t[size_t(Prim::stop_gradient)].jvp = stop_gradient_jvp;
  t[size_t(Prim::stop_gradient)].batch = stop_gradient_batch;

  t[size_t(Prim::jit_call)] = PrimDef{jit_call_rule};
  t[size_t(Prim::jit_call)].impl = jit_call_impl;
  t[size_t(Prim::jit_call)].expand = jit_call_expand;

  t[size_t(Prim::custom_vjp_call)] = PrimDef{custom_vjp_rule};
  t[size_t(Prim::custom_vjp_call)].impl = custom_vjp_impl;
  t[size_t(Prim::custom_vjp_call)].expand = custom_vjp_impl;
  t[size_t(Prim::custom_vjp_call)].vjp = custom_vjp_vjp;
  t[size_t(Prim::custom_vjp_call)].vjp_forward = custom_vjp_forward;
  t[size_t(Prim::custom_vjp_call)].batch = custom_vjp_batch;
}

}  // namespace pax

// remat (checkpoint): evaluate a function whose intermediates are not kept
// for reverse mode. Under grad the forward pass runs the whole jaxpr one
// level down (one tape entry, no inner tape), and the VJP rule recomputes it
// under a fresh grad level before applying the backward pass. With
// dots_saveable the forward pass also returns the dot_general results
// (residual outputs) and the recomputation reuses them instead of
// multiplying again. JVP and batching transform the jaxpr and stay remat.
#include <unordered_map>

#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/interp/jvp.h"
#include "pax/prims/control_flow.h"

namespace pax::cf {
namespace {

RematPolicy policy_of(const Params& p) {
  const std::string& s = p.s("policy");
  if (s == "nothing_saveable") return RematPolicy::nothing_saveable;
  if (s == "dots_saveable") return RematPolicy::dots_saveable;
  PAX_FAIL("remat: unknown policy '", s, "'; valid: nothing_saveable, dots_saveable");
}

std::vector<AVal> remat_rule(std::span<const AVal> in, const Params& p) {
  const Jaxpr& j = *p.object<Program>("jaxpr")->jaxpr();
  policy_of(p);
  std::vector<AVal> want = j.in_avals();
  PAX_CHECK(same_types(want, in), "remat: the function takes ", avals_str(want), " but the operands are ",
            avals_str(in));
  const int64_t num_res = p.i("num_res");
  PAX_CHECK(num_res >= 0 && size_t(num_res) <= j.outvars.size(), "remat: num_res ", num_res, " exceeds the ",
            j.outvars.size(), " outputs");
  return j.out_avals();
}

std::vector<Array> remat_impl(std::span<const Array> in, const Params& p) {
  return p.object<Program>("jaxpr")->executable()->run(std::vector<Array>(in.begin(), in.end()));
}

// A tape entry standing for a dot_general whose result was kept by the
// forward pass: its backward pass is the dot's VJP, its value the kept one.
Array kept_dot(std::span<const Array> inputs, const Array& kept, const Params& dot_params) {
  auto rule = std::make_shared<CustomVjpRule>();
  rule->name = "remat_kept_dot";
  rule->out_avals = {kept.aval()};
  rule->fn = [kept](std::span<const Array>) { return std::vector<Array>{kept}; };
  rule->fwd = [kept](std::span<const Array> in) {
    return std::make_pair(std::vector<Array>{kept}, std::vector<Array>(in.begin(), in.end()));
  };
  rule->bwd = [kept, dot_params](std::span<const Array> residuals, std::span<const Array> cts) {
    const std::vector<Array> out{kept};
    return prim_def(Prim::dot_general).vjp(residuals, out, cts, dot_params, {});
  };
  return bind1(Prim::custom_vjp_call, inputs, Params{{"rule", std::static_pointer_cast<const ParamObject>(rule)}});
}

// Recomputes the jaxpr under a fresh grad level (reusing kept dot results)
// and runs its backward pass.
std::vector<Array> remat_vjp(std::span<const Array> primals_in, std::span<const Array> primals_out,
                             std::span<const Array> cts_out, const Params& p, const CotangentMask& needs) {
  const Jaxpr& j = *p.object<Program>("jaxpr")->jaxpr();
  const size_t num_res = size_t(p.i("num_res")), num_out = j.outvars.size() - num_res;
  std::unordered_map<Var, size_t> kept;  // dot output var -> its residual output
  for (size_t k = 0; k < num_res; ++k) kept.emplace(j.outvars[num_out + k], num_out + k);
  auto trace = std::make_shared<VjpTrace>();
  std::vector<int> in_ids, out_ids;
  {
    TraceScope scope(trace, /*dynamic=*/false);
    std::vector<Array> env(j.avals.size());
    for (size_t i = 0; i < primals_in.size(); ++i) {
      env[size_t(j.invars[i])] = trace->track(primals_in[i]);
      in_ids.push_back(trace->num_slots() - 1);
    }
    std::vector<Array> inputs;
    for (const Eqn& e : j.eqns) {
      inputs.clear();
      for (Var v : e.inputs) inputs.push_back(env[size_t(v)]);
      auto it = e.prim == Prim::dot_general ? kept.find(e.outputs[0]) : kept.end();
      if (it != kept.end()) {
        const Array& value = primals_out[it->second];
        bool tracked = false;
        for (const Array& x : inputs) tracked = tracked || trace_of(x) == trace.get();
        env[size_t(e.outputs[0])] = tracked ? kept_dot(inputs, value, e.params) : value;
        continue;
      }
      std::vector<Array> out = bind(e.prim, inputs, e.params);
      for (size_t i = 0; i < out.size(); ++i) env[size_t(e.outputs[i])] = std::move(out[i]);
    }
    for (Var v : j.outvars) out_ids.push_back(trace->unwrap(env[size_t(v)]).second);
  }
  std::vector<Array> slots = backward_pass(*trace, out_ids, cts_out);
  std::vector<Array> result;
  for (size_t i = 0; i < primals_in.size(); ++i) {
    result.push_back(is_floating(primals_in[i].dtype()) ? slots[size_t(in_ids[i])] : Array());
  }
  return result;
}

std::vector<Array> remat_jvp(std::span<const Array> primals, std::span<const Array> tangents,
                             std::span<const Array> primals_out, const Params& p) {
  auto program = p.object<Program>("jaxpr");
  const std::vector<size_t> with_t = defined_positions(tangents);
  const std::vector<Array> inputs = concat({primals, pick(tangents, with_t)});
  const size_t n = primals.size();
  // [args, tangents of with_t] -> tangents of the floating outputs
  ClosedFn jvp = trace_closed(
      [&](std::span<const Array> xs) {
        auto [outs, touts] = jvp_flat([&](std::span<const Array> a) { return call(*program, a); }, xs.first(n),
                                      place(n, with_t, xs.subspan(n)), false);
        return floating_tangents(outs, touts);
      },
      avals_of(inputs), "remat_jvp");
  return spread_floating(primals_out, cf::remat(jvp.program, policy_of(p), concat({jvp.consts, inputs})));
}

Batched remat_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                    const BatchInfo& info) {
  auto program = p.object<Program>("jaxpr");
  std::vector<bool> in_batched;
  std::vector<Array> moved;
  for (size_t i = 0; i < values.size(); ++i) {
    in_batched.push_back(bdims[i] >= 0);
    moved.push_back(bdims[i] >= 0 ? move_batch_axis(values[i], bdims[i], 0, info.axis_size) : values[i]);
  }
  BatchedFn b = batch_program(*program, in_batched, {}, info);
  Batched result;
  result.values = cf::remat(b.fn.program, policy_of(p), concat({b.fn.consts, moved}));
  for (bool batched : b.out_batched) result.bdims.push_back(batched ? 0 : -1);
  return result;
}

// The jaxpr with the results of its dot_general equations appended to its
// outputs; nullptr when it has none.
std::shared_ptr<const Program> with_dot_outputs(const Program& program) {
  const Jaxpr& src = *program.jaxpr();
  std::vector<Var> dots;
  for (const Eqn& e : src.eqns) {
    if (e.prim == Prim::dot_general) dots.push_back(e.outputs[0]);
  }
  if (dots.empty()) return nullptr;
  auto j = std::make_shared<Jaxpr>(src);
  j->outvars.insert(j->outvars.end(), dots.begin(), dots.end());
  return std::make_shared<Program>(j, program.name());
}

}  // namespace

std::vector<Array> remat(const std::shared_ptr<const Program>& jaxpr, RematPolicy policy, std::span<const Array> args) {
  std::shared_ptr<const Program> program = jaxpr;
  int64_t num_res = 0;
  if (policy == RematPolicy::dots_saveable && differentiated_here(Prim::remat, args)) {
    if (auto augmented = with_dot_outputs(*jaxpr)) {
      num_res = int64_t(augmented->jaxpr()->outvars.size() - jaxpr->jaxpr()->outvars.size());
      program = augmented;
    }
  }
  Params params{{"jaxpr", std::static_pointer_cast<const ParamObject>(program)},
                {"policy", std::string(remat_policy_name(policy))},
                {"num_res", num_res}};
  std::vector<Array> out = bind(Prim::remat, args, params);
  out.resize(out.size() - size_t(num_res));
  return out;
}

void register_remat(PrimTable& t) {
  t[size_t(Prim::remat)] =
      PrimDef{.shape_rule = remat_rule, .impl = remat_impl, .vjp = remat_vjp, .jvp = remat_jvp, .batch = remat_batch};
}

}  // namespace pax::cf

// The backend-neutral compiler (see lower.h).
#include "pax/compile/lower.h"

#include <optional>

#include "pax/compile/collective_order.h"
#include "pax/compile/cost.h"
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/compile/row_sweep.h"
#include "pax/core/error.h"
#include "pax/prims/dot_params.h"

namespace pax {
namespace {

// `jaxpr` with its first constant_args.size() inputs turned into constants.
Jaxpr bind_constant_args(const Jaxpr& jaxpr, const std::vector<Array>& values) {
  PAX_CHECK(values.size() <= jaxpr.invars.size(), "compile: ", values.size(), " constant arguments for a program of ",
            jaxpr.invars.size(), " inputs");
  Jaxpr out = jaxpr;
  for (size_t i = 0; i < values.size(); ++i) {
    const AVal& want = jaxpr.aval(jaxpr.invars[i]);
    PAX_CHECK(values[i].is_concrete() && values[i].shape() == want.shape && values[i].dtype() == want.dtype,
              "compile: constant argument ", i, " is ", values[i].aval().str(), " but the program expects ",
              want.str());
    out.constvars.push_back(jaxpr.invars[i]);
    out.consts.push_back(values[i]);
  }
  out.invars.erase(out.invars.begin(), out.invars.begin() + int64_t(values.size()));
  return out;
}

// A transpose whose operand is a product's result that nothing else reads
// costs a pass over memory; the product writes its result in the
// transpose's layout instead (oneDNN takes strided outputs; where it cannot,
// the kernel transposes at the end), and the transpose becomes an alias of
// those bytes. Attention's head transposes are such.
void fold_transposes_into_products(LoweredProgram& lp) {
  const Jaxpr& jaxpr_ = lp.jaxpr;
  StepSchedule& schedule_ = lp.schedule;
  std::vector<std::vector<int64_t>>& out_strides_ = lp.out_strides;
  std::vector<int> readers(jaxpr_.avals.size(), 0), producer(jaxpr_.avals.size(), -1);
  for (Var v : jaxpr_.outvars) ++readers[size_t(v)];
  for (size_t s = 0; s < schedule_.steps.size(); ++s) {
    const Step& step = schedule_.steps[s];
    for (Var v : schedule_.inputs(jaxpr_, step)) ++readers[size_t(v)];
    for (Var v : schedule_.outputs(jaxpr_, step)) producer[size_t(v)] = int(s);
  }
  for (size_t s = 0; s < schedule_.steps.size(); ++s) {
    Step& step = schedule_.steps[s];
    if (step.kind != Step::Kind::kernel || jaxpr_.eqns[step.index].prim != Prim::transpose) continue;
    const Eqn& t = jaxpr_.eqns[step.index];
    const Var d = t.inputs[0];
    const int ps = producer[size_t(d)];
    if (ps < 0 || readers[size_t(d)] != 1 || schedule_.steps[size_t(ps)].kind != Step::Kind::kernel ||
        jaxpr_.eqns[schedule_.steps[size_t(ps)].index].prim != Prim::dot_general ||
        dot_has_bias(jaxpr_.eqns[schedule_.steps[size_t(ps)].index].params) ||
        dot_has_multiplier(jaxpr_.eqns[schedule_.steps[size_t(ps)].index].params) ||
        dot_has_relu(jaxpr_.eqns[schedule_.steps[size_t(ps)].index].params)) {
      continue;
    }
    // Axis perm[j] of the product is axis j of the transpose. Only where the
    // product's last axis stays last: its rows are then written contiguously
    // (oneDNN writes a column-major result at under half its speed).
    const Ints& perm = t.params.ints("permutation");
    if (perm.empty() || perm.back() != int64_t(perm.size()) - 1) continue;
    const std::vector<int64_t> t_strides = jaxpr_.aval(t.outputs[0]).shape.strides();
    std::vector<int64_t> strides(perm.size());
    for (size_t j = 0; j < perm.size(); ++j) strides[size_t(perm[j])] = t_strides[j];
    out_strides_[size_t(ps)] = std::move(strides);
    step.kind = Step::Kind::alias;
  }
}

}  // namespace

LoweredProgram lower(JaxprPtr source, const CompileOptions& options, const LoweringTarget& target) {
  PAX_CHECK(source, "compile: no jaxpr");
  LoweredProgram lp;
  lp.source = std::move(source);
  lp.skip = options.constant_args.size();
  Jaxpr j = lp.skip ? bind_constant_args(*lp.source, options.constant_args) : *lp.source;
  if (options.optimize) {
    PassOptions passes{options.fold_limit,
                       [&target](const Jaxpr& jaxpr, const Eqn& e) { return target.supports_op(jaxpr, e); }};
    j = optimize(j, passes);
    if (options.fuse && target.product_bias) {
      j = dce(fold_bias_into_products(
          j, [&target](const Jaxpr& jaxpr, const Eqn& e) { return target.product_bias(jaxpr, e); }));
      passes::check_pass(j, "fold_bias_into_products");
    }
    if (options.fuse && target.product_multiplier) {
      j = dce(fold_multipliers_into_products(
          j, [&target](const Jaxpr& jaxpr, const Eqn& e) { return target.product_multiplier(jaxpr, e); }));
      passes::check_pass(j, "fold_multipliers_into_products");
    }
    if (options.fuse && target.product_relu) {
      j = dce(fold_relus_into_products(
          j, [&target](const Jaxpr& jaxpr, const Eqn& e) { return target.product_relu(jaxpr, e); }));
      passes::check_pass(j, "fold_relus_into_products");
    }
  }
  lp.jaxpr = std::move(j);
  lp.schedule = schedule(lp.jaxpr, options.fuse, target);
  if (options.optimize && options.fuse) {
    if (std::optional<Jaxpr> d = duplicate_producers(lp.jaxpr, lp.schedule)) {
      passes::check_pass(*d, "duplicate_producers");
      lp.jaxpr = std::move(*d);
      lp.schedule = schedule(lp.jaxpr, options.fuse, target);
    }
  }
  if (options.optimize) start_collectives_early(lp.jaxpr, lp.schedule);
  if (options.optimize && options.fuse) find_row_sweeps(lp.jaxpr, lp.schedule, target);
  lp.out_strides.assign(lp.schedule.steps.size(), {});
  if (options.optimize && options.fuse) fold_transposes_into_products(lp);
  std::vector<bool> donate;
  for (size_t i = lp.skip; i < options.donate.size(); ++i) donate.push_back(options.donate[i]);
  lp.plan = plan_memory(lp.jaxpr, lp.schedule, donate);
  lp.cost = schedule_cost(lp.jaxpr, lp.schedule);
  return lp;
}

}  // namespace pax

// Accumulating wrappers: multi_steps (gradient accumulation), ema of the
// updates and the parameter EMA (declared in wrappers.h).
#include <memory>
#include <utility>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"
#include "pax/optim/wrappers.h"

namespace pax::optim {

GradientTransformation multi_steps(GradientTransformation inner, int every_k, bool use_grad_mean) {
  const char* op = "multi_steps";
  check_transformation(inner, op, "the inner transformation");
  check_hyper(every_k >= 1, op, "every_k", every_k, ">= 1");
  auto in = std::make_shared<const GradientTransformation>(std::move(inner));
  GradientTransformation t;
  t.init = [in](const Tree& params) {
    return Tree::dict({{"mini_step", zero_count()},
                       {"gradient_step", zero_count()},
                       {"inner_state", in->init(params)},
                       {"acc_grads", zeros_like_moments(params)}});
  };
  t.update = [in, op, every_k, use_grad_mean](const Tree& updates, const Tree& state, const Tree& params) {
    const Array& mini_step = state_entry(op, state, "mini_step").leaf();
    const Array& gradient_step = state_entry(op, state, "gradient_step").leaf();
    const Tree& inner_state = state_entry(op, state, "inner_state");
    const Tree& acc0 = state_entry(op, state, "acc_grads");
    check_structure(op, updates, acc0, "state 'acc_grads'");
    // Welford's running mean: acc + (g - acc) / (n + 1) stays accurate for long runs.
    Tree acc = tree_map(
        [&](const Array& g, const Array& a) {
          Array gg = g.astype(a.dtype());
          return use_grad_mean ? a + (gg - a) / (mini_step + 1).astype(a.dtype()) : a + gg;
        },
        updates, acc0);
    Array emit = equal(mini_step, every_k - 1);
    // The inner update always runs (so this traces) and its results are
    // selected: only an emitting step changes the inner state.
    Tree inner_in = tree_map([](const Array& a, const Array& g) { return a.astype(g.dtype()); }, acc, updates);
    auto [inner_updates, new_inner] = in->update(inner_in, inner_state, params);
    Tree out = tree_map([&](const Array& u) { return where(emit, u, 0.0).astype(u.dtype()); }, inner_updates);
    Tree new_state = Tree::dict(
        {{"mini_step", remainder(safe_increment(mini_step), every_k).astype(mini_step.dtype())},
         {"gradient_step", where(emit, safe_increment(gradient_step), gradient_step).astype(gradient_step.dtype())},
         {"inner_state", tree_select(emit, new_inner, inner_state, "multi_steps: the inner state")},
         {"acc_grads", tree_map([&](const Array& a) { return where(emit, 0.0, a).astype(a.dtype()); }, acc)}});
    return std::make_pair(out, new_state);
  };
  return t;
}

Array multi_steps_has_updated(const Tree& state) {
  const char* op = "multi_steps_has_updated";
  return logical_and(equal(state_entry(op, state, "mini_step").leaf(), 0),
                     greater(state_entry(op, state, "gradient_step").leaf(), 0));
}

GradientTransformation ema(double decay, bool debias) {
  const char* op = "ema";
  check_hyper(decay >= 0 && decay <= 1, op, "decay", decay, "in [0, 1]");
  GradientTransformation t;
  t.init = [](const Tree& params) {
    return Tree::dict({{"count", zero_count()}, {"ema", zeros_like_moments(params)}});
  };
  t.update = [op, decay, debias](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& ema0 = state_entry(op, state, "ema");
    const Array& count = state_entry(op, state, "count").leaf();
    check_structure(op, updates, ema0, "state 'ema'");
    Tree e =
        tree_map([decay](const Array& g, const Array& m) { return (1.0 - decay) * g.astype(m.dtype()) + decay * m; },
                 updates, ema0);
    Array t1 = safe_increment(count);
    Tree out =
        debias
            ? tree_map([&](const Array& m) { return m / bias_correction(scalar(decay, m.dtype()), t1, m.dtype()); }, e)
            : e;
    return std::make_pair(out, Tree::dict({{"count", t1}, {"ema", e}}));
  };
  return t;
}

GradientTransformation with_param_ema(GradientTransformation inner, double decay) {
  const char* op = "with_param_ema";
  check_transformation(inner, op, "the inner transformation");
  check_hyper(decay >= 0 && decay <= 1, op, "decay", decay, "in [0, 1]");
  auto in = std::make_shared<const GradientTransformation>(std::move(inner));
  GradientTransformation t;
  t.init = [in](const Tree& params) {
    Tree start = tree_map([](const Array& p) { return p.astype(moment_dtype(p.dtype())); }, params);
    return Tree::dict({{"inner_state", in->init(params)}, {"ema", start}});
  };
  t.update = [in, op, decay](const Tree& updates, const Tree& state, const Tree& params) {
    require_params(op, updates, params);
    const Tree& ema0 = state_entry(op, state, "ema");
    check_structure(op, updates, ema0, "state 'ema'");
    auto [out, new_inner] = in->update(updates, state_entry(op, state, "inner_state"), params);
    // The average is of the parameters the model will have: apply_updates'
    // result, rounded to the parameter dtype.
    Tree new_params = apply_updates(params, out);
    Tree e =
        tree_map([decay](const Array& p, const Array& m) { return decay * m + (1.0 - decay) * p.astype(m.dtype()); },
                 new_params, ema0);
    return std::make_pair(out, Tree::dict({{"inner_state", new_inner}, {"ema", e}}));
  };
  return t;
}

Tree param_ema(const Tree& opt_state) {
  const Tree* found = find_dict_with_keys(opt_state, {"inner_state", "ema"});
  PAX_CHECK(found != nullptr, "param_ema: the optimizer state holds no with_param_ema state; got ", opt_state.str());
  return (*found)["ema"];
}

}  // namespace pax::optim

// inject_hyperparams: hyperparameters that follow schedules, recorded in the
// optimizer state (declared in wrappers.h).
#include <memory>
#include <utility>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"
#include "pax/optim/wrappers.h"

namespace pax::optim {

namespace {

constexpr const char* kInjectOp = "inject_hyperparams";

// The factory's arguments at step `count` and the values to record.
struct HyperparamValues {
  std::map<std::string, ScalarOrSchedule> arguments;
  Tree recorded;
};

HyperparamValues evaluate(const std::map<std::string, ScalarOrSchedule>& hyperparams, const Array& count) {
  HyperparamValues out;
  Tree::Dict recorded;
  for (const auto& [name, h] : hyperparams) {
    if (h.is_schedule()) {
      Array v = h(count);
      PAX_CHECK(v.ndim() == 0, kInjectOp, ": the schedule of '", name, "' must return a scalar, got ", v.aval().str());
      // The inner transformation reads the evaluated value whatever count it asks for.
      out.arguments.emplace(name, ScalarOrSchedule(Schedule([v](const Array&) { return v; })));
      recorded.emplace_back(name, v);
    } else {
      out.arguments.emplace(name, h);
      recorded.emplace_back(name, scalar(h.constant(), DType::f32));
    }
  }
  out.recorded = Tree::dict(std::move(recorded));
  return out;
}

GradientTransformation build(const HyperparamFactory& factory, const HyperparamValues& values) {
  GradientTransformation t = factory(values.arguments);
  PAX_CHECK(t.init && t.update, kInjectOp, ": the factory returned a transformation without init or update");
  return t;
}

}  // namespace

GradientTransformation inject_hyperparams(HyperparamFactory factory,
                                          std::map<std::string, ScalarOrSchedule> hyperparams) {
  PAX_CHECK(static_cast<bool>(factory), kInjectOp, ": the factory is an empty function");
  for (const auto& [name, h] : hyperparams) PAX_CHECK(!name.empty(), kInjectOp, ": a hyperparameter has an empty name");
  auto hps = std::make_shared<const std::map<std::string, ScalarOrSchedule>>(std::move(hyperparams));
  GradientTransformation t;
  t.init = [factory, hps](const Tree& params) {
    Array count = zero_count();
    HyperparamValues values = evaluate(*hps, count);
    return Tree::dict(
        {{"count", count}, {"hyperparams", values.recorded}, {"inner_state", build(factory, values).init(params)}});
  };
  t.update = [factory, hps](const Tree& updates, const Tree& state, const Tree& params) {
    const Array& count = state_entry(kInjectOp, state, "count").leaf();
    HyperparamValues values = evaluate(*hps, count);
    auto [out, inner] = build(factory, values).update(updates, state_entry(kInjectOp, state, "inner_state"), params);
    return std::make_pair(
        out, Tree::dict({{"count", safe_increment(count)}, {"hyperparams", values.recorded}, {"inner_state", inner}}));
  };
  return t;
}

Array hyperparam(const Tree& opt_state, const std::string& name) {
  const Tree* found = find_dict_with_keys(opt_state, {"count", "hyperparams", "inner_state"});
  PAX_CHECK(found != nullptr, "hyperparam: the optimizer state holds no inject_hyperparams state; got ",
            opt_state.str());
  const Tree& values = (*found)["hyperparams"];
  if (!values.contains(name)) {
    std::string valid;
    for (const std::string& k : values.keys()) valid += (valid.empty() ? "'" : ", '") + k + "'";
    PAX_FAIL("hyperparam: no hyperparameter '", name, "'; the state records ", valid.empty() ? "none" : valid);
  }
  return values[name].leaf();
}

}  // namespace pax::optim

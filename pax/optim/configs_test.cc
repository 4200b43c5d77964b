// Configurable schedules and optimizers: configs build the same optimizers as
// the aliases, the learning rate follows learning_rate * lr_schedule, weight
// decay skips vectors unless asked, and mistakes name the valid types.
#include "pax/optim/configs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "pax/config/config.h"
#include "pax/ops/numpy.h"
#include "pax/optim/aliases.h"
#include "pax/optim/schedules.h"
#include "pax/optim/wrappers.h"
#include "pax/testing/testing.h"

namespace pax::optim {
namespace {

using testing::all_close;

Tree toy_params() {
  return Tree::dict({{"w", array<double>({1.0, -2.0, 0.5, 3.0}, {2, 2})}, {"b", array<double>({0.5, -1.0})}});
}

// Gradients of 0.5 * sum((p - 0.25)^2): p - 0.25.
Tree toy_grads(const Tree& params) {
  return tree_map([](const Array& p) { return p - 0.25; }, params);
}

Tree run(const GradientTransformation& tx, int steps) {
  Tree params = toy_params();
  Tree state = tx.init(params);
  for (int i = 0; i < steps; ++i) {
    auto [updates, next] = tx.update(toy_grads(params), state, params);
    params = apply_updates(params, updates);
    state = next;
  }
  return params;
}

bool trees_close(const Tree& a, const Tree& b, double tol) {
  auto la = tree_leaves(a), lb = tree_leaves(b);
  if (la.size() != lb.size()) return false;
  for (size_t i = 0; i < la.size(); ++i)
    if (!all_close(la[i], lb[i], tol, tol)) return false;
  return true;
}

// An optimizer defined outside pax/optim registers itself by name, as a
// user's own would: plain SGD with a gradient scale of its own.
struct ScaledSgdForTest : OptimizerHParams {
  double gradient_scale = 1.0;
  PAX_HPARAMS(ScaledSgdForTest, OptimizerHParams, (gradient_scale, "Multiplies the gradients."));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask&) const override {
    return chain({scale(gradient_scale), sgd(learning_rate)});
  }
};
PAX_REGISTER_OPTIMIZER(ScaledSgdForTest);

TEST(OptimizerConfigs, AnOptimizerDefinedElsewhereRegistersItselfByName) {
  const std::vector<std::string> names = registered_hparams("optimizer");
  EXPECT_NE(std::find(names.begin(), names.end(), "ScaledSgdForTest"), names.end());
  Config c = Config::make("ScaledSgdForTest");
  c.apply_overrides({"learning_rate=0.1", "gradient_scale=0.5"});
  const GradientTransformation tx = optimizer_hparams(c.root(), "optimizer").make();
  const Tree params = toy_params();
  auto [updates, state] = tx.update(toy_grads(params), tx.init(params), params);
  const Tree want = tree_map([](const Array& g) { return g * -0.05; }, toy_grads(params));
  EXPECT_TRUE(trees_close(updates, want, 1e-7));                                // the learning rate is an f32 scalar
  EXPECT_PAX_ERROR(c.apply_overrides({"gradient_scael=2"}), "gradient_scale");  // typo: names the field
}

TEST(OptimizerConfigs, AdamConfigEqualsTheAliasWithTheScheduledRate) {
  Config c = Config::make("Adam");
  c.apply_overrides({"learning_rate=0.1", "beta2=0.99", "weight_decay=0.01", "lr_schedule=LinearRampupCosineDecay",
                     "lr_schedule.warmup_steps=2", "lr_schedule.decay_start=3", "lr_schedule.decay_end=6"});
  const auto& hp = optimizer_hparams(c.root(), "optimizer");
  Schedule want_lr = [](const Array& count) { return linear_rampup_cosine_decay(2, 3, 6, 1.0, 0.01)(count) * 0.1; };
  for (int64_t step : {0, 1, 2, 4, 6, 9})
    EXPECT_NEAR(schedule_value(hp.learning_rate_schedule(), step), schedule_value(want_lr, step), 1e-7) << step;
  // Matrices decay, vectors do not (decay_vectors = false).
  GradientTransformation want = adamw(
      want_lr,
      {.b2 = 0.99, .weight_decay = 0.01, .mask = [](const std::string&, const Array& p) { return p.ndim() >= 2; }});
  EXPECT_TRUE(trees_close(run(hp.make(), 7), run(want, 7), 1e-12));
}

// An optimizer's HParams hold its alias's options: a config's field is the
// option itself, and an option set to a schedule in code cannot be shown as
// a config value.
TEST(OptimizerConfigs, FieldsAreTheHeldOptions) {
  Config c = Config::make("Lamb");
  c.apply_overrides({"beta1=0.8", "epsilon=1e-4"});
  const auto& lamb = dynamic_cast<const Lamb&>(optimizer_hparams(c.root(), "optimizer"));
  EXPECT_EQ(lamb.options.b1.constant(), 0.8);
  EXPECT_EQ(lamb.options.eps.constant(), 1e-4);
  EXPECT_EQ(lamb.options.b2.constant(), 0.999);
  Adam scheduled;
  scheduled.options.b1 = constant_schedule(0.9);
  EXPECT_PAX_ERROR(Config::of(scheduled).str(), "a schedule, which a config cannot hold");
}

TEST(OptimizerConfigs, SgdWeightDecayIsDecoupledAndScaledByTheRate) {
  Config c = Config::make("Sgd");
  c.apply_overrides({"learning_rate=0.5", "weight_decay=0.1", "decay_vectors=true"});
  Tree params = toy_params();
  GradientTransformation tx = optimizer_hparams(c.root(), "optimizer").make();
  auto [updates, state] = tx.update(toy_grads(params), tx.init(params), params);
  // update = -lr * (g + wd * p)
  std::vector<double> w = params["w"].leaf().to_vector<double>();
  std::vector<double> want;
  for (double p : w) want.push_back(-0.5 * ((p - 0.25) + 0.1 * p));
  EXPECT_TRUE(all_close(updates["w"].leaf(), want, 1e-12, 1e-12));
  std::vector<double> b = params["b"].leaf().to_vector<double>();
  EXPECT_TRUE(all_close(updates["b"].leaf(), {-0.5 * ((b[0] - 0.25) + 0.1 * b[0]), -0.5 * ((b[1] - 0.25) + 0.1 * b[1])},
                        1e-12, 1e-12));
}

TEST(OptimizerConfigs, AdafactorWeightDecayIsScaledByTheRate) {
  Config plain = Config::make("Adafactor"), decayed = Config::make("Adafactor");
  plain.apply_overrides({"learning_rate=0.5", "decay_vectors=true"});
  decayed.apply_overrides({"learning_rate=0.5", "decay_vectors=true", "weight_decay=0.1"});
  Tree params = toy_params();
  GradientTransformation without = optimizer_hparams(plain.root(), "optimizer").make();
  GradientTransformation with = optimizer_hparams(decayed.root(), "optimizer").make();
  Tree u0 = without.update(toy_grads(params), without.init(params), params).first;
  Tree u1 = with.update(toy_grads(params), with.init(params), params).first;
  // The decay adds -lr * wd * p to the update.
  for (const char* name : {"w", "b"}) {
    std::vector<double> p = params[name].leaf().to_vector<double>(), u = u0[name].leaf().to_vector<double>();
    for (size_t i = 0; i < p.size(); ++i) u[i] -= 0.5 * 0.1 * p[i];
    EXPECT_TRUE(all_close(u1[name].leaf(), u, 1e-12, 1e-12)) << name;
  }
}

TEST(OptimizerConfigs, EveryOptimizerMinimisesTheToyProblem) {
  for (const std::string& name : registered_hparams("optimizer")) {
    Config c = Config::make(name);
    c.set("learning_rate", name == "Adagrad" ? "0.5" : "0.05");  // adagrad's steps shrink as 1/sqrt(t)
    Tree params = run(optimizer_hparams(c.root(), "optimizer").make(), 400);
    for (const Array& leaf : tree_leaves(params))
      for (double v : leaf.to_vector<double>()) EXPECT_NEAR(v, 0.25, 0.06) << name;
  }
}

TEST(OptimizerConfigs, ParameterEmaAndSchedules) {
  Config c = Config::make("Sgd");
  c.apply_overrides({"learning_rate=0.1", "ema_decay=0.5"});
  GradientTransformation tx = optimizer_hparams(c.root(), "optimizer").make();
  Tree params = toy_params();
  Tree state = tx.init(params);
  auto [updates, next] = tx.update(toy_grads(params), state, params);
  Tree after = apply_updates(params, updates);
  // ema = 0.5 * initial + 0.5 * after
  Tree want = tree_map([](const Array& p, const Array& q) { return p * 0.5 + q * 0.5; }, params, after);
  EXPECT_TRUE(trees_close(param_ema(next), want, 1e-12));

  Config pw = Config::make("PiecewiseConstantSchedule");
  pw.apply_overrides({"boundaries=[10, 20]", "values=[1.0, 0.5, 0.25]"});
  Schedule s = make_schedule(pw.root(), "lr_schedule");
  EXPECT_DOUBLE_EQ(schedule_value(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(schedule_value(s, 10), 0.5);
  EXPECT_DOUBLE_EQ(schedule_value(s, 25), 0.25);
  Config ex = Config::make("LinearRampupExponentialDecay");
  ex.apply_overrides({"warmup_steps=10", "decay_start=10", "decay_end=20", "max=2.0"});
  EXPECT_NEAR(schedule_value(make_schedule(ex.root(), "s"), 5),
              schedule_value(linear_rampup_exponential_decay(10, 10, 20, 2.0, 0.01), 5), 1e-7);
}

TEST(OptimizerConfigs, Errors) {
  Config c = Config::make("Adam");
  c.set("lr_schedule", "Sgd");  // a registered type, but not a schedule
  EXPECT_PAX_ERROR(optimizer_hparams(c.root(), "optimizer").make(), "Adam.lr_schedule must be a schedule (");
  c.set("lr_schedule", "ConstantSchedule");
  for (const char* bad : {"nan", "inf", "-1"}) {
    c.set("learning_rate", bad);
    EXPECT_PAX_ERROR(optimizer_hparams(c.root(), "optimizer").make(), "learning_rate must be a finite number >= 0");
  }
  c.set("learning_rate", "0");  // a frozen model: allowed
  optimizer_hparams(c.root(), "optimizer").make();
  EXPECT_PAX_ERROR(optimizer_hparams(Config::make("ConstantSchedule").root(), "learner.optimizer"),
                   "learner.optimizer must be an optimizer (");
  EXPECT_PAX_ERROR(make_schedule(Config::make("Sgd").root(), "lr_schedule"), "must be a schedule (");
  Config pw = Config::make("PiecewiseConstantSchedule");
  pw.apply_overrides({"boundaries=[10]", "values=[1.0]"});
  EXPECT_PAX_ERROR(make_schedule(pw.root(), "s"), "one value more than boundaries");
  Config neg = Config::make("Sgd");
  neg.set("weight_decay", "-1");
  EXPECT_PAX_ERROR(optimizer_hparams(neg.root(), "o").make(), "weight_decay must be >= 0");
}

}  // namespace
}  // namespace pax::optim

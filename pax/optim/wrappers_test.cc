// The wrappers: masked and multi_transform against running each optimizer on
// its own subset, apply_if_finite with injected NaN / inf gradients,
// multi_steps against one step on the k-times batch, ema and the parameter
// EMA against their formulas, inject_hyperparams against the non-injected
// optimizer, jit against eager, and the error messages.
#include "pax/optim/wrappers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/optim/adaptive.h"
#include "pax/optim/aliases.h"
#include "pax/optim/testing/optim_check.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;
using pax::testing::random_array;

// {layer0: {w, b}, layer1: {w, b}} and the same without the biases / weights.
Tree layers(uint32_t seed, bool with_w = true, bool with_b = true) {
  Tree t = Tree::dict({});
  for (int i = 0; i < 2; ++i) {
    Tree layer = Tree::dict({});
    if (with_w) layer.set("w", random_array({3, 2}, DType::f64, seed + 2 * i));
    if (with_b) layer.set("b", random_array({2}, DType::f64, seed + 2 * i + 1));
    t.set("layer" + std::to_string(i), layer);
  }
  return t;
}

// Gradient of 0.5 * sum((x - target)^2) * 1.5: 1.5 * (x - target).
Tree quad_grad(const Tree& x, const Tree& target) {
  return tree_map([](const Array& a, const Array& b) { return (a - b) * 1.5; }, x, target);
}

// Runs tx from x for `steps` steps towards `target`; returns the params.
Tree descend(const GradientTransformation& tx, Tree x, const Tree& target, int steps) {
  Tree state = tx.init(x);
  for (int t = 0; t < steps; ++t) {
    auto [u, s] = tx.update(quad_grad(x, target), state, x);
    x = apply_updates(x, u);
    state = s;
  }
  return x;
}

bool is_bias(const std::string& path, const Array&) { return path.size() >= 2 && path.substr(path.size() - 2) == "/b"; }

void expect_trees_equal(const Tree& got, const Tree& want, double tol = 0) {
  ASSERT_EQ(tree_structure(got), tree_structure(want)) << got.str() << " vs " << want.str();
  std::vector<Array> g = tree_leaves(got), w = tree_leaves(want);
  std::vector<std::string> paths = tree_paths(got);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(all_close(g[i], w[i], tol, tol)) << paths[i];
}

TEST(Masked, InnerSeesOnlySelectedLeaves) {
  Tree x = layers(1), target = layers(20);
  GradientTransformation tx = chain({masked(trace(0.5), is_bias), scale(-0.1)});
  Tree state = tx.init(x);
  // The inner state holds the biases only (None for the weights).
  const Tree& trace_state = state[0]["inner_state"]["trace"];
  EXPECT_TRUE(trace_state["layer0"]["w"].is_none());
  EXPECT_EQ(trace_state["layer0"]["b"].leaf().shape(), (Shape{2}));
  Tree got = descend(tx, x, target, 5);
  // Biases: momentum; weights: plain -0.1 * g.
  Tree want_b = descend(chain({trace(0.5), scale(-0.1)}), layers(1, false, true), layers(20, false, true), 5);
  Tree want_w = descend(scale(-0.1), layers(1, true, false), layers(20, true, false), 5);
  for (const char* l : {"layer0", "layer1"}) {
    EXPECT_TRUE(all_close(got[l]["b"].leaf(), want_b[l]["b"].leaf(), 0, 0));
    EXPECT_TRUE(all_close(got[l]["w"].leaf(), want_w[l]["w"].leaf(), 0, 0));
  }
}

TEST(Masked, MaskReadsParamsOrUpdates) {
  // A mask on the value: vectors only. Without params it reads the updates.
  Mask vectors = [](const std::string&, const Array& p) { return p.ndim() == 1; };
  GradientTransformation tx = masked(scale(2.0), vectors);
  Tree g = layers(3);
  Tree state = tx.init(g);
  auto [u, s] = tx.update(g, state, Tree());
  EXPECT_TRUE(all_close(u["layer1"]["b"].leaf(), g["layer1"]["b"].leaf() * 2.0, 0, 0));
  EXPECT_TRUE(all_close(u["layer1"]["w"].leaf(), g["layer1"]["w"].leaf(), 0, 0));
  EXPECT_PAX_ERROR(tx.update(g, state, layers(3, true, false)), "masked: the updates and the params have different");
}

TEST(MultiTransform, EqualsEachOptimizerOnItsSubset) {
  Tree x = layers(1), target = layers(20);
  Labeler label = [](const std::string& path, const Array& p) { return is_bias(path, p) ? "bias" : "weight"; };
  GradientTransformation tx = multi_transform({{"bias", sgd(0.1, 0.9)}, {"weight", adam(0.05)}}, label);
  Tree state = tx.init(x);
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"bias", "weight"}));
  Tree got = descend(tx, x, target, 6);
  Tree want_b = descend(sgd(0.1, 0.9), layers(1, false, true), layers(20, false, true), 6);
  Tree want_w = descend(adam(0.05), layers(1, true, false), layers(20, true, false), 6);
  for (const char* l : {"layer0", "layer1"}) {
    EXPECT_TRUE(all_close(got[l]["b"].leaf(), want_b[l]["b"].leaf(), 0, 0));
    EXPECT_TRUE(all_close(got[l]["w"].leaf(), want_w[l]["w"].leaf(), 0, 0));
  }
  // A label without a transformation names the leaf and the valid labels.
  GradientTransformation bad = multi_transform(
      {{"bias", sgd(0.1)}, {"weight", sgd(0.1)}},
      [](const std::string& path, const Array&) { return path == "layer1/w" ? std::string("frozen") : "weight"; });
  EXPECT_PAX_ERROR(bad.init(x),
                   "multi_transform: the leaf 'layer1/w' is labelled 'frozen', which has no transformation; valid "
                   "labels: 'bias', 'weight'");
}

TEST(ApplyIfFinite, SkipsNonFiniteUpdatesAndKeepsTheInnerState) {
  Tree x = Tree::dict({{"w", array<double>({1, 2})}});
  Tree g = Tree::dict({{"w", array<double>({0.5, -0.5})}});
  Tree nan = Tree::dict({{"w", array<double>({0.5, std::numeric_limits<double>::quiet_NaN()})}});
  Tree inf = Tree::dict({{"w", array<double>({std::numeric_limits<double>::infinity(), 1})}});
  GradientTransformation tx = apply_if_finite(adam(0.1), 2);
  Tree state = tx.init(x);
  auto [u1, s1] = tx.update(g, state, x);
  EXPECT_TRUE(s1["last_finite"].leaf().item<bool>());
  // A NaN step: zero updates, counts up, the inner state unchanged.
  auto [u2, s2] = tx.update(nan, s1, x);
  EXPECT_TRUE(all_close(u2["w"].leaf(), {0, 0}, 0, 0));
  EXPECT_EQ(s2["notfinite_count"].leaf().item<int32_t>(), 1);
  EXPECT_EQ(s2["total_notfinite"].leaf().item<int32_t>(), 1);
  EXPECT_FALSE(s2["last_finite"].leaf().item<bool>());
  expect_trees_equal(s2["inner_state"], s1["inner_state"]);
  // An inf step too; then a finite one resets the consecutive count only.
  auto [u3, s3] = tx.update(inf, s2, x);
  EXPECT_EQ(s3["notfinite_count"].leaf().item<int32_t>(), 2);
  auto [u4, s4] = tx.update(g, s3, x);
  EXPECT_EQ(s4["notfinite_count"].leaf().item<int32_t>(), 0);
  EXPECT_EQ(s4["total_notfinite"].leaf().item<int32_t>(), 2);
  // The finite steps equal adam's two steps on their own.
  GradientTransformation plain = adam(0.1);
  auto [p1, ps1] = plain.update(g, plain.init(x), x);
  auto [p2, ps2] = plain.update(g, ps1, x);
  expect_trees_equal(u4, p2);
  expect_trees_equal(s4["inner_state"], ps2);
}

TEST(ApplyIfFinite, GivesUpAfterMaxConsecutiveErrors) {
  Tree x = Tree::dict({{"w", array<double>({1, 2})}});
  Tree nan = Tree::dict({{"w", array<double>({std::numeric_limits<double>::quiet_NaN(), 1})}});
  GradientTransformation tx = apply_if_finite(sgd(0.1), 2);
  Tree state = tx.init(x);
  for (int t = 1; t <= 3; ++t) {
    auto [u, s] = tx.update(nan, state, x);
    state = s;
    std::vector<double> w = u["w"].leaf().to_vector<double>();
    EXPECT_EQ(s["notfinite_count"].leaf().item<int32_t>(), t);
    if (t <= 2) {
      EXPECT_EQ(w, (std::vector<double>{0, 0})) << t;
    } else {
      // The third consecutive failure exceeds max_consecutive_errors = 2: applied.
      EXPECT_TRUE(std::isnan(w[0]));
      EXPECT_DOUBLE_EQ(w[1], -0.1);
    }
  }
}

// Linear regression with a mean squared loss over a batch.
Array regression_loss(const Tree& params, const Array& xs, const Array& ys) {
  Array pred = matmul(xs, params["w"].leaf()) + params["b"].leaf();
  return mean(square(pred - ys)) * 0.5;
}

TEST(MultiSteps, KMinibatchesEqualOneStepOnTheKTimesBatch) {
  const int k = 3, batch = 4;
  Array xs = random_array({k * batch * 2, 3}, DType::f64, 1);
  Array ys = random_array({k * batch * 2}, DType::f64, 2);
  Tree params = Tree::dict({{"w", random_array({3}, DType::f64, 3)}, {"b", zeros({}, DType::f64)}});
  auto grad_fn = pax::grad(regression_loss);
  for (bool momentum : {false, true}) {
    GradientTransformation inner = momentum ? adam(0.1) : sgd(0.3);
    GradientTransformation tx = multi_steps(inner, k);
    Tree big = params, small = params;
    Tree big_state = inner.init(big), small_state = tx.init(small);
    for (int step = 0; step < 2; ++step) {
      int lo = step * k * batch;
      auto [u, s] = inner.update(
          grad_fn(big, slice_along(xs, 0, lo, lo + k * batch), slice_along(ys, 0, lo, lo + k * batch)), big_state, big);
      big = apply_updates(big, u);
      big_state = s;
      for (int m = 0; m < k; ++m) {
        int a = lo + m * batch;
        Tree before = small;
        auto [su, ss] = tx.update(grad_fn(small, slice_along(xs, 0, a, a + batch), slice_along(ys, 0, a, a + batch)),
                                  small_state, small);
        small = apply_updates(small, su);
        small_state = ss;
        EXPECT_EQ(multi_steps_has_updated(small_state).item<bool>(), m == k - 1);
        if (m < k - 1) expect_trees_equal(small, before);  // zero updates in between
      }
      expect_trees_equal(small, big, 1e-13);
      EXPECT_EQ(small_state["gradient_step"].leaf().item<int32_t>(), step + 1);
      EXPECT_EQ(small_state["mini_step"].leaf().item<int32_t>(), 0);
    }
  }
}

TEST(MultiSteps, SumInsteadOfMean) {
  GradientTransformation tx = multi_steps(scale(1.0), 2, /*use_grad_mean=*/false);
  Tree g1 = Tree(array<double>({1, 2})), g2 = Tree(array<double>({10, 20}));
  Tree state = tx.init(g1);
  auto [u1, s1] = tx.update(g1, state, Tree());
  auto [u2, s2] = tx.update(g2, s1, Tree());
  EXPECT_TRUE(all_close(u1.leaf(), {0, 0}, 0, 0));
  EXPECT_TRUE(all_close(u2.leaf(), {11, 22}, 0, 0));
  EXPECT_TRUE(all_close(s2["acc_grads"].leaf(), {0, 0}, 0, 0));
}

TEST(Ema, DebiasedMovingAverageOfUpdates) {
  for (bool debias : {true, false}) {
    GradientTransformation tx = ema(0.7, debias);
    Tree g = Tree(array<double>({1.0}));
    Tree state = tx.init(g);
    double e = 0;
    for (int t = 1; t <= 4; ++t) {
      double gv = 1.0 + t;
      auto [u, s] = tx.update(Tree(array<double>({gv})), state, Tree());
      state = s;
      e = 0.7 * e + 0.3 * gv;
      EXPECT_TRUE(all_close(u.leaf(), {debias ? e / (1 - std::pow(0.7, t)) : e}, 1e-14, 0)) << t;
    }
  }
}

TEST(ParamEma, FollowsTheFormulaAndIsFoundInAChain) {
  Tree x = Tree::dict({{"w", array<double>({1, -1})}});
  Tree target = Tree::dict({{"w", array<double>({3, 5})}});
  GradientTransformation tx = chain({clip(100.0), with_param_ema(sgd(0.1), 0.9)});
  Tree state = tx.init(x);
  std::vector<double> ema_host = {1, -1};
  for (int t = 0; t < 5; ++t) {
    auto [u, s] = tx.update(quad_grad(x, target), state, x);
    x = apply_updates(x, u);
    state = s;
    std::vector<double> xv = x["w"].leaf().to_vector<double>();
    for (size_t i = 0; i < 2; ++i) ema_host[i] = 0.9 * ema_host[i] + 0.1 * xv[i];
    EXPECT_TRUE(all_close(param_ema(state)["w"].leaf(), ema_host, 1e-14, 1e-15)) << t;
  }
  EXPECT_PAX_ERROR(param_ema(adam(0.1).init(x)), "param_ema: the optimizer state holds no with_param_ema state");
  EXPECT_PAX_ERROR(with_param_ema(sgd(0.1), 1.5), "with_param_ema: decay must be in [0, 1]");
  GradientTransformation pe = with_param_ema(sgd(0.1), 0.9);
  EXPECT_PAX_ERROR(pe.update(x, pe.init(x), Tree()), "with_param_ema: needs the parameters");
}

// lr(count) = 0.1 / (count + 1), exact enough in f32 for the comparisons.
Array decaying_lr(const Array& count) { return 0.1 / (count.astype(DType::f32) + 1.0); }

TEST(InjectHyperparams, LogsTheScheduleAndMatchesTheOptimizer) {
  Tree x = layers(1), target = layers(20);
  HyperparamFactory factory = [](const std::map<std::string, ScalarOrSchedule>& h) {
    return adamw(h.at("learning_rate"), {.b1 = h.at("b1"), .weight_decay = h.at("weight_decay")});
  };
  GradientTransformation tx =
      inject_hyperparams(factory, {{"learning_rate", Schedule(decaying_lr)}, {"b1", 0.8}, {"weight_decay", 0.01}});
  GradientTransformation plain = adamw(Schedule(decaying_lr), {.b1 = 0.8, .weight_decay = 0.01});
  Tree state = tx.init(x), plain_state = plain.init(x);
  EXPECT_FLOAT_EQ(hyperparam(state, "learning_rate").item<float>(), 0.1f);
  EXPECT_EQ(hyperparam(state, "learning_rate").dtype(), DType::f32);
  Tree xi = x, xp = x;
  for (int t = 0; t < 5; ++t) {
    auto [u, s] = tx.update(quad_grad(xi, target), state, xi);
    auto [up, sp] = plain.update(quad_grad(xp, target), plain_state, xp);
    state = s;
    plain_state = sp;
    xi = apply_updates(xi, u);
    xp = apply_updates(xp, up);
    // The logged value is the one this step used.
    EXPECT_FLOAT_EQ(hyperparam(state, "learning_rate").item<float>(), 0.1f / float(t + 1)) << t;
    EXPECT_FLOAT_EQ(hyperparam(state, "b1").item<float>(), 0.8f);
    expect_trees_equal(xi, xp);
  }
  EXPECT_EQ(state["count"].leaf().item<int32_t>(), 5);
  // Found inside a chain too; unknown names list the recorded ones.
  Tree chained = chain({clip(1.0), tx}).init(x);
  EXPECT_FLOAT_EQ(hyperparam(chained, "weight_decay").item<float>(), 0.01f);
  EXPECT_PAX_ERROR(hyperparam(chained, "lr"),
                   "hyperparam: no hyperparameter 'lr'; the state records 'b1', 'learning_rate', 'weight_decay'");
  EXPECT_PAX_ERROR(hyperparam(adam(0.1).init(x), "lr"), "holds no inject_hyperparams state");
}

TEST(InjectHyperparams, ScheduledBetaEqualsAScheduleInsideAdam) {
  Tree x = layers(1), target = layers(20);
  Schedule b1 = [](const Array& c) { return where(c < 2, 0.5f, 0.875f); };
  GradientTransformation tx = inject_hyperparams(
      [](const std::map<std::string, ScalarOrSchedule>& h) {
        return chain({scale_by_adam(h.at("b1")), scale(-0.1)});
      },
      {{"b1", b1}});
  expect_trees_equal(descend(tx, x, target, 4), descend(chain({scale_by_adam(b1), scale(-0.1)}), x, target, 4));
}

// The whole step under jit equals eager, for several steps including a NaN one.
void expect_jit_matches_eager(const GradientTransformation& tx, const std::vector<Tree>& grads, const Tree& x0) {
  auto step = [&tx](const Tree& params, const Tree& state, const Tree& g) {
    auto [u, s] = tx.update(g, state, params);
    return std::make_pair(apply_updates(params, u), s);
  };
  auto jitted = jit(step);
  Tree xe = x0, xj = x0, se = tx.init(x0), sj = tx.init(x0);
  for (size_t t = 0; t < grads.size(); ++t) {
    std::tie(xe, se) = step(xe, se, grads[t]);
    std::tie(xj, sj) = jitted(xj, sj, grads[t]);
    SCOPED_TRACE(t);
    expect_trees_equal(xj, xe, 1e-14);
    expect_trees_equal(sj, se, 1e-14);
  }
  EXPECT_EQ(jitted.num_traces(), 1u);
}

std::vector<Tree> gradient_sequence(int n, bool with_nan) {
  std::vector<Tree> out;
  for (int t = 0; t < n; ++t) {
    Tree g = layers(100 + 10 * uint32_t(t));
    if (with_nan && t == 2) {
      g.set("layer0", Tree::dict({{"w", full({3, 2}, std::numeric_limits<double>::quiet_NaN(), DType::f64)},
                                  {"b", g["layer0"]["b"]}}));
    }
    out.push_back(g);
  }
  return out;
}

TEST(Jit, ChainWithAdamClipDecayAndApplyIfFinite) {
  GradientTransformation tx = apply_if_finite(
      chain({clip_by_global_norm(1.0), scale_by_adam(),
             add_decayed_weights(1e-2, [](const std::string& path, const Array&) { return !is_bias(path, Array()); }),
             scale_by_learning_rate(Schedule(decaying_lr))}),
      3);
  expect_jit_matches_eager(tx, gradient_sequence(5, true), layers(1));
}

TEST(Jit, MultiStepsAndInjectHyperparams) {
  expect_jit_matches_eager(multi_steps(adam(0.1), 2), gradient_sequence(5, false), layers(1));
  GradientTransformation injected = inject_hyperparams(
      [](const std::map<std::string, ScalarOrSchedule>& h) { return sgd(h.at("learning_rate"), 0.9); },
      {{"learning_rate", Schedule(decaying_lr)}});
  expect_jit_matches_eager(injected, gradient_sequence(4, false), layers(1));
  expect_jit_matches_eager(with_param_ema(lion(0.01), 0.9), gradient_sequence(3, false), layers(1));
}

TEST(Wrappers, Errors) {
  EXPECT_PAX_ERROR(multi_steps(sgd(0.1), 0), "multi_steps: every_k must be >= 1, got 0");
  EXPECT_PAX_ERROR(apply_if_finite(sgd(0.1), -1), "apply_if_finite: max_consecutive_errors must be >= 0");
  EXPECT_PAX_ERROR(masked(sgd(0.1), nullptr), "masked: the mask is an empty function");
  EXPECT_PAX_ERROR(masked(GradientTransformation{}, is_bias), "masked: the inner transformation has no init");
  EXPECT_PAX_ERROR(multi_transform({}, nullptr), "multi_transform: needs at least one");
  EXPECT_PAX_ERROR(inject_hyperparams(nullptr, {}), "inject_hyperparams: the factory is an empty function");
  EXPECT_PAX_ERROR(ema(-0.1), "ema: decay must be in [0, 1]");
  Tree x = layers(1);
  GradientTransformation ms = multi_steps(sgd(0.1), 2);
  EXPECT_PAX_ERROR(ms.update(layers(1, true, false), ms.init(x), Tree()),
                   "multi_steps: the updates and the state 'acc_grads' have different tree structures");
  EXPECT_PAX_ERROR(ms.update(x, adam(0.1).init(x), Tree()), "multi_steps: the state must be a dict");
}

}  // namespace
}  // namespace pax::optim

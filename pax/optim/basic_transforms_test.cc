// The basic transformations against hand values and f64 host loops: scaling
// by constants and schedules, momentum (plain and Nesterov), clipping, weight
// decay with masks and schedules, dtypes, and the error messages.
#include "pax/optim/basic_transforms.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/ops/numpy.h"
#include "pax/optim/testing/optim_check.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;
using test::HostTree;

Tree wb(const Array& w, const Array& b) { return Tree::dict({{"w", w}, {"b", b}}); }

TEST(Transforms, IdentityAndScale) {
  Tree g = wb(array<double>({1, -2, 3, 4}, {2, 2}), array<double>({0.5}));
  auto [u, s] = identity().update(g, identity().init(g), Tree());
  EXPECT_TRUE(all_close(u["w"].leaf(), {1, -2, 3, 4}, 0, 0));
  EXPECT_TRUE(s.is_none());
  GradientTransformation sc = scale(-0.1);
  auto [u2, s2] = sc.update(g, sc.init(g), Tree());
  EXPECT_TRUE(all_close(u2["w"].leaf(), {-0.1, 0.2, -0.30000000000000004, -0.4}, 1e-15, 0));
  EXPECT_TRUE(all_close(u2["b"].leaf(), {-0.05}, 1e-15, 0));
}

TEST(Transforms, LearningRateConstantAndSchedule) {
  Tree g = wb(array<double>({1, -2}), array<double>({4}));
  GradientTransformation c = scale_by_learning_rate(0.25);
  EXPECT_TRUE(c.init(g).is_none());  // a constant needs no count
  EXPECT_TRUE(all_close(c.update(g, c.init(g), Tree()).first["w"].leaf(), {-0.25, 0.5}, 0, 0));
  GradientTransformation up = scale_by_learning_rate(0.25, /*flip_sign=*/false);
  EXPECT_TRUE(all_close(up.update(g, up.init(g), Tree()).first["b"].leaf(), {1.0}, 0, 0));

  // lr(count) = 1 / (count + 2): evaluated at count = 0, 1, 2, ... (f32); a
  // plain lambda converts to a schedule.
  GradientTransformation s =
      scale_by_learning_rate([](const Array& count) { return 1.0 / (count.astype(DType::f32) + 2.0); });
  Tree state = s.init(g);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(state["count"].leaf().item<int32_t>(), t);
    auto [u, next] = s.update(g, state, Tree());
    double lr = double(1.0f / float(t + 2));
    EXPECT_TRUE(all_close(u["w"].leaf(), {-lr, 2 * lr}, 0, 0)) << t;
    EXPECT_EQ(u["w"].leaf().dtype(), DType::f64);
    state = next;
  }
  EXPECT_EQ(state["count"].leaf().dtype(), DType::i32);
}

TEST(Transforms, ScaleBySchedule) {
  GradientTransformation s = scale_by_schedule([](const Array& count) { return count.astype(DType::f32) * 2.0; });
  Tree g = Tree(array<double>({1.5, -1}));
  Tree state = s.init(g);
  for (int t = 0; t < 3; ++t) {
    auto [u, next] = s.update(g, state, Tree());
    EXPECT_TRUE(all_close(u.leaf(), {1.5 * 2 * t, -2.0 * t}, 0, 0));
    state = next;
  }
  EXPECT_PAX_ERROR(scale_by_schedule([](const Array&) { return zeros({2}); }).update(g, state, Tree()),
                   "must return a scalar");
}

// Momentum against the host loop trace = g + decay * trace (Nesterov: the
// output is g + decay * trace), with a learning rate, on the quadratic.
TEST(Transforms, TraceMatchesMomentumLoop) {
  test::Quadratic q = test::make_quadratic();
  HostTree x0 = test::quadratic_start(q);
  for (bool nesterov : {false, true}) {
    GradientTransformation tx = chain({trace(0.9, nesterov), scale(-0.1)});
    auto ref = test::elementwise(1, 0.0, [nesterov](double g, double, int, std::vector<double>& s) {
      s[0] = g + 0.9 * s[0];
      return -0.1 * (nesterov ? g + 0.9 * s[0] : s[0]);
    });
    test::expect_matches_reference(tx, ref, q, x0, 6);
  }
}

TEST(Transforms, TraceKeepsF32MomentsForBf16) {
  Tree p = wb(ones({2, 3}, DType::bf16), ones({3}, DType::f32));
  GradientTransformation tx = trace(0.5);
  Tree state = tx.init(p);
  EXPECT_EQ(state["trace"]["w"].leaf().dtype(), DType::f32);
  EXPECT_EQ(state["trace"]["b"].leaf().dtype(), DType::f32);
  Tree g = wb(full({2, 3}, 0.5, DType::bf16), full({3}, 0.25));
  auto [u, s1] = tx.update(g, state, p);
  auto [u2, s2] = tx.update(g, s1, p);
  EXPECT_TRUE(all_close(u2["w"].leaf(), std::vector<double>(6, 0.75), 0, 0));
  EXPECT_EQ(s2["trace"]["w"].leaf().dtype(), DType::f32);
  EXPECT_EQ(apply_updates(p, u2)["w"].leaf().dtype(), DType::bf16);
}

TEST(Transforms, ClipPerValue) {
  GradientTransformation c = clip(1.5);
  Tree g = Tree(array<double>({-3, -1.5, 0.2, 1.6, 10}));
  EXPECT_TRUE(all_close(c.update(g, c.init(g), Tree()).first.leaf(), {-1.5, -1.5, 0.2, 1.5, 1.5}, 0, 0));
  GradientTransformation zero = clip(0.0);
  EXPECT_TRUE(all_close(zero.update(g, Tree(), Tree()).first.leaf(), {0, 0, 0, 0, 0}, 0, 0));
}

TEST(Transforms, ClipByGlobalNormOverTheWholeTree) {
  // Global norm of {w: [3, 4], b: [12]} is 13.
  Tree g = wb(array<double>({3, 4}), array<double>({12}));
  GradientTransformation c = clip_by_global_norm(6.5);
  auto [u, s] = c.update(g, c.init(g), Tree());
  EXPECT_TRUE(all_close(u["w"].leaf(), {1.5, 2.0}, 1e-15, 0));
  EXPECT_TRUE(all_close(u["b"].leaf(), {6.0}, 1e-15, 0));
  // Below the threshold (and at zero) nothing changes.
  GradientTransformation loose = clip_by_global_norm(13.5);
  EXPECT_TRUE(all_close(loose.update(g, Tree(), Tree()).first["b"].leaf(), {12}, 0, 0));
  Tree zero = wb(zeros({2}, DType::f64), zeros({1}, DType::f64));
  EXPECT_TRUE(all_close(c.update(zero, Tree(), Tree()).first["w"].leaf(), {0, 0}, 0, 0));
  // bf16 leaves: the norm is taken in f32, the updates keep their dtype.
  Tree gb = wb(array<double>({3, 4}).astype(DType::bf16), array<double>({12}).astype(DType::bf16));
  Tree ub = c.update(gb, Tree(), Tree()).first;
  EXPECT_EQ(ub["w"].leaf().dtype(), DType::bf16);
  EXPECT_TRUE(all_close(ub["w"].leaf(), {1.5, 2.0}, 1e-2, 0));
}

TEST(Transforms, AddDecayedWeightsWithMaskAndSchedule) {
  Tree p = wb(array<double>({1, 2}), array<double>({3}));
  Tree g = wb(array<double>({0.5, 0.5}), array<double>({0.5}));
  GradientTransformation all = add_decayed_weights(0.1);
  auto [u, s] = all.update(g, all.init(p), p);
  EXPECT_TRUE(all_close(u["w"].leaf(), {0.6, 0.7}, 1e-15, 0));
  EXPECT_TRUE(all_close(u["b"].leaf(), {0.8}, 1e-15, 0));
  // Only the weights (not the bias) decay.
  GradientTransformation wonly =
      add_decayed_weights(0.1, [](const std::string& path, const Array&) { return path == "w"; });
  Tree ws = wonly.init(p);
  auto [u2, s2] = wonly.update(g, ws, p);
  EXPECT_TRUE(all_close(u2["w"].leaf(), {0.6, 0.7}, 1e-15, 0));
  EXPECT_TRUE(all_close(u2["b"].leaf(), {0.5}, 0, 0));
  // A schedule keeps a count: decay = 0.5 * (count + 1).
  GradientTransformation sched =
      add_decayed_weights(Schedule([](const Array& c) { return (c.astype(DType::f32) + 1.0) * 0.5; }));
  Tree st = sched.init(p);
  for (int t = 0; t < 3; ++t) {
    auto [u3, next] = sched.update(g, st, p);
    double wd = 0.5 * (t + 1);
    EXPECT_TRUE(all_close(u3["b"].leaf(), {0.5 + 3 * wd}, 1e-15, 0));
    st = next;
  }
  EXPECT_EQ(st["count"].leaf().item<int32_t>(), 3);
}

TEST(Transforms, Errors) {
  EXPECT_PAX_ERROR(trace(1.5), "trace: decay must be in [0, 1], got 1.5");
  EXPECT_PAX_ERROR(clip(-1), "clip: max_delta must be >= 0");
  EXPECT_PAX_ERROR(clip_by_global_norm(0), "clip_by_global_norm: max_norm must be > 0");
  EXPECT_PAX_ERROR(scale(NAN), "scale: step_size must be finite");
  EXPECT_PAX_ERROR(scale_by_learning_rate(INFINITY), "learning_rate must be finite");
  // Negative learning rates are allowed (as in optax): gradient ascent.
  EXPECT_NO_THROW(scale_by_learning_rate(-0.1));

  Tree p = wb(ones({2}, DType::f64), ones({1}, DType::f64));
  Tree other = Tree::dict({{"w", ones({2}, DType::f64)}});
  GradientTransformation tx = trace(0.9);
  EXPECT_PAX_ERROR(tx.update(other, tx.init(p), p), "trace: the updates and the state 'trace' have different");
  EXPECT_PAX_ERROR(tx.update(p, Tree(), p), "trace: the state must be a dict with an entry 'trace'");
  GradientTransformation wd = add_decayed_weights(0.1);
  EXPECT_PAX_ERROR(wd.update(p, wd.init(p), Tree()), "add_decayed_weights: needs the parameters");
  EXPECT_PAX_ERROR(wd.update(p, wd.init(p), other), "add_decayed_weights: the updates and the params have different");
  EXPECT_PAX_ERROR(apply_updates(p, other), "apply_updates");
}

}  // namespace
}  // namespace pax::optim

// The adaptive rescalings against f64 host loops of their published formulas
// over several steps: Adam (bias correction, eps / eps_root placement,
// NAdam, scheduled betas), Lion's sign update, RMSProp (plain, centred, eps
// outside the root, bias-corrected), Adagrad, the LAMB trust ratio (zero
// norms), and Adafactor's factored / unfactored second moments, block-RMS
// clipping and parameter scale; bf16 parameters; errors.
#include "pax/optim/adaptive.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/ops/numpy.h"
#include "pax/optim/testing/optim_check.h"
#include "pax/optim/basic_transforms.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;
using test::HostTree;

class AdaptiveTest : public ::testing::Test {
 protected:
  test::Quadratic q = test::make_quadratic();
  HostTree x0 = test::quadratic_start(q);
};

TEST_F(AdaptiveTest, AdamMatchesBiasCorrectedLoop) {
  struct Case {
    double b1, b2, eps, eps_root;
  };
  for (Case c : {Case{0.9, 0.999, 1e-8, 0.0}, Case{0.8, 0.95, 1e-3, 1e-4}, Case{0.0, 0.5, 0.1, 0.0}}) {
    GradientTransformation tx = chain({scale_by_adam(c.b1, c.b2, c.eps, c.eps_root), scale(-0.05)});
    auto ref = test::elementwise(2, 0.0, [c](double g, double, int t, std::vector<double>& s) {
      s[0] = c.b1 * s[0] + (1 - c.b1) * g;
      s[1] = c.b2 * s[1] + (1 - c.b2) * g * g;
      double m_hat = s[0] / (1 - std::pow(c.b1, t)), v_hat = s[1] / (1 - std::pow(c.b2, t));
      return -0.05 * m_hat / (std::sqrt(v_hat + c.eps_root) + c.eps);
    });
    test::expect_matches_reference(tx, ref, q, x0, 8);
  }
}

TEST_F(AdaptiveTest, NadamMatchesOptaxForm) {
  GradientTransformation tx = chain({scale_by_adam(0.9, 0.99, 1e-8, 0.0, /*nesterov=*/true), scale(-0.05)});
  auto ref = test::elementwise(2, 0.0, [](double g, double, int t, std::vector<double>& s) {
    s[0] = 0.9 * s[0] + 0.1 * g;
    s[1] = 0.99 * s[1] + 0.01 * g * g;
    double m_hat = 0.9 * s[0] / (1 - std::pow(0.9, t + 1)) + 0.1 * g / (1 - std::pow(0.9, t));
    return -0.05 * m_hat / (std::sqrt(s[1] / (1 - std::pow(0.99, t))) + 1e-8);
  });
  test::expect_matches_reference(tx, ref, q, x0, 6);
}

TEST_F(AdaptiveTest, AdamBetaScheduleIsEvaluatedAtTheCount) {
  // b1 = 0.5 at step 0, then 0.75 (exact in f32).
  Schedule b1 = [](const Array& count) { return where(count < 1, 0.5f, 0.75f); };
  GradientTransformation tx = chain({scale_by_adam(b1, 0.5), scale(-0.1)});
  auto ref = test::elementwise(2, 0.0, [](double g, double, int t, std::vector<double>& s) {
    double beta1 = t == 1 ? 0.5 : 0.75;
    s[0] = beta1 * s[0] + (1 - beta1) * g;
    s[1] = 0.5 * s[1] + 0.5 * g * g;
    return -0.1 * (s[0] / (1 - std::pow(beta1, t))) / (std::sqrt(s[1] / (1 - std::pow(0.5, t))) + 1e-8);
  });
  test::expect_matches_reference(tx, ref, q, x0, 4);
}

TEST_F(AdaptiveTest, LionTakesSignSteps) {
  GradientTransformation tx = chain({scale_by_lion(0.9, 0.99), scale(-0.01)});
  auto ref = test::elementwise(1, 0.0, [](double g, double, int, std::vector<double>& s) {
    double c = 0.1 * g + 0.9 * s[0];
    s[0] = 0.01 * g + 0.99 * s[0];
    return -0.01 * double((c > 0) - (c < 0));
  });
  test::expect_matches_reference(tx, ref, q, x0, 6);
  // Every update is +-lr or 0.
  Tree g = Tree(array<double>({3, -1e-6, 0}));
  GradientTransformation lion = scale_by_lion();
  EXPECT_TRUE(all_close(lion.update(g, lion.init(g), g).first.leaf(), {1, -1, 0}, 0, 0));
}

TEST_F(AdaptiveTest, RmsAndCentredRmsMatchLoops) {
  for (bool centered : {false, true}) {
    for (bool eps_in_sqrt : {true, false}) {
      for (bool bias_correction : {false, true}) {
        const double decay = 0.8, eps = 1e-3, init = centered ? 0.5 : 0.1;
        GradientTransformation rms = centered ? scale_by_stddev(decay, eps, init, eps_in_sqrt, bias_correction)
                                              : scale_by_rms(decay, eps, init, eps_in_sqrt, bias_correction);
        GradientTransformation tx = chain({rms, scale(-0.02)});
        auto ref = test::elementwise(2, 0.0, [=](double g, double, int t, std::vector<double>& s) {
          if (t == 1) s[1] = init;  // nu starts at initial_scale, mu at 0
          s[0] = decay * s[0] + (1 - decay) * g;
          s[1] = decay * s[1] + (1 - decay) * g * g;
          double corr = bias_correction ? 1 - std::pow(decay, t) : 1.0;
          double d = s[1] / corr - (centered ? std::pow(s[0] / corr, 2) : 0.0);
          double scaling = eps_in_sqrt ? 1 / std::sqrt(d + eps) : 1 / (std::sqrt(d) + eps);
          return -0.02 * scaling * g;
        });
        SCOPED_TRACE(::testing::Message() << centered << eps_in_sqrt << bias_correction);
        test::expect_matches_reference(tx, ref, q, x0, 5);
      }
    }
  }
}

TEST_F(AdaptiveTest, RssIsAdagrad) {
  GradientTransformation tx = chain({scale_by_rss(0.1, 1e-7), scale(-0.3)});
  auto ref = test::elementwise(1, 0.1, [](double g, double, int, std::vector<double>& s) {
    s[0] += g * g;
    return -0.3 * g / std::sqrt(s[0] + 1e-7);
  });
  test::expect_matches_reference(tx, ref, q, x0, 6);
  // A zero accumulator (no initial value, zero gradient) gives a zero update, not NaN.
  GradientTransformation zero = scale_by_rss(0.0);
  Tree g = Tree(array<double>({0, 2}));
  EXPECT_TRUE(all_close(zero.update(g, zero.init(g), g).first.leaf(), {0, 2 / std::sqrt(4 + 1e-7)}, 1e-14, 0));
}

TEST(Adaptive, TrustRatioPerLeafWithZeroNorms) {
  // w: |p| = 5, |u| = 2 -> ratio 2.5; zero_p: ratio 1; zero_u stays 0.
  Tree p =
      Tree::dict({{"w", array<double>({3, 4})}, {"zero_p", zeros({2}, DType::f64)}, {"zero_u", ones({2}, DType::f64)}});
  Tree u = Tree::dict(
      {{"w", array<double>({0, 2})}, {"zero_p", array<double>({1, -1})}, {"zero_u", zeros({2}, DType::f64)}});
  GradientTransformation tr = scale_by_trust_ratio();
  Tree out = tr.update(u, tr.init(p), p).first;
  EXPECT_TRUE(all_close(out["w"].leaf(), {0, 5}, 1e-15, 0));
  EXPECT_TRUE(all_close(out["zero_p"].leaf(), {1, -1}, 0, 0));
  EXPECT_TRUE(all_close(out["zero_u"].leaf(), {0, 0}, 0, 0));
  // trust_coefficient, eps, and min_norm raising the small update norm.
  GradientTransformation tr2 = scale_by_trust_ratio(/*min_norm=*/4.0, /*trust_coefficient=*/0.5, /*eps=*/1.0);
  Tree out2 = tr2.update(u, Tree(), p).first;
  EXPECT_TRUE(all_close(out2["w"].leaf(), {0, 2 * 0.5 * 5 / (4 + 1.0)}, 1e-15, 0));
  // zero_p: both norms clipped to min_norm -> 0.5 * 4 / 5.
  EXPECT_TRUE(all_close(out2["zero_p"].leaf(), {0.4, -0.4}, 1e-15, 0));
  EXPECT_PAX_ERROR(tr.update(u, Tree(), Tree()), "scale_by_trust_ratio: needs the parameters");
}

TEST(Adaptive, FactoredRmsFactorsLargeLeavesOnly) {
  FactoredRmsOptions o{.decay_rate = 0.8, .min_dim_size_to_factor = 3, .epsilon = 1e-30};
  // "w" (4, 6): factored over d1 = 0, d0 = 1. "cube" (2, 5, 4): d1 = 2 (4), d0 = 1 (5).
  // "thin" (2, 6): second-largest dim 2 < 3, full v. "vec" (7): rank 1, full v.
  std::vector<std::pair<std::string, Shape>> leaves = {
      {"w", {4, 6}}, {"cube", {2, 5, 4}}, {"thin", {2, 6}}, {"vec", {7}}};
  std::vector<test::HostFactored> host = {
      test::HostFactored({4, 6}, true, 0, 1), test::HostFactored({2, 5, 4}, true, 2, 1),
      test::HostFactored({2, 6}, false, 0, 0), test::HostFactored({7}, false, 0, 0)};
  HostTree params = test::random_host(leaves, 3);
  GradientTransformation tx = scale_by_factored_rms(o);
  Tree state = tx.init(test::to_tree(params));
  EXPECT_EQ(state["v_row"]["w"].leaf().shape(), (Shape{4}));
  EXPECT_EQ(state["v_col"]["w"].leaf().shape(), (Shape{6}));
  EXPECT_EQ(state["v"]["w"].leaf().shape(), (Shape{1}));
  EXPECT_EQ(state["v_row"]["cube"].leaf().shape(), (Shape{2, 4}));
  EXPECT_EQ(state["v_col"]["cube"].leaf().shape(), (Shape{2, 5}));
  EXPECT_EQ(state["v"]["thin"].leaf().shape(), (Shape{2, 6}));
  EXPECT_EQ(state["v_row"]["thin"].leaf().shape(), (Shape{1}));
  EXPECT_EQ(state["v"]["vec"].leaf().shape(), (Shape{7}));
  for (int t = 1; t <= 4; ++t) {
    HostTree g = test::random_host(leaves, 100 + 10 * uint32_t(t), -2, 2);
    auto [u, next] = tx.update(test::to_tree(g), state, test::to_tree(params));
    state = next;
    for (size_t i = 0; i < leaves.size(); ++i) {
      EXPECT_TRUE(all_close(u[leaves[i].first].leaf(), host[i].step(g[i].v, t, 0.8, 1e-30), 1e-11, 1e-13))
          << leaves[i].first << " step " << t;
    }
  }
  EXPECT_EQ(state["count"].leaf().item<int32_t>(), 4);
  // factored = false keeps full second moments everywhere.
  GradientTransformation full_v = scale_by_factored_rms({.factored = false, .min_dim_size_to_factor = 3});
  EXPECT_EQ(full_v.init(test::to_tree(params))["v"]["w"].leaf().shape(), (Shape{4, 6}));
  // A state made for other shapes is named in the error.
  Tree other =
      test::to_tree(test::random_host({{"w", {5, 6}}, {"cube", {2, 5, 4}}, {"thin", {2, 6}}, {"vec", {7}}}, 1));
  EXPECT_PAX_ERROR(tx.update(other, tx.init(test::to_tree(params)), other),
                   "scale_by_factored_rms: state 'v_row' for 'w' has shape");
}

TEST(Adaptive, FactoredRmsStepOffsetAndDefaultThreshold) {
  // step_offset shifts the decay schedule: at count c the decay uses t = c - offset + 1.
  GradientTransformation tx = scale_by_factored_rms({.step_offset = -1, .min_dim_size_to_factor = 3});
  Tree g = Tree(array<double>({2.0}));
  Tree state = tx.init(g);
  auto [u, s] = tx.update(g, state, g);
  double decay = 1 - std::pow(2.0, -0.8);  // t = 0 + 1 + 1
  double v = (1 - decay) * (4 + 1e-30);
  EXPECT_TRUE(all_close(u.leaf(), {2 / std::sqrt(v)}, 1e-14, 0));
  // With the default threshold (128) a (4, 6) leaf is not factored.
  EXPECT_EQ(scale_by_factored_rms().init(Tree(zeros({4, 6})))["v"].leaf().shape(), (Shape{4, 6}));
  EXPECT_EQ(scale_by_factored_rms().init(Tree(zeros({128, 130})))["v_col"].leaf().shape(), (Shape{130}));
}

TEST(Adaptive, BlockRmsClippingAndParameterScale) {
  // rms([3, 4]) = sqrt(12.5); threshold 1 -> divided by sqrt(12.5).
  Tree u = Tree::dict({{"big", array<double>({3, 4})}, {"small", array<double>({0.1, -0.1})}});
  GradientTransformation c = clip_by_block_rms(1.0);
  Tree out = c.update(u, c.init(u), Tree()).first;
  EXPECT_TRUE(all_close(out["big"].leaf(), {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}, 1e-15, 0));
  EXPECT_TRUE(all_close(out["small"].leaf(), {0.1, -0.1}, 0, 0));
  // Parameter scale: max(rms(p), 1e-3).
  Tree p = Tree::dict({{"big", array<double>({1, -3})}, {"small", zeros({2}, DType::f64)}});
  GradientTransformation s = scale_by_param_block_rms();
  Tree out2 = s.update(u, s.init(p), p).first;
  EXPECT_TRUE(all_close(out2["big"].leaf(), {3 * std::sqrt(5.0), 4 * std::sqrt(5.0)}, 1e-15, 0));
  EXPECT_TRUE(all_close(out2["small"].leaf(), {1e-4, -1e-4}, 1e-15, 0));
  EXPECT_PAX_ERROR(s.update(u, Tree(), Tree()), "scale_by_param_block_rms: needs the parameters");
}

TEST(Adaptive, Bf16ParametersKeepF32Moments) {
  Tree p = Tree::dict({{"w", pax::testing::random_array({8, 8}, DType::bf16, 1)}});
  Tree g = Tree::dict({{"w", pax::testing::random_array({8, 8}, DType::bf16, 2)}});
  Tree g32 = Tree::dict({{"w", g["w"].leaf().astype(DType::f32)}});
  for (const GradientTransformation& tx : {scale_by_adam(), scale_by_lion(), scale_by_rms(), scale_by_rss(),
                                           scale_by_factored_rms({.min_dim_size_to_factor = 4})}) {
    Tree state = tx.init(p);
    for (const Array& leaf : tree_leaves(state)) {
      if (leaf.ndim() > 0) EXPECT_EQ(leaf.dtype(), DType::f32);
      if (leaf.ndim() == 0) EXPECT_EQ(leaf.dtype(), DType::i32);
    }
    auto [u, s] = tx.update(g, state, p);
    EXPECT_EQ(u["w"].leaf().dtype(), DType::f32);
    EXPECT_EQ(tree_structure(s), tree_structure(state));
    // The same as running on the f32 copy of the gradients.
    Tree p32 = Tree::dict({{"w", p["w"].leaf().astype(DType::f32)}});
    Tree want = tx.update(g32, tx.init(p32), p32).first;
    EXPECT_TRUE(all_close(u["w"].leaf(), want["w"].leaf(), 1e-6, 1e-6));
    EXPECT_EQ(apply_updates(p, u)["w"].leaf().dtype(), DType::bf16);
  }
}

TEST(Adaptive, Errors) {
  EXPECT_PAX_ERROR(scale_by_adam(1.0), "scale_by_adam: b1 must be in [0, 1), got 1");
  EXPECT_PAX_ERROR(scale_by_adam(0.9, -0.1), "scale_by_adam: b2 must be in [0, 1), got -0.1");
  EXPECT_PAX_ERROR(scale_by_adam(0.9, 0.999, -1e-8), "scale_by_adam: eps must be >= 0");
  EXPECT_PAX_ERROR(scale_by_lion(1.5), "scale_by_lion: b1 must be in [0, 1]");
  EXPECT_PAX_ERROR(scale_by_rms(2.0), "scale_by_rms: decay must be in [0, 1]");
  EXPECT_PAX_ERROR(scale_by_stddev(0.9, -1.0), "scale_by_stddev: eps must be >= 0");
  EXPECT_PAX_ERROR(scale_by_rss(-0.1), "scale_by_rss: initial_accumulator_value must be finite and >= 0");
  EXPECT_PAX_ERROR(scale_by_trust_ratio(-1), "scale_by_trust_ratio: min_norm must be >= 0");
  EXPECT_PAX_ERROR(scale_by_factored_rms({.decay_rate = -0.8}), "scale_by_factored_rms: decay_rate must be");
  EXPECT_PAX_ERROR(scale_by_factored_rms({.min_dim_size_to_factor = -1}), "min_dim_size_to_factor must be >= 0");
  EXPECT_PAX_ERROR(clip_by_block_rms(0), "clip_by_block_rms: threshold must be > 0");
  // Schedules are accepted (their values are only known in update()).
  EXPECT_NO_THROW(scale_by_adam(Schedule([](const Array&) { return scalar(0.9f); })));

  Tree p = Tree::dict({{"w", ones({2}, DType::f64)}});
  Tree other = Tree::dict({{"v", ones({2}, DType::f64)}});
  GradientTransformation adam = scale_by_adam();
  EXPECT_PAX_ERROR(adam.update(other, adam.init(p), p),
                   "scale_by_adam: the updates and the state 'mu' have different tree structures");
  EXPECT_PAX_ERROR(adam.update(p, scale_by_lion().init(p), p),
                   "scale_by_adam: the state must be a dict with an entry 'nu'");
  EXPECT_PAX_ERROR(scale_by_rms().update(other, scale_by_rms().init(p), p),
                   "scale_by_rms: the updates and the state 'nu'");
}

}  // namespace
}  // namespace pax::optim

// The optimizer aliases against f64 host loops of their published update
// formulas on a quadratic toy problem (several steps each), convergence of
// every alias on the quadratic to a stated tolerance (jitted steps), bf16
// parameters, and bad hyperparameters.
#include "pax/optim/aliases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "pax/api/jit.h"
#include "pax/ops/numpy.h"
#include "pax/optim/testing/optim_check.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;
using test::host_chain;
using test::HostStep;
using test::HostTree;

class AliasTest : public ::testing::Test {
 protected:
  test::Quadratic q = test::make_quadratic();
  HostTree x0 = test::quadratic_start(q);
};

double sign(double x) { return double((x > 0) - (x < 0)); }

// Host Adam direction (before any learning rate).
HostStep host_adam(double b1, double b2, double eps) {
  return test::elementwise(2, 0.0, [=](double g, double, int t, std::vector<double>& s) {
    s[0] = b1 * s[0] + (1 - b1) * g;
    s[1] = b2 * s[1] + (1 - b2) * g * g;
    return (s[0] / (1 - std::pow(b1, t))) / (std::sqrt(s[1] / (1 - std::pow(b2, t))) + eps);
  });
}

// Adds wd * param on the leaves named in `names` (all when empty).
HostStep host_decay(double wd, std::vector<std::string> names = {}) {
  return [=](const HostTree& u, const HostTree& p) {
    HostTree out = u;
    for (size_t i = 0; i < out.size(); ++i) {
      bool on = names.empty() || std::find(names.begin(), names.end(), out[i].name) != names.end();
      for (size_t j = 0; on && j < out[i].v.size(); ++j) out[i].v[j] += wd * p[i].v[j];
    }
    return out;
  };
}

HostStep host_scale(double s) {
  return [s](const HostTree& u, const HostTree&) { return test::map_host(u, [s](double x) { return s * x; }); };
}

TEST_F(AliasTest, SgdPlainMomentumNesterov) {
  test::expect_matches_reference(sgd(0.1), host_scale(-0.1), q, x0, 5);
  for (bool nesterov : {false, true}) {
    auto ref = test::elementwise(1, 0.0, [nesterov](double g, double, int, std::vector<double>& s) {
      s[0] = g + 0.9 * s[0];
      return -0.1 * (nesterov ? g + 0.9 * s[0] : s[0]);
    });
    test::expect_matches_reference(sgd(0.1, 0.9, nesterov), ref, q, x0, 6);
  }
}

TEST_F(AliasTest, AdamAndAdamW) {
  test::expect_matches_reference(adam(0.05), host_chain({host_adam(0.9, 0.999, 1e-8), host_scale(-0.05)}), q, x0, 8);
  test::expect_matches_reference(adam(0.05, {.b1 = 0.5, .b2 = 0.9, .eps = 1e-3}),
                                 host_chain({host_adam(0.5, 0.9, 1e-3), host_scale(-0.05)}), q, x0, 8);
  // The decay is added to the Adam direction, then scaled by the learning rate.
  test::expect_matches_reference(adamw(0.05, {.weight_decay = 0.1}),
                                 host_chain({host_adam(0.9, 0.999, 1e-8), host_decay(0.1), host_scale(-0.05)}), q, x0,
                                 8);
  Mask weights_only = [](const std::string& path, const Array&) { return path == "w"; };
  test::expect_matches_reference(adamw(0.05, {.weight_decay = 0.1, .mask = weights_only}),
                                 host_chain({host_adam(0.9, 0.999, 1e-8), host_decay(0.1, {"w"}), host_scale(-0.05)}),
                                 q, x0, 8);
}

TEST_F(AliasTest, Lion) {
  auto lion_sign = test::elementwise(1, 0.0, [](double g, double, int, std::vector<double>& s) {
    double c = 0.1 * g + 0.9 * s[0];
    s[0] = 0.01 * g + 0.99 * s[0];
    return sign(c);
  });
  test::expect_matches_reference(lion(0.01), host_chain({lion_sign, host_decay(1e-3), host_scale(-0.01)}), q, x0, 8);
}

// LAMB: Adam (eps 1e-6) + decay, scaled per leaf by |p| / |u| (1 when either is 0).
HostStep host_trust_ratio() {
  return [](const HostTree& u, const HostTree& p) {
    HostTree out = u;
    for (size_t i = 0; i < u.size(); ++i) {
      double pn = test::l2(p[i].v), un = test::l2(u[i].v);
      double r = (pn == 0 || un == 0) ? 1.0 : pn / un;
      for (double& x : out[i].v) x *= r;
    }
    return out;
  };
}

TEST_F(AliasTest, LambWithAZeroInitialisedLeaf) {
  // "b" starts at zero: its first trust ratio is 1, later ones |p| / |u|.
  HostTree start = x0;
  for (double& v : start[1].v) v = 0;
  test::expect_matches_reference(
      lamb(0.05, {.weight_decay = 0.01}),
      host_chain({host_adam(0.9, 0.999, 1e-6), host_decay(0.01), host_trust_ratio(), host_scale(-0.05)}), q, start, 6);
}

TEST_F(AliasTest, RmspropVariants) {
  // Plain: g / sqrt(nu + eps).
  auto plain = test::elementwise(1, 0.0, [](double g, double, int, std::vector<double>& s) {
    s[0] = 0.9 * s[0] + 0.1 * g * g;
    return -0.01 * g / std::sqrt(s[0] + 1e-8);
  });
  test::expect_matches_reference(rmsprop(0.01), plain, q, x0, 6);
  // Centred with Nesterov momentum after the learning rate (optax's order).
  auto centred = test::elementwise(3, 0.0, [](double g, double, int, std::vector<double>& s) {
    s[0] = 0.9 * s[0] + 0.1 * g;
    s[1] = 0.9 * s[1] + 0.1 * g * g;
    double u = -0.01 * g / std::sqrt(s[1] - s[0] * s[0] + 1e-8);
    s[2] = u + 0.5 * s[2];
    return u + 0.5 * s[2];
  });
  test::expect_matches_reference(rmsprop(0.01, {.centered = true, .momentum = 0.5, .nesterov = true}), centred, q, x0,
                                 6);
}

TEST_F(AliasTest, Adagrad) {
  auto ref = test::elementwise(1, 0.1, [](double g, double, int, std::vector<double>& s) {
    s[0] += g * g;
    return -0.5 * g / std::sqrt(s[0] + 1e-7);
  });
  test::expect_matches_reference(adagrad(0.5), ref, q, x0, 6);
}

// Adafactor on the host: factored "w" (3, 4) (min_dim_size_to_factor 3),
// unfactored "b", block-RMS clipping, learning rate, parameter scale,
// optional momentum and weight decay, negated.
HostStep host_adafactor(double lr, double momentum, double wd) {
  auto stats = std::make_shared<std::vector<test::HostFactored>>(
      std::vector<test::HostFactored>{test::HostFactored({3, 4}, true, 0, 1), test::HostFactored({4}, false, 0, 0)});
  auto t = std::make_shared<int>(0);
  auto ema_state = std::make_shared<HostTree>();
  return [=](const HostTree& g, const HostTree& p) {
    ++*t;
    HostTree u = g;
    for (size_t i = 0; i < u.size(); ++i) {
      u[i].v = (*stats)[i].step(g[i].v, *t, 0.8, 1e-30);
      double rms = test::l2(u[i].v) / std::sqrt(double(u[i].v.size()));
      double clip = std::max(1.0, rms / 1.0);
      double prms = std::max(test::l2(p[i].v) / std::sqrt(double(p[i].v.size())), 1e-3);
      for (double& x : u[i].v) x = x / clip * lr * prms;
    }
    if (momentum > 0) {
      if (ema_state->empty()) *ema_state = test::map_host(u, [](double) { return 0.0; });
      for (size_t i = 0; i < u.size(); ++i)
        for (size_t j = 0; j < u[i].v.size(); ++j)
          u[i].v[j] = (*ema_state)[i].v[j] = momentum * (*ema_state)[i].v[j] + (1 - momentum) * u[i].v[j];
    }
    return host_scale(-1.0)(host_decay(wd)(u, p), p);
  };
}

TEST_F(AliasTest, Adafactor) {
  test::expect_matches_reference(adafactor(0.1, {.min_dim_size_to_factor = 3}), host_adafactor(0.1, 0, 0), q, x0, 6);
  test::expect_matches_reference(
      adafactor(0.1, {.min_dim_size_to_factor = 3, .momentum = 0.9, .weight_decay_rate = 1e-3}),
      host_adafactor(0.1, 0.9, 1e-3), q, x0, 6);
  // Without a learning rate the steps are relative (learning rate 1).
  test::expect_matches_reference(adafactor(std::nullopt, {.min_dim_size_to_factor = 3}), host_adafactor(1.0, 0, 0), q,
                                 x0, 3);
}

// Every alias reaches the minimum of the quadratic (jitted steps).
TEST_F(AliasTest, EveryAliasConvergesOnTheQuadratic) {
  // Sign-like optimizers need a decaying step to settle.
  Schedule decay = [](const Array& c) { return 0.1 * power(0.99, c.astype(DType::f32)); };
  struct Case {
    const char* name;
    GradientTransformation tx;
    int steps;
    double tol;
  };
  std::vector<Case> cases = {
      {"sgd", sgd(0.3), 200, 1e-10},
      {"sgd momentum", sgd(0.1, 0.9), 600, 1e-10},
      {"sgd nesterov", sgd(0.1, 0.9, true), 600, 1e-10},
      {"adam", adam(decay), 800, 1e-5},
      {"adamw", adamw(decay, {.weight_decay = 0.0}), 800, 1e-5},
      {"lion", lion(decay, {.weight_decay = 0.0}), 800, 1e-3},
      {"lamb", lamb(decay), 800, 1e-3},
      {"adafactor", adafactor(decay, {.min_dim_size_to_factor = 3}), 800, 1e-4},
      {"rmsprop", rmsprop(decay), 800, 1e-6},
      {"rmsprop centred momentum", rmsprop(decay, {.centered = true, .momentum = 0.5}), 800, 1e-6},
      {"adagrad", adagrad(0.5), 800, 1e-10},
  };
  for (const Case& c : cases) {
    auto step = jit([&c, this](const Tree& x, const Tree& state) {
      auto [u, s] = c.tx.update(q.grad(x), state, x);
      return std::make_pair(apply_updates(x, u), s);
    });
    Tree x = test::to_tree(x0), state = c.tx.init(x);
    double start = q.max_distance(x);
    for (int t = 0; t < c.steps; ++t) std::tie(x, state) = step(x, state);
    EXPECT_LT(q.max_distance(x), c.tol) << c.name << " (started at " << start << ")";
  }
}

TEST_F(AliasTest, Bf16Parameters) {
  Schedule decay = [](const Array& c) { return 0.1 * power(0.99, c.astype(DType::f32)); };
  for (const GradientTransformation& tx : {adamw(decay, {.weight_decay = 0.0}), lion(decay, {.weight_decay = 0.0}),
                                           sgd(0.3, 0.5), adafactor(decay, {.min_dim_size_to_factor = 3})}) {
    Tree x = test::to_tree(x0, DType::bf16);
    Tree state = tx.init(x);
    for (int t = 0; t < 600; ++t) {
      auto [u, s] = tx.update(q.grad(x), state, x);
      x = apply_updates(x, u);
      state = s;
    }
    EXPECT_EQ(x["w"].leaf().dtype(), DType::bf16);
    // Close to the optimum at bf16 resolution: values near 1 are 2^-7 apart, and
    // once the step falls below half of that the parameters stop moving.
    EXPECT_LT(q.max_distance(x), 3e-2);
  }
}

TEST(Aliases, BadHyperparameters) {
  EXPECT_PAX_ERROR(sgd(0.1, 1.5), "trace: decay must be in [0, 1], got 1.5");
  EXPECT_PAX_ERROR(adam(0.1, {.b1 = 1.0}), "scale_by_adam: b1 must be in [0, 1)");
  EXPECT_PAX_ERROR(adamw(0.1, {.b2 = 2.0}), "scale_by_adam: b2 must be in [0, 1)");
  EXPECT_PAX_ERROR(lion(0.1, {.b2 = -0.5}), "scale_by_lion: b2 must be in [0, 1]");
  EXPECT_PAX_ERROR(lamb(0.1, {.eps = -1.0}), "scale_by_adam: eps must be >= 0");
  EXPECT_PAX_ERROR(rmsprop(0.1, {.decay = 1.1}), "scale_by_rms: decay must be in [0, 1]");
  EXPECT_PAX_ERROR(rmsprop(0.1, {.centered = true, .momentum = -0.1}), "trace: decay must be in [0, 1]");
  EXPECT_PAX_ERROR(adagrad(0.1, {.initial_accumulator_value = -1}), "scale_by_rss: initial_accumulator_value");
  EXPECT_PAX_ERROR(adafactor(0.1, {.clipping_threshold = 0.0}), "clip_by_block_rms: threshold must be > 0");
  EXPECT_PAX_ERROR(adafactor(0.1, {.decay_rate = -1}), "scale_by_factored_rms: decay_rate");
  EXPECT_PAX_ERROR(adam(NAN), "scale_by_learning_rate: learning_rate must be finite");
}

}  // namespace
}  // namespace pax::optim

// Adam, Lion, RMS, centred RMS, Adagrad and the trust ratio (see adaptive.h).
#include "pax/optim/adaptive.h"

#include <cmath>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"

namespace pax::optim {

namespace {

bool in_unit_interval_open(double v) { return v >= 0 && v < 1; }
bool in_unit_interval(double v) { return v >= 0 && v <= 1; }
bool non_negative(double v) { return v >= 0; }

// (1 - decay) * x + decay * m: optax's update_moment, in m's dtype.
Array moment(const Array& x, const Array& m, const Array& decay) { return (1.0 - decay) * x + decay * m; }

// The moment update of a whole tree, of g or (squared) g^2; a scheduled
// decay is evaluated at `count`.
Tree update_moment(const Tree& x, const Tree& m, const ScalarOrSchedule& decay, const Array& count, bool squared) {
  return tree_map(
      [&](const Array& g, const Array& old) {
        Array gm = g.astype(old.dtype());
        return moment(squared ? square(gm) : gm, old, hyper(decay, count, old.dtype()));
      },
      x, m);
}

}  // namespace

GradientTransformation scale_by_adam(ScalarOrSchedule b1, ScalarOrSchedule b2, ScalarOrSchedule eps,
                                     ScalarOrSchedule eps_root, bool nesterov) {
  const char* op = "scale_by_adam";
  check_hyper(b1, in_unit_interval_open, op, "b1", "in [0, 1)");
  check_hyper(b2, in_unit_interval_open, op, "b2", "in [0, 1)");
  check_hyper(eps, non_negative, op, "eps", ">= 0");
  check_hyper(eps_root, non_negative, op, "eps_root", ">= 0");
  GradientTransformation t;
  t.init = [](const Tree& params) {
    return Tree::dict(
        {{"count", zero_count()}, {"mu", zeros_like_moments(params)}, {"nu", zeros_like_moments(params)}});
  };
  t.update = [=](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& mu0 = state_entry(op, state, "mu");
    const Tree& nu0 = state_entry(op, state, "nu");
    const Array& count = state_entry(op, state, "count").leaf();
    check_structure(op, updates, mu0, "state 'mu'");
    check_structure(op, updates, nu0, "state 'nu'");
    Array t1 = safe_increment(count);
    Tree mu = update_moment(updates, mu0, b1, count, false);
    Tree nu = update_moment(updates, nu0, b2, count, true);
    std::vector<Tree> trees = {updates, mu, nu};
    Tree out = tree_map_n(
        [&](std::span<const Array> x) {
          const Array &m = x[1], &v = x[2];
          DType dt = m.dtype();
          Array beta1 = hyper(b1, count, dt);
          Array mu_hat = nesterov ? beta1 * m / bias_correction(beta1, safe_increment(t1), dt) +
                                        (1.0 - beta1) * x[0].astype(dt) / bias_correction(beta1, t1, dt)
                                  : m / bias_correction(beta1, t1, dt);
          Array nu_hat = v / bias_correction(hyper(b2, count, dt), t1, dt);
          return mu_hat / (sqrt(nu_hat + hyper(eps_root, count, dt)) + hyper(eps, count, dt));
        },
        trees);
    return std::make_pair(out, Tree::dict({{"count", t1}, {"mu", mu}, {"nu", nu}}));
  };
  return t;
}

GradientTransformation scale_by_lion(ScalarOrSchedule b1, ScalarOrSchedule b2) {
  const char* op = "scale_by_lion";
  check_hyper(b1, in_unit_interval, op, "b1", "in [0, 1]");
  check_hyper(b2, in_unit_interval, op, "b2", "in [0, 1]");
  GradientTransformation t;
  t.init = [](const Tree& params) { return Tree::dict({{"count", zero_count()}, {"mu", zeros_like_moments(params)}}); };
  t.update = [=](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& mu0 = state_entry(op, state, "mu");
    const Array& count = state_entry(op, state, "count").leaf();
    check_structure(op, updates, mu0, "state 'mu'");
    auto lion_sign = [&](const Array& g, const Array& m) {
      return sign(moment(g.astype(m.dtype()), m, hyper(b1, count, m.dtype())));
    };
    Tree out = tree_map(lion_sign, updates, mu0);
    Tree mu = update_moment(updates, mu0, b2, count, false);
    return std::make_pair(out, Tree::dict({{"count", safe_increment(count)}, {"mu", mu}}));
  };
  return t;
}

namespace {

// scale_by_rms and scale_by_stddev: the second moment, optionally the first
// (centred), optional bias correction, and eps inside or outside the sqrt.
GradientTransformation rms_scaling(const char* op, bool centered, double decay, double eps, double initial_scale,
                                   bool eps_in_sqrt, bool bias_correction_on) {
  check_hyper(in_unit_interval(decay), op, "decay", decay, "in [0, 1]");
  check_hyper(eps >= 0, op, "eps", eps, ">= 0");
  check_hyper(std::isfinite(initial_scale) && initial_scale >= 0, op, "initial_scale", initial_scale,
              "finite and >= 0");
  GradientTransformation t;
  t.init = [=](const Tree& params) {
    Tree::Dict s;
    if (bias_correction_on) s.emplace_back("count", zero_count());
    if (centered) s.emplace_back("mu", zeros_like_moments(params));
    s.emplace_back("nu", full_like_moments(params, initial_scale));
    return Tree::dict(std::move(s));
  };
  t.update = [=](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& nu0 = state_entry(op, state, "nu");
    check_structure(op, updates, nu0, "state 'nu'");
    Tree::Dict s;
    Array t1;
    if (bias_correction_on) {
      t1 = safe_increment(state_entry(op, state, "count").leaf());
      s.emplace_back("count", t1);
    }
    Tree mu;
    if (centered) {
      const Tree& mu0 = state_entry(op, state, "mu");
      check_structure(op, updates, mu0, "state 'mu'");
      mu = update_moment(updates, mu0, decay, zero_count(), false);
      s.emplace_back("mu", mu);
    }
    Tree nu = update_moment(updates, nu0, decay, zero_count(), true);
    s.emplace_back("nu", nu);
    std::vector<Tree> trees = {updates, nu, centered ? mu : nu};
    Tree out = tree_map_n(
        [&](std::span<const Array> x) {
          const Array& v = x[1];
          DType dt = v.dtype();
          Array correction = bias_correction_on ? bias_correction(scalar(decay, dt), t1, dt) : scalar(1.0, dt);
          Array denom_sq = v / correction;
          if (centered) denom_sq = denom_sq - square(x[2] / correction);
          Array scaling = eps_in_sqrt ? rsqrt(denom_sq + eps) : 1.0 / (sqrt(denom_sq) + eps);
          return scaling * x[0].astype(dt);
        },
        trees);
    return std::make_pair(out, Tree::dict(std::move(s)));
  };
  return t;
}

}  // namespace

GradientTransformation scale_by_rms(double decay, double eps, double initial_scale, bool eps_in_sqrt,
                                    bool bias_correction) {
  return rms_scaling("scale_by_rms", false, decay, eps, initial_scale, eps_in_sqrt, bias_correction);
}

GradientTransformation scale_by_stddev(double decay, double eps, double initial_scale, bool eps_in_sqrt,
                                       bool bias_correction) {
  return rms_scaling("scale_by_stddev", true, decay, eps, initial_scale, eps_in_sqrt, bias_correction);
}

GradientTransformation scale_by_rss(double initial_accumulator_value, double eps) {
  const char* op = "scale_by_rss";
  check_hyper(std::isfinite(initial_accumulator_value) && initial_accumulator_value >= 0, op,
              "initial_accumulator_value", initial_accumulator_value, "finite and >= 0");
  check_hyper(eps >= 0, op, "eps", eps, ">= 0");
  GradientTransformation t;
  t.init = [initial_accumulator_value](const Tree& params) {
    return Tree::dict({{"sum_of_squares", full_like_moments(params, initial_accumulator_value)}});
  };
  t.update = [op, eps](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& s0 = state_entry(op, state, "sum_of_squares");
    check_structure(op, updates, s0, "state 'sum_of_squares'");
    Tree s =
        tree_map([](const Array& g, const Array& acc) { return square(g.astype(acc.dtype())) + acc; }, updates, s0);
    // A zero accumulator (no initial value, zero gradients so far) scales by 0, not by 1 / sqrt(eps).
    auto scaled = [eps](const Array& g, const Array& acc) {
      return where(acc > 0, rsqrt(acc + eps), 0.0) * g.astype(acc.dtype());
    };
    Tree out = tree_map(scaled, updates, s);
    return std::make_pair(out, Tree::dict({{"sum_of_squares", s}}));
  };
  return t;
}

GradientTransformation scale_by_trust_ratio(double min_norm, double trust_coefficient, double eps) {
  const char* op = "scale_by_trust_ratio";
  check_hyper(min_norm >= 0, op, "min_norm", min_norm, ">= 0");
  check_hyper(std::isfinite(trust_coefficient), op, "trust_coefficient", trust_coefficient, "finite");
  check_hyper(eps >= 0, op, "eps", eps, ">= 0");
  return stateless([=](const Tree& updates, const Tree& params) {
    require_params(op, updates, params);
    return tree_map(
        [=](const Array& u, const Array& p) {
          DType dt = promote_types(moment_dtype(u.dtype()), moment_dtype(p.dtype()));
          Array uu = u.astype(dt);
          // optax's safe_norm: the norm, but never below min_norm.
          auto safe_norm = [min_norm](const Array& x) {
            Array n = sqrt(sum(square(x)));
            return where(n <= min_norm, min_norm, n).astype(x.dtype());
          };
          Array param_norm = safe_norm(p.astype(dt));
          Array update_norm = safe_norm(uu);
          Array ratio = trust_coefficient * param_norm / (update_norm + eps);
          Array zero_norm = logical_or(equal(param_norm, 0.0), equal(update_norm, 0.0));
          return uu * where(zero_norm, 1.0, ratio).astype(dt);
        },
        updates, params);
  });
}

}  // namespace pax::optim

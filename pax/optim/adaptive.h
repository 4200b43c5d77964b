// Adaptive rescalings of optax: Adam, Lion, RMS / centred RMS (RMSProp),
// root-sum-of-squares (Adagrad), the layer-wise trust ratio (LAMB), and
// Adafactor's pieces (factored second moments, block-RMS clipping, scaling
// by the parameters' RMS). Formulas, defaults and epsilon placement follow
// optax; moments are kept in the moment dtype (the parameter's, f32 for
// 16-bit parameters) and the updates come out in that dtype.
#pragma once

#include <cstdint>

#include "pax/optim/gradient_transformation.h"

namespace pax::optim {

// Adam: mu = b1 mu + (1 - b1) g, nu = b2 nu + (1 - b2) g^2, t = count + 1,
// update = mu_hat / (sqrt(nu_hat + eps_root) + eps) with mu_hat = mu / (1 - b1^t),
// nu_hat = nu / (1 - b2^t). nesterov (NAdam, optax's form):
// mu_hat = b1 mu / (1 - b1^(t+1)) + (1 - b1) g / (1 - b1^t).
// b1, b2 in [0, 1), eps, eps_root >= 0; schedules are evaluated at the count.
// State {"count", "mu", "nu"}.
GradientTransformation scale_by_adam(ScalarOrSchedule b1 = 0.9, ScalarOrSchedule b2 = 0.999,
                                     ScalarOrSchedule eps = 1e-8, ScalarOrSchedule eps_root = 0.0,
                                     bool nesterov = false);

// Lion: update = sign((1 - b1) g + b1 mu), then mu = (1 - b2) g + b2 mu.
// b1, b2 in [0, 1]. State {"count", "mu"}.
GradientTransformation scale_by_lion(ScalarOrSchedule b1 = 0.9, ScalarOrSchedule b2 = 0.99);

// RMSProp's scaling: nu = decay nu + (1 - decay) g^2 (from initial_scale),
// update = g / sqrt(nu + eps) (eps_in_sqrt) or g / (sqrt(nu) + eps); with
// bias_correction nu is divided by 1 - decay^t. State {"nu"} (+ "count").
GradientTransformation scale_by_rms(double decay = 0.9, double eps = 1e-8, double initial_scale = 0.0,
                                    bool eps_in_sqrt = true, bool bias_correction = false);

// Centred RMSProp: also mu = decay mu + (1 - decay) g, and the denominator
// uses nu - mu^2. State {"mu", "nu"} (+ "count").
GradientTransformation scale_by_stddev(double decay = 0.9, double eps = 1e-8, double initial_scale = 0.0,
                                       bool eps_in_sqrt = true, bool bias_correction = false);

// Adagrad: s = s + g^2 (from initial_accumulator_value),
// update = g / sqrt(s + eps) where s > 0, else 0. State {"sum_of_squares"}.
GradientTransformation scale_by_rss(double initial_accumulator_value = 0.1, double eps = 1e-7);

// LAMB / LARS trust ratio, per leaf: update * trust_coefficient * |p| / (|u| + eps)
// with both norms at least min_norm; the ratio is 1 where either norm is 0
// (a zero-initialised parameter still moves). Needs the params; no state.
GradientTransformation scale_by_trust_ratio(double min_norm = 0.0, double trust_coefficient = 1.0, double eps = 0.0);

// Adafactor's factored second-moment estimate (Shazeer & Stern 2018).
struct FactoredRmsOptions {
  bool factored = true;                  // factor leaves of rank >= 2 (see below)
  double decay_rate = 0.8;               // decay at step t: 1 - (t + 1)^-decay_rate
  int64_t step_offset = 0;               // t = count - step_offset (for fine-tuning)
  int64_t min_dim_size_to_factor = 128;  // factor only if the two largest dims are >= this
  double epsilon = 1e-30;                // added to g^2
};
// For a leaf of rank >= 2 whose two largest dims (d1 <= d0, ties by order)
// are >= min_dim_size_to_factor, keeps v_row (g^2 averaged over d0) and v_col
// (averaged over d1) and scales by rsqrt(v_row / mean(v_row) outer v_col);
// other leaves keep a full v and scale by rsqrt(v). State {"count", "v_row",
// "v_col", "v"}, with [1] placeholders where a leaf does not use an entry (as optax).
GradientTransformation scale_by_factored_rms(const FactoredRmsOptions& options = {});

// Divides each leaf by max(1, rms(leaf) / threshold), threshold > 0; no state.
GradientTransformation clip_by_block_rms(double threshold);

// Multiplies each leaf by max(rms(param), min_scale) (Adafactor's
// parameter scale). Needs the params; no state.
GradientTransformation scale_by_param_block_rms(double min_scale = 1e-3);

}  // namespace pax::optim

// Ready-made optimizers (optax's aliases): chains of the transformations in
// basic_transforms.h / adaptive.h ending in the (negative) learning rate. The
// learning rate comes first, as a constant or a schedule; optax's keyword
// arguments are an options struct with optax's defaults:
//
//   GradientTransformation tx = adamw(1e-3, {.b2 = 0.95, .weight_decay = 0.01, .mask = not_bias});
//   GradientTransformation tx = sgd(schedule, 0.9, /*nesterov=*/true);
#pragma once

#include <optional>

#include "pax/optim/gradient_transformation.h"
#include "pax/optim/basic_transforms.h"

namespace pax::optim {

// SGD: optional momentum (trace(momentum, nesterov)), then -learning_rate.
GradientTransformation sgd(ScalarOrSchedule learning_rate, std::optional<double> momentum = std::nullopt,
                           bool nesterov = false);

struct AdamOptions {
  ScalarOrSchedule b1 = 0.9;
  ScalarOrSchedule b2 = 0.999;
  ScalarOrSchedule eps = 1e-8;
  ScalarOrSchedule eps_root = 0.0;
  bool nesterov = false;  // NAdam
};
// scale_by_adam, then -learning_rate.
GradientTransformation adam(ScalarOrSchedule learning_rate, const AdamOptions& options = {});

struct AdamWOptions {
  ScalarOrSchedule b1 = 0.9;
  ScalarOrSchedule b2 = 0.999;
  ScalarOrSchedule eps = 1e-8;
  ScalarOrSchedule eps_root = 0.0;
  bool nesterov = false;
  // Added to the Adam update before the learning rate scales it (so the
  // decay is multiplied by the learning rate, as in optax and PyTorch).
  ScalarOrSchedule weight_decay = 1e-4;
  Mask mask = nullptr;  // leaves to decay (all when empty)
};
// scale_by_adam, add_decayed_weights(weight_decay, mask), -learning_rate.
GradientTransformation adamw(ScalarOrSchedule learning_rate, const AdamWOptions& options = {});

struct AdafactorOptions {
  int64_t min_dim_size_to_factor = 128;
  double decay_rate = 0.8;
  int64_t decay_offset = 0;
  bool multiply_by_parameter_scale = true;         // scale by max(rms(param), 1e-3)
  std::optional<double> clipping_threshold = 1.0;  // clip_by_block_rms; none disables
  std::optional<double> momentum;                  // ema(momentum, debias=false)
  std::optional<double> weight_decay_rate;
  double eps = 1e-30;
  bool factored = true;
  Mask weight_decay_mask = nullptr;
};
// scale_by_factored_rms, clip_by_block_rms, * learning_rate (when given),
// scale_by_param_block_rms, ema (momentum), add_decayed_weights, * -1.
// Without a learning rate the parameter scale gives relative step sizes.
GradientTransformation adafactor(std::optional<ScalarOrSchedule> learning_rate = std::nullopt,
                                 const AdafactorOptions& options = {});

struct LionOptions {
  ScalarOrSchedule b1 = 0.9;
  ScalarOrSchedule b2 = 0.99;
  ScalarOrSchedule weight_decay = 1e-3;
  Mask mask = nullptr;
};
// scale_by_lion, add_decayed_weights(weight_decay, mask), -learning_rate.
GradientTransformation lion(ScalarOrSchedule learning_rate, const LionOptions& options = {});

// Flat like optax's keyword arguments (a nested AdamOptions would lose
// LAMB's eps default as soon as one Adam field is set).
struct LambOptions {
  ScalarOrSchedule b1 = 0.9;
  ScalarOrSchedule b2 = 0.999;
  ScalarOrSchedule eps = 1e-6;
  ScalarOrSchedule eps_root = 0.0;
  ScalarOrSchedule weight_decay = 0.0;
  Mask mask = nullptr;
};
// scale_by_adam, add_decayed_weights, scale_by_trust_ratio, -learning_rate.
GradientTransformation lamb(ScalarOrSchedule learning_rate, const LambOptions& options = {});

struct RmspropOptions {
  double decay = 0.9;
  double eps = 1e-8;
  double initial_scale = 0.0;
  bool eps_in_sqrt = true;
  bool centered = false;  // scale_by_stddev instead of scale_by_rms
  std::optional<double> momentum;
  bool nesterov = false;
  bool bias_correction = false;
};
// scale_by_rms (or scale_by_stddev), -learning_rate, then optional trace(momentum, nesterov).
GradientTransformation rmsprop(ScalarOrSchedule learning_rate, const RmspropOptions& options = {});

struct AdagradOptions {
  double initial_accumulator_value = 0.1;
  double eps = 1e-7;
};
// scale_by_rss, -learning_rate.
GradientTransformation adagrad(ScalarOrSchedule learning_rate, const AdagradOptions& options = {});

}  // namespace pax::optim

// The optimizer aliases (see aliases.h): the same chains as optax's.
#include "pax/optim/aliases.h"

#include "pax/optim/adaptive.h"
#include "pax/optim/wrappers.h"

namespace pax::optim {

GradientTransformation sgd(ScalarOrSchedule learning_rate, std::optional<double> momentum, bool nesterov) {
  return chain({momentum ? trace(*momentum, nesterov) : identity(), scale_by_learning_rate(learning_rate)});
}

GradientTransformation adam(ScalarOrSchedule learning_rate, const AdamOptions& o) {
  return chain({scale_by_adam(o.b1, o.b2, o.eps, o.eps_root, o.nesterov), scale_by_learning_rate(learning_rate)});
}

GradientTransformation adamw(ScalarOrSchedule learning_rate, const AdamWOptions& o) {
  return chain({scale_by_adam(o.b1, o.b2, o.eps, o.eps_root, o.nesterov), add_decayed_weights(o.weight_decay, o.mask),
                scale_by_learning_rate(learning_rate)});
}

GradientTransformation adafactor(std::optional<ScalarOrSchedule> learning_rate, const AdafactorOptions& o) {
  std::vector<GradientTransformation> tx;
  tx.push_back(scale_by_factored_rms({.factored = o.factored,
                                      .decay_rate = o.decay_rate,
                                      .step_offset = o.decay_offset,
                                      .min_dim_size_to_factor = o.min_dim_size_to_factor,
                                      .epsilon = o.eps}));
  if (o.clipping_threshold) tx.push_back(clip_by_block_rms(*o.clipping_threshold));
  if (learning_rate) tx.push_back(scale_by_learning_rate(*learning_rate, /*flip_sign=*/false));
  if (o.multiply_by_parameter_scale) tx.push_back(scale_by_param_block_rms());
  if (o.momentum) tx.push_back(ema(*o.momentum, /*debias=*/false));
  if (o.weight_decay_rate) tx.push_back(add_decayed_weights(*o.weight_decay_rate, o.weight_decay_mask));
  // Gradient descent follows the negative gradient.
  tx.push_back(scale(-1.0));
  return chain(std::move(tx));
}

GradientTransformation lion(ScalarOrSchedule learning_rate, const LionOptions& o) {
  return chain(
      {scale_by_lion(o.b1, o.b2), add_decayed_weights(o.weight_decay, o.mask), scale_by_learning_rate(learning_rate)});
}

GradientTransformation lamb(ScalarOrSchedule learning_rate, const LambOptions& o) {
  return chain({scale_by_adam(o.b1, o.b2, o.eps, o.eps_root), add_decayed_weights(o.weight_decay, o.mask),
                scale_by_trust_ratio(), scale_by_learning_rate(learning_rate)});
}

GradientTransformation rmsprop(ScalarOrSchedule learning_rate, const RmspropOptions& o) {
  GradientTransformation rms = o.centered
                                   ? scale_by_stddev(o.decay, o.eps, o.initial_scale, o.eps_in_sqrt, o.bias_correction)
                                   : scale_by_rms(o.decay, o.eps, o.initial_scale, o.eps_in_sqrt, o.bias_correction);
  return chain({rms, scale_by_learning_rate(learning_rate), o.momentum ? trace(*o.momentum, o.nesterov) : identity()});
}

GradientTransformation adagrad(ScalarOrSchedule learning_rate, const AdagradOptions& o) {
  return chain({scale_by_rss(o.initial_accumulator_value, o.eps), scale_by_learning_rate(learning_rate)});
}

}  // namespace pax::optim

// Learner: the optimizer chain and its checks.
#include "pax/train/learner.h"

#include <cmath>

#include "pax/core/error.h"
#include "pax/optim/schedules.h"
#include "pax/optim/basic_transforms.h"

namespace pax::train {

const optim::OptimizerHParams& Learner::optimizer_hparams() const {
  return optim::optimizer_hparams(optimizer, "learner.optimizer");
}

optim::GradientTransformation Learner::make_optimizer() const {
  PAX_CHECK(clip_gradient_norm_to_value >= 0 && std::isfinite(clip_gradient_norm_to_value),
            "learner.clip_gradient_norm_to_value must be >= 0 (0: no clipping), got ", clip_gradient_norm_to_value);
  PAX_CHECK(skip_step_gradient_norm_value >= 0,
            "learner.skip_step_gradient_norm_value must be >= 0 (0: never skip), got ", skip_step_gradient_norm_value);
  PAX_CHECK(!loss_name.empty(), "learner.loss_name must name a metric of the model, e.g. total_loss");
  PAX_CHECK(max_consecutive_nonfinite_steps >= 0,
            "learner.max_consecutive_nonfinite_steps must be >= 0 (0: never stop), got ",
            max_consecutive_nonfinite_steps);
  optim::GradientTransformation tx = optimizer_hparams().make();
  if (clip_gradient_norm_to_value == 0) return tx;
  return optim::chain({optim::clip_by_global_norm(clip_gradient_norm_to_value), std::move(tx)});
}

optim::GradientTransformation Learner::make_optimizer_without_clipping() const {
  optim::GradientTransformation tx = make_optimizer();  // its checks
  if (clip_gradient_norm_to_value == 0) return tx;
  return optim::chain({optim::identity(), optimizer_hparams().make()});
}

double Learner::learning_rate(int64_t step) const {
  return optim::schedule_value(optimizer_hparams().learning_rate_schedule(), step);
}

PAX_REGISTER_HPARAMS(Learner, "learner");

}  // namespace pax::train

// Learner (Praxis's learners.Learner): how a model's loss becomes parameter
// updates — which metric is the loss, the optimizer, gradient clipping, and
// which steps are skipped (non-finite gradients, or a gradient norm above a
// threshold: the parameters and optimizer state then stay as they were).
#pragma once

#include <string>

#include "pax/config/hparams.h"
#include "pax/optim/configs.h"

namespace pax::train {

struct Learner : BaseHParams {
  std::string loss_name = "total_loss";
  HParamsPtr optimizer = std::make_shared<optim::Adam>();
  double clip_gradient_norm_to_value = 0.0;
  bool skip_nonfinite_steps = true;
  double skip_step_gradient_norm_value = 0.0;
  int64_t max_consecutive_nonfinite_steps = 10;
  PAX_HPARAMS(Learner, BaseHParams, (loss_name, "The metric of compute_loss that is minimised."),
              (optimizer, "The optimizer (Sgd, Adam, Adafactor, Lion, Lamb, RmsProp, Adagrad)."),
              (clip_gradient_norm_to_value, "Scale gradients down to this global norm (0: no clipping).",
               range::non_negative),
              (skip_nonfinite_steps, "Skip updates whose gradients contain NaN or infinity."),
              (skip_step_gradient_norm_value, "Skip updates whose gradient norm exceeds this (0: never).",
               range::non_negative),
              (max_consecutive_nonfinite_steps,
               "Stop the run (exit 1) after this many consecutive steps with a non-finite loss or gradients (0: "
               "never).",
               range::steps));

  const optim::OptimizerHParams& optimizer_hparams() const;
  // Clipping followed by the optimizer.
  optim::GradientTransformation make_optimizer() const;
  // make_optimizer with the identity in place of the clipping (a sharded
  // train step clips with the norm over every process's blocks itself): the
  // same optimizer state, so that checkpoints move between the two.
  optim::GradientTransformation make_optimizer_without_clipping() const;
  // The learning rate at a step (for logging).
  double learning_rate(int64_t step) const;
};

}  // namespace pax::train

// Configurable schedules and optimizers (Praxis's schedules.* and
// optimizers.* HParams): registered HParams types that an experiment's
// learner config names and `--set` can edit, each building the optax-style
// object of schedules.h / aliases.h.
//
//   learner.optimizer = Adam {learning_rate = 1e-3, weight_decay = 0.01,
//                             lr_schedule = LinearRampupCosineDecay {...}}
//
// As in Praxis, the learning rate at a step is learning_rate * lr_schedule(step).
// An optimizer's HParams hold the options struct of its optax alias
// (aliases.h) and name its fields as Praxis does: Adam's beta1 is
// options.b1.
#pragma once

#include "pax/config/hparams.h"
#include "pax/optim/aliases.h"
#include "pax/optim/basic_transforms.h"
#include "pax/optim/gradient_transformation.h"

namespace pax::config_detail {
// A constant-or-schedule option is configured as its constant.
inline FieldRef ref(const char* name, const char* doc, optim::ScalarOrSchedule& value) {
  return ref(name, doc, value.constant_storage());
}
}  // namespace pax::config_detail

namespace pax::optim {

// Registers an optimizer or schedule HParams type by its name, in the file
// that defines it (as PAX_REGISTER_LAYER and PAX_REGISTER_EXPERIMENT do):
// configs then name it (`learner.optimizer = MyOptimizer {...}`, `--set`).
#define PAX_REGISTER_OPTIMIZER(Cls) PAX_REGISTER_HPARAMS(Cls, "optimizer")
#define PAX_REGISTER_SCHEDULE(Cls) PAX_REGISTER_HPARAMS(Cls, "schedule")

// ---------------------------------------------------------------------------
// Schedules (registered with kind "schedule").

struct ScheduleHParams : BaseHParams {
  using BaseHParams::visit_fields;
  void visit_fields(const std::function<void(const FieldRef&)>&) override {}
  virtual Schedule make() const = 0;
};

struct ConstantSchedule : ScheduleHParams {
  double value = 1.0;
  PAX_HPARAMS(ConstantSchedule, ScheduleHParams, (value, "The constant value.", range::non_negative));
  Schedule make() const override;
};

struct LinearSchedule : ScheduleHParams {
  double init_value = 1.0;
  double end_value = 0.0;
  int64_t transition_steps = 1000;
  int64_t transition_begin = 0;
  PAX_HPARAMS(LinearSchedule, ScheduleHParams, (init_value, "Value before transition_begin.", range::non_negative),
              (end_value, "Value after transition_begin + transition_steps.", range::non_negative),
              (transition_steps, "Steps of the linear change.", range::steps),
              (transition_begin, "Step where the change starts.", range::steps));
  Schedule make() const override;
};

struct PiecewiseConstantSchedule : ScheduleHParams {
  std::vector<int64_t> boundaries;
  std::vector<double> values = {1.0};
  PAX_HPARAMS(PiecewiseConstantSchedule, ScheduleHParams,
              (boundaries, "Increasing steps where the value changes (one fewer than values).", range::steps),
              (values, "values[i] applies before boundaries[i]; the last one after the last boundary.",
               range::non_negative));
  Schedule make() const override;
};

struct ExponentialDecaySchedule : ScheduleHParams {
  double init_value = 1.0;
  int64_t transition_steps = 1000;
  double decay_rate = 0.5;
  int64_t transition_begin = 0;
  bool staircase = false;
  PAX_HPARAMS(ExponentialDecaySchedule, ScheduleHParams,
              (init_value, "Value at transition_begin.", range::non_negative),
              (transition_steps, "Steps per decay by decay_rate.", range::steps),
              (decay_rate, "Factor per transition_steps.", range::positive),
              (transition_begin, "Step where the decay starts.", range::steps), (staircase, "Decay in whole steps."));
  Schedule make() const override;
};

struct WarmupCosineDecaySchedule : ScheduleHParams {
  double init_value = 0.0;
  double peak_value = 1.0;
  int64_t warmup_steps = 100;
  int64_t decay_steps = 1000;
  double end_value = 0.0;
  PAX_HPARAMS(WarmupCosineDecaySchedule, ScheduleHParams, (init_value, "Value at step 0.", range::non_negative),
              (peak_value, "Value at the end of the warmup.", range::non_negative),
              (warmup_steps, "Steps of the linear warmup.", range::steps),
              (decay_steps, "Total steps of warmup and cosine decay.", range::steps),
              (end_value, "Value after decay_steps.", range::non_negative));
  Schedule make() const override;
};

// Praxis's linear rampup to `max`, then a decay from decay_start to
// decay_end down to max * min_ratio: the fields of the two below.
struct LinearRampupDecay : ScheduleHParams {
  int64_t warmup_steps = 0;
  int64_t decay_start = 0;
  int64_t decay_end = 0;
  double min_ratio = 0.01;
  double max = 1.0;
  PAX_HPARAMS(LinearRampupDecay, ScheduleHParams, (warmup_steps, "Steps of the linear rampup to max.", range::steps),
              (decay_start, "Step where the decay starts.", range::steps),
              (decay_end, "Step where the decay reaches max * min_ratio.", range::steps),
              (min_ratio, "Final ratio.", range::fraction), (max, "Value after the rampup.", range::non_negative));
};

struct LinearRampupExponentialDecay : LinearRampupDecay {
  PAX_HPARAMS_NO_FIELDS(LinearRampupExponentialDecay, LinearRampupDecay);
  Schedule make() const override;
};

struct LinearRampupCosineDecay : LinearRampupDecay {
  PAX_HPARAMS_NO_FIELDS(LinearRampupCosineDecay, LinearRampupDecay);
  Schedule make() const override;
};

// ---------------------------------------------------------------------------
// Optimizers (registered with kind "optimizer").

struct OptimizerHParams : BaseHParams {
  double learning_rate = 1e-3;
  HParamsPtr lr_schedule = std::make_shared<ConstantSchedule>();
  double weight_decay = 0.0;
  bool decay_vectors = false;
  double ema_decay = 0.0;
  using BaseHParams::visit_fields;
  void visit_fields(const std::function<void(const FieldRef&)>& f) override;

  // Whether the update reads statistics of whole tensors (factored moments,
  // trust ratios), so that it cannot be computed on the blocks each process
  // holds under fully sharded data, tensor or pipeline parallelism. An
  // optimizer says so where it is declared; the train step asks.
  virtual bool needs_whole_tensors() const { return false; }

  // learning_rate * lr_schedule(step).
  Schedule learning_rate_schedule() const;
  // The whole optimizer: the update rule, decoupled weight decay (of
  // matrices only unless decay_vectors), the learning rate, and an EMA of
  // the parameters when ema_decay > 0 (read it with param_ema()).
  GradientTransformation make() const;

 protected:
  // The optimizer with its learning rate and weight decay.
  virtual GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const = 0;
};

struct Sgd : OptimizerHParams {
  std::optional<double> momentum;
  bool nesterov = false;
  PAX_HPARAMS(Sgd, OptimizerHParams, (momentum, "Momentum decay (None: plain SGD).", range::fraction),
              (nesterov, "Nesterov momentum."));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct Adam : OptimizerHParams {
  AdamWOptions options;  // optax's adamw; weight_decay and its mask come from OptimizerHParams
  PAX_HPARAMS(Adam, OptimizerHParams, ((beta1, options.b1), "Decay of the first moment.", range::probability),
              ((beta2, options.b2), "Decay of the second moment.", range::probability),
              ((epsilon, options.eps), "Added to the root of the second moment.", range::non_negative),
              ((epsilon_root, options.eps_root), "Added to the second moment inside the root.", range::non_negative));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct Adafactor : OptimizerHParams {
  AdafactorOptions options;  // optax's adafactor; weight decay comes from OptimizerHParams
  PAX_HPARAMS(Adafactor, OptimizerHParams,
              ((min_dim_size_to_factor, options.min_dim_size_to_factor),
               "Factor second moments of matrices whose two largest dims are this large.", range::size),
              ((decay_rate, options.decay_rate), "Exponent of the second-moment decay schedule.", range::positive),
              ((multiply_by_parameter_scale, options.multiply_by_parameter_scale),
               "Scale updates by the parameter's root mean square."),
              ((clipping_threshold, options.clipping_threshold), "Clip updates to this block RMS (None: no clipping).",
               range::non_negative),
              ((momentum, options.momentum), "First-moment decay (None: no momentum).", range::fraction),
              ((epsilon, options.eps), "Regulariser of the second moment.", range::non_negative));
  bool needs_whole_tensors() const override { return true; }  // factored second moments, block RMS

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct Lion : OptimizerHParams {
  LionOptions options;  // optax's lion; weight_decay and its mask come from OptimizerHParams
  PAX_HPARAMS(Lion, OptimizerHParams,
              ((beta1, options.b1), "Interpolation of the update direction.", range::probability),
              ((beta2, options.b2), "Decay of the momentum.", range::probability));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct Lamb : OptimizerHParams {
  LambOptions options;  // optax's lamb; weight_decay and its mask come from OptimizerHParams
  PAX_HPARAMS(Lamb, OptimizerHParams, ((beta1, options.b1), "Decay of the first moment.", range::probability),
              ((beta2, options.b2), "Decay of the second moment.", range::probability),
              ((epsilon, options.eps), "Added to the root of the second moment.", range::non_negative));
  bool needs_whole_tensors() const override { return true; }  // per-tensor trust ratios

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct RmsProp : OptimizerHParams {
  RmspropOptions options;  // optax's rmsprop; weight decay comes from OptimizerHParams
  PAX_HPARAMS(RmsProp, OptimizerHParams,
              ((decay, options.decay), "Decay of the squared-gradient average.", range::fraction),
              ((epsilon, options.eps), "Added to the squared-gradient average.", range::non_negative),
              ((centered, options.centered), "Divide by the standard deviation."),
              ((momentum, options.momentum), "Momentum decay (None: no momentum).", range::fraction));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

struct Adagrad : OptimizerHParams {
  AdagradOptions options;  // optax's adagrad; weight decay comes from OptimizerHParams
  PAX_HPARAMS(Adagrad, OptimizerHParams,
              ((initial_accumulator_value, options.initial_accumulator_value), "Initial sum of squared gradients.",
               range::non_negative),
              ((epsilon, options.eps), "Added to the root of the sum.", range::non_negative));

 protected:
  GradientTransformation make_with(const Schedule& learning_rate, const Mask& decay_mask) const override;
};

// The registered optimizers whose updates work on blocks of tensors
// (needs_whole_tensors() false), by name.
std::vector<std::string> blockwise_optimizers();

// The schedule of a `lr_schedule`-style template field (throws naming
// `field` unless it holds a schedule).
Schedule make_schedule(const HParamsPtr& hparams, const std::string& field);
// The optimizer of an `optimizer`-style template field.
const OptimizerHParams& optimizer_hparams(const HParamsPtr& hparams, const std::string& field);

}  // namespace pax::optim

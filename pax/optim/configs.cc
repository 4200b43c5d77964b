// Configurable schedules and optimizers: building the optax-style objects
// from their HParams, each registered beside its definition.
#include "pax/optim/configs.h"

#include <cmath>
#include <map>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/schedules.h"
#include "pax/optim/tree_utils.h"
#include "pax/optim/wrappers.h"

namespace pax::optim {

Schedule ConstantSchedule::make() const { return constant_schedule(value); }
PAX_REGISTER_SCHEDULE(ConstantSchedule);

Schedule LinearSchedule::make() const {
  return linear_schedule(init_value, end_value, transition_steps, transition_begin);
}
PAX_REGISTER_SCHEDULE(LinearSchedule);

Schedule PiecewiseConstantSchedule::make() const {
  PAX_CHECK(values.size() == boundaries.size() + 1,
            "PiecewiseConstantSchedule: needs one value more than boundaries, got ", values.size(), " values and ",
            boundaries.size(), " boundaries");
  std::vector<Schedule> pieces;
  for (double v : values) pieces.push_back(constant_schedule(v));
  return join_schedules(std::move(pieces), boundaries);
}
PAX_REGISTER_SCHEDULE(PiecewiseConstantSchedule);

Schedule ExponentialDecaySchedule::make() const {
  return exponential_decay(init_value, transition_steps, decay_rate, transition_begin, staircase);
}
PAX_REGISTER_SCHEDULE(ExponentialDecaySchedule);

Schedule WarmupCosineDecaySchedule::make() const {
  return warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps, end_value);
}
PAX_REGISTER_SCHEDULE(WarmupCosineDecaySchedule);

Schedule LinearRampupExponentialDecay::make() const {
  return linear_rampup_exponential_decay(warmup_steps, decay_start, decay_end, max, min_ratio);
}
PAX_REGISTER_SCHEDULE(LinearRampupExponentialDecay);

Schedule LinearRampupCosineDecay::make() const {
  return linear_rampup_cosine_decay(warmup_steps, decay_start, decay_end, max, min_ratio);
}
PAX_REGISTER_SCHEDULE(LinearRampupCosineDecay);

std::vector<std::string> blockwise_optimizers() {
  std::vector<std::string> names;
  for (const std::string& name : registered_hparams("optimizer")) {
    const HParamsPtr hparams = make_hparams(name, "optimizer");
    const auto* opt = dynamic_cast<const OptimizerHParams*>(hparams.get());
    if (opt && !opt->needs_whole_tensors()) names.push_back(name);
  }
  return names;
}

Schedule make_schedule(const HParamsPtr& hparams, const std::string& field) {
  auto* schedule = dynamic_cast<const ScheduleHParams*>(hparams.get());
  PAX_CHECK(schedule, field, " must be a schedule (", registered_hparams_list("schedule"), "), got ",
            hparams ? hparams->type_name() : "None");
  return schedule->make();
}

const OptimizerHParams& optimizer_hparams(const HParamsPtr& hparams, const std::string& field) {
  auto* optimizer = dynamic_cast<const OptimizerHParams*>(hparams.get());
  PAX_CHECK(optimizer, field, " must be an optimizer (", registered_hparams_list("optimizer"), "), got ",
            hparams ? hparams->type_name() : "None");
  return *optimizer;
}

// ---------------------------------------------------------------------------
// Optimizers

void OptimizerHParams::visit_fields(const std::function<void(const FieldRef&)>& f) {
  using config_detail::ref;
  using config_detail::with_range;
  f(with_range(ref("learning_rate", "Peak learning rate; the rate at a step is learning_rate * lr_schedule(step).",
                   learning_rate),
               range::non_negative));
  f(ref("lr_schedule", "Multiplier of the learning rate over steps (a schedule).", lr_schedule));
  f(with_range(ref("weight_decay", "Decoupled weight decay, multiplied by the learning rate (0: none).", weight_decay),
               range::non_negative));
  f(ref("decay_vectors", "Also decay vectors and scalars (biases, norm scales); matrices only otherwise.",
        decay_vectors));
  f(with_range(
      ref("ema_decay", "Keep an exponential moving average of the parameters with this decay (0: none).", ema_decay),
      range::fraction));
}

Schedule OptimizerHParams::learning_rate_schedule() const {
  PAX_CHECK(std::isfinite(learning_rate) && learning_rate >= 0, type_name(),
            ": learning_rate must be a finite number >= 0 (the peak of lr_schedule), got ", learning_rate);
  Schedule multiplier = make_schedule(lr_schedule, std::string(type_name()) + ".lr_schedule");
  const double peak = learning_rate;
  return [multiplier, peak](const Array& count) { return multiplier(count) * peak; };
}

GradientTransformation OptimizerHParams::make() const {
  PAX_CHECK(weight_decay >= 0, type_name(), ": weight_decay must be >= 0, got ", weight_decay);
  PAX_CHECK(ema_decay >= 0 && ema_decay < 1, type_name(), ": ema_decay must be in [0, 1), got ", ema_decay);
  Mask decay_mask = nullptr;
  if (!decay_vectors) decay_mask = [](const std::string&, const Array& p) { return p.ndim() >= 2; };
  GradientTransformation tx = make_with(learning_rate_schedule(), decay_mask);
  return ema_decay > 0 ? with_param_ema(std::move(tx), ema_decay) : tx;
}

namespace {

// Decoupled weight decay before an optimizer that has none of its own.
GradientTransformation with_decay(double weight_decay, const Schedule& learning_rate, const Mask& mask,
                                  GradientTransformation tx) {
  if (weight_decay == 0) return tx;
  // The decay joins the update after the learning rate: -lr * wd * param.
  GradientTransformation decay =
      chain({add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate)});
  GradientTransformation out;
  out.init = [tx, decay](const Tree& params) { return Tree::list({tx.init(params), decay.init(params)}); };
  out.update = [tx, decay](const Tree& updates, const Tree& state, const Tree& params) {
    PAX_CHECK(!params.is_none(), "weight decay needs the parameters in update()");
    auto [u, s] = tx.update(updates, state[0], params);
    Tree zeros = tree_zeros_like(updates);
    auto [d, ds] = decay.update(zeros, state[1], params);
    return std::make_pair(apply_updates(u, d), Tree::list({s, ds}));
  };
  return out;
}

}  // namespace

GradientTransformation Sgd::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  return with_decay(weight_decay, learning_rate, decay_mask, sgd(learning_rate, momentum, nesterov));
}
PAX_REGISTER_OPTIMIZER(Sgd);

GradientTransformation Adam::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  AdamWOptions o = options;
  o.weight_decay = weight_decay;
  o.mask = decay_mask;
  return adamw(learning_rate, o);
}
PAX_REGISTER_OPTIMIZER(Adam);

GradientTransformation Adafactor::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  // Decoupled and multiplied by the learning rate, as for every optimizer
  // here (adafactor's own weight_decay_rate is not multiplied by it).
  return with_decay(weight_decay, learning_rate, decay_mask, adafactor(ScalarOrSchedule(learning_rate), options));
}
PAX_REGISTER_OPTIMIZER(Adafactor);

GradientTransformation Lion::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  LionOptions o = options;
  o.weight_decay = weight_decay;
  o.mask = decay_mask;
  return lion(learning_rate, o);
}
PAX_REGISTER_OPTIMIZER(Lion);

GradientTransformation Lamb::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  LambOptions o = options;
  o.weight_decay = weight_decay;
  o.mask = decay_mask;
  return lamb(learning_rate, o);
}
PAX_REGISTER_OPTIMIZER(Lamb);

GradientTransformation RmsProp::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  return with_decay(weight_decay, learning_rate, decay_mask, rmsprop(learning_rate, options));
}
PAX_REGISTER_OPTIMIZER(RmsProp);

GradientTransformation Adagrad::make_with(const Schedule& learning_rate, const Mask& decay_mask) const {
  return with_decay(weight_decay, learning_rate, decay_mask, adagrad(learning_rate, options));
}
PAX_REGISTER_OPTIMIZER(Adagrad);

}  // namespace pax::optim

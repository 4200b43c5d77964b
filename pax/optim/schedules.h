// Schedules: hyperparameter values as functions of the step count, for
// ScalarOrSchedule arguments (learning rates, momentum, weight decay, ...).
//   - optax's schedules, with optax's argument names, defaults and formulas;
//   - Praxis's LinearRampupExponentialDecay / LinearRampupCosineDecay;
//   - flax.training.lr_schedule's epoch-based schedules (warmup in epochs).
//
//   Schedule lr = warmup_cosine_decay_schedule(0.0, 1e-3, 1000, 100000, 1e-5);
//   GradientTransformation tx = chain({scale_by_adam(), scale_by_learning_rate(lr)});
//   log("lr", schedule_value(lr, step));
//
// Every schedule is written with pax ops, so it runs on a traced count inside
// a jitted training step (choices between pieces are `where`s, never C++ ifs
// on the count). The count is an integer Array (i32 in optimizer states; any
// integer or float dtype is accepted, unsigned ones are read as i32); the
// value is f32. Schedules are elementwise in the count, so a vector of counts
// gives the vector of values, except that constant schedules return a scalar.
//
// Argument checks happen when the schedule is built and throw pax::Error.
// Where optax falls back silently we keep its fallback when it is useful and
// document it on the function (a non-positive transition_steps gives a
// constant schedule, which is how warmup_steps = 0 works), and reject what
// can only be a mistake (a negative transition_begin, which optax clamps).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "pax/optim/gradient_transformation.h"

namespace pax::optim {

// ---- optax

// `value` at every step.
Schedule constant_schedule(double value);

// init_value until transition_begin, then
//   (init_value - end_value) * (1 - (count - transition_begin) / transition_steps)^power + end_value
// reaching end_value at transition_begin + transition_steps and staying there.
// transition_steps <= 0 gives the constant init_value (as optax);
// transition_begin < 0 throws (optax clamps it to 0).
Schedule polynomial_schedule(double init_value, double end_value, double power, int64_t transition_steps,
                             int64_t transition_begin = 0);

// polynomial_schedule with power 1.
Schedule linear_schedule(double init_value, double end_value, int64_t transition_steps, int64_t transition_begin = 0);

// init_value times the scales of every boundary <= count ({step: scale};
// scales must be >= 0). At count == boundary the scale already applies.
Schedule piecewise_constant_schedule(double init_value, const std::map<int64_t, double>& boundaries_and_scales = {});

// init_value until transition_begin, then
//   init_value * decay_rate^((count - transition_begin) / transition_steps)
// with the exponent floored when staircase. end_value, when given, bounds the
// value: from below when decay_rate < 1, from above otherwise.
// transition_steps <= 0 or decay_rate == 0 give the constant init_value (as
// optax); transition_begin < 0 throws (optax clamps it to 0).
Schedule exponential_decay(double init_value, int64_t transition_steps, double decay_rate, int64_t transition_begin = 0,
                           bool staircase = false, std::optional<double> end_value = std::nullopt);

// init_value * ((1 - alpha) * (0.5 * (1 + cos(pi * min(count, decay_steps) / decay_steps)))^exponent + alpha).
// decay_steps must be > 0 (as optax).
Schedule cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha = 0.0, double exponent = 1.0);

// Linear warmup from init_value to peak_value over warmup_steps, then cosine
// decay from peak_value to end_value until step decay_steps (decay_steps
// counts the warmup, so decay_steps > warmup_steps is required).
Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, int64_t warmup_steps, int64_t decay_steps,
                                      double end_value = 0.0, double exponent = 1.0);

// schedules[0] before boundaries[0], schedules[i] from boundaries[i - 1]
// on; each later schedule sees the count minus the boundary where it starts.
// Needs one boundary fewer than schedules, boundaries non-decreasing (equal
// boundaries skip a schedule); optax does not check either.
Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries);

// ---- Praxis (praxis/schedules.py)
//
// Linear ramp-up from 0 to `max` over warmup_steps (skipped when 0), `max`
// held until decay_start, then a decay to max * min_ratio at decay_end, held
// after. Requires 0 <= warmup_steps <= decay_start < decay_end and max > 0,
// as Praxis does (Praxis's own default max = 0 is rejected there too, so here
// `max` has no default and comes before min_ratio).

// Exponential decay (linear in log space); min_ratio must be > 0.
Schedule linear_rampup_exponential_decay(int64_t warmup_steps, int64_t decay_start, int64_t decay_end, double max,
                                         double min_ratio = 0.01);
// Half-cosine decay; min_ratio must be >= 0.
Schedule linear_rampup_cosine_decay(int64_t warmup_steps, int64_t decay_start, int64_t decay_end, double max,
                                    double min_ratio = 0.01);

// ---- flax.training.lr_schedule
//
// Each multiplies by the warmup factor min(1, step / warmup_length /
// steps_per_epoch) when warmup_length (in epochs) is > 0. steps_per_epoch
// must be > 0 and warmup_length >= 0 (flax checks neither).

// base_learning_rate, with the warmup.
Schedule create_constant_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch,
                                                double warmup_length = 0.0);

// base_learning_rate * factor of the last [epoch, factor] pair whose step
// round(epoch * steps_per_epoch) is < step (strictly, as flax); epochs must be
// non-decreasing.
Schedule create_stepped_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch,
                                               const std::vector<std::pair<double, double>>& lr_sched_steps,
                                               double warmup_length = 0.0);

// base_learning_rate * (0.5 + 0.5 * cos(pi * step / (halfcos_epochs * steps_per_epoch))).
// As in flax the cosine is not clamped: past halfcos_epochs it rises again.
// halfcos_epochs must be > 0.
Schedule create_cosine_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch, double halfcos_epochs,
                                              double warmup_length = 0.0);

// ---- logging

// The schedule's value at `step` (an i32 count), read back to the host.
double schedule_value(const Schedule& schedule, int64_t step);

}  // namespace pax::optim

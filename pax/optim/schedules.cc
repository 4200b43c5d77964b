// Schedules from optax, Praxis and flax.training.lr_schedule, as pax ops on
// the (possibly traced) count. The formulas follow the published sources term
// by term; where a source computes in float32 we do too, so values match.
#include "pax/optim/schedules.h"

#include <cmath>
#include <limits>
#include <memory>
#include <numbers>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::optim {

namespace {

constexpr double kPi = std::numbers::pi;

// The count as a signed number: unsigned counts (Praxis uses u32) would wrap
// in `count - begin`, so they are read as i32.
Array count_of(const Array& count, const char* fn) {
  PAX_CHECK(count.defined(), fn, ": the count is an empty Array");
  PAX_CHECK(is_integer(count.dtype()) || is_floating(count.dtype()), fn,
            ": the count must be an integer (or float) Array, got ", count.aval().str());
  return is_unsigned(count.dtype()) ? count.astype(DType::i32) : count;
}

Array f32(const Array& x) { return x.astype(DType::f32); }

void check_begin(const char* fn, int64_t transition_begin) {
  PAX_CHECK(transition_begin >= 0, fn,
            ": transition_begin must be >= 0 (the step at which the transition starts), got ", transition_begin);
}

// Praxis's Linear schedule: y0 before x0, y1 from x1 on, linear in between.
Array praxis_linear(const Array& x, double x0, double y0, double x1, double y1) {
  Array ratio = (x - x0) / (x1 - x0);
  Array y = y0 + ratio * (y1 - y0);
  return where(x < x0, y0, where(x >= x1, y1, y));
}

// The warmup / hold / decay join shared by Praxis's LinearRampup* schedules.
Schedule praxis_rampup(int64_t warmup_steps, int64_t decay_start, double max, Schedule decay) {
  std::vector<Schedule> schedules;
  std::vector<int64_t> boundaries;
  if (warmup_steps > 0) {
    schedules.push_back([warmup_steps, max](const Array& count) {
      return praxis_linear(f32(count), 0.0, 0.0, double(warmup_steps), max);
    });
    boundaries.push_back(warmup_steps);
  }
  if (decay_start > warmup_steps) {
    // Praxis writes the hold as Linear((0, max), (decay_start - warmup_steps, max)).
    schedules.push_back(constant_schedule(max));
    boundaries.push_back(decay_start);
  }
  schedules.push_back(std::move(decay));
  return join_schedules(std::move(schedules), std::move(boundaries));
}

void check_praxis_rampup(const char* fn, int64_t warmup_steps, int64_t decay_start, int64_t decay_end, double max) {
  PAX_CHECK(warmup_steps >= 0, fn, ": warmup_steps must be >= 0, got ", warmup_steps);
  PAX_CHECK(decay_start >= warmup_steps, fn, ": decay_start (", decay_start, ") must be >= warmup_steps (",
            warmup_steps, ")");
  PAX_CHECK(decay_end > decay_start, fn, ": decay_end (", decay_end, ") must be > decay_start (", decay_start,
            "): the decay needs at least one step");
  PAX_CHECK(max > 0, fn, ": max (the peak value) must be > 0, got ", max);
}

void check_epoch_args(const char* fn, int64_t steps_per_epoch, double warmup_length) {
  PAX_CHECK(steps_per_epoch > 0, fn, ": steps_per_epoch must be > 0, got ", steps_per_epoch);
  PAX_CHECK(warmup_length >= 0, fn, ": warmup_length (in epochs) must be >= 0, got ", warmup_length);
}

// flax's warmup factor min(1, step / warmup_length / steps_per_epoch).
Array with_warmup(const Array& lr, const Array& step, int64_t steps_per_epoch, double warmup_length) {
  if (!(warmup_length > 0.0)) return lr;
  return lr * minimum(1.0, f32(step) / warmup_length / double(steps_per_epoch));
}

}  // namespace

// ---- optax

Schedule constant_schedule(double value) {
  return [value](const Array&) { return scalar(value, DType::f32); };
}

Schedule polynomial_schedule(double init_value, double end_value, double power, int64_t transition_steps,
                             int64_t transition_begin) {
  check_begin("polynomial_schedule", transition_begin);
  if (transition_steps <= 0) return constant_schedule(init_value);
  return [=](const Array& count) {
    Array c = clip(count_of(count, "polynomial_schedule") - transition_begin, 0, transition_steps);
    Array frac = 1.0 - f32(c) / double(transition_steps);
    return (init_value - end_value) * pax::power(frac, power) + end_value;
  };
}

Schedule linear_schedule(double init_value, double end_value, int64_t transition_steps, int64_t transition_begin) {
  check_begin("linear_schedule", transition_begin);
  return polynomial_schedule(init_value, end_value, 1.0, transition_steps, transition_begin);
}

Schedule piecewise_constant_schedule(double init_value, const std::map<int64_t, double>& boundaries_and_scales) {
  for (const auto& [boundary, scale] : boundaries_and_scales) {
    PAX_CHECK(scale >= 0.0, "piecewise_constant_schedule: scales must be >= 0, got ", scale, " at step ", boundary);
  }
  // std::map iterates in increasing step order, as optax's sorted(items()).
  return [init_value, boundaries_and_scales](const Array& count) {
    Array c = count_of(count, "piecewise_constant_schedule");
    Array v = scalar(init_value, DType::f32);
    for (const auto& [boundary, scale] : boundaries_and_scales) v = where(c < boundary, v, v * scale);
    return v;
  };
}

Schedule exponential_decay(double init_value, int64_t transition_steps, double decay_rate, int64_t transition_begin,
                           bool staircase, std::optional<double> end_value) {
  check_begin("exponential_decay", transition_begin);
  if (transition_steps <= 0 || decay_rate == 0.0) return constant_schedule(init_value);
  return [=](const Array& count) {
    Array decreased = count_of(count, "exponential_decay") - transition_begin;
    Array p = f32(decreased) / double(transition_steps);
    if (staircase) p = floor(p);
    Array v = where(decreased <= 0, init_value, init_value * pax::power(decay_rate, p));
    if (end_value) v = decay_rate < 1.0 ? maximum(v, *end_value) : minimum(v, *end_value);
    return v;
  };
}

Schedule cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha, double exponent) {
  PAX_CHECK(decay_steps > 0, "cosine_decay_schedule: decay_steps must be > 0, got ", decay_steps);
  return [=](const Array& count) {
    Array c = minimum(f32(count_of(count, "cosine_decay_schedule")), double(decay_steps));
    Array cosine = 0.5 * (1.0 + cos(kPi * c / double(decay_steps)));
    Array decayed = (1.0 - alpha) * pax::power(cosine, exponent) + alpha;
    return init_value * decayed;
  };
}

Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, int64_t warmup_steps, int64_t decay_steps,
                                      double end_value, double exponent) {
  PAX_CHECK(warmup_steps >= 0, "warmup_cosine_decay_schedule: warmup_steps must be >= 0, got ", warmup_steps);
  PAX_CHECK(decay_steps > warmup_steps, "warmup_cosine_decay_schedule: decay_steps (", decay_steps,
            ") must be > warmup_steps (", warmup_steps,
            "): decay_steps includes the warmup, and the cosine part lasts decay_steps - warmup_steps steps");
  double alpha = peak_value == 0.0 ? 0.0 : end_value / peak_value;
  return join_schedules({linear_schedule(init_value, peak_value, warmup_steps),
                         cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)},
                        {warmup_steps});
}

Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries) {
  PAX_CHECK(!schedules.empty(), "join_schedules: needs at least one schedule");
  PAX_CHECK(boundaries.size() + 1 == schedules.size(), "join_schedules: ", schedules.size(), " schedules need ",
            schedules.size() - 1, " boundaries (one between each pair), got ", boundaries.size());
  for (size_t i = 0; i < schedules.size(); ++i) {
    PAX_CHECK(static_cast<bool>(schedules[i]), "join_schedules: schedule ", i, " is an empty function");
  }
  for (size_t i = 1; i < boundaries.size(); ++i) {
    PAX_CHECK(boundaries[i] >= boundaries[i - 1], "join_schedules: boundaries must be non-decreasing, got ",
              boundaries[i - 1], " then ", boundaries[i], " (entries ", i - 1, " and ", i, ")");
  }
  struct Parts {
    std::vector<Schedule> schedules;
    std::vector<int64_t> boundaries;
  };
  auto parts = std::make_shared<const Parts>(Parts{std::move(schedules), std::move(boundaries)});
  return [parts](const Array& count) {
    Array c = count_of(count, "join_schedules");
    Array out = f32(parts->schedules[0](c));
    for (size_t i = 0; i < parts->boundaries.size(); ++i) {
      int64_t boundary = parts->boundaries[i];
      out = where(c < boundary, out, f32(parts->schedules[i + 1](c - boundary)));
    }
    return out;
  };
}

// ---- Praxis

Schedule linear_rampup_exponential_decay(int64_t warmup_steps, int64_t decay_start, int64_t decay_end, double max,
                                         double min_ratio) {
  check_praxis_rampup("linear_rampup_exponential_decay", warmup_steps, decay_start, decay_end, max);
  PAX_CHECK(min_ratio > 0, "linear_rampup_exponential_decay: min_ratio must be > 0 (the decay is exponential), got ",
            min_ratio);
  double length = double(decay_end - decay_start);
  double log_max = std::log(max), log_min = std::log(max * min_ratio);
  // Praxis's Exponential: Linear((0, log max), (length, log(max * min_ratio))), exponentiated.
  Schedule decay = [=](const Array& count) { return exp(praxis_linear(f32(count), 0.0, log_max, length, log_min)); };
  return praxis_rampup(warmup_steps, decay_start, max, std::move(decay));
}

Schedule linear_rampup_cosine_decay(int64_t warmup_steps, int64_t decay_start, int64_t decay_end, double max,
                                    double min_ratio) {
  check_praxis_rampup("linear_rampup_cosine_decay", warmup_steps, decay_start, decay_end, max);
  PAX_CHECK(min_ratio >= 0, "linear_rampup_cosine_decay: min_ratio must be >= 0, got ", min_ratio);
  double length = double(decay_end - decay_start);
  double min_value = max * min_ratio;
  // Praxis's DelayedCosine: the phase is Linear((0, 0), (length, pi)).
  Schedule decay = [=](const Array& count) {
    Array phase = praxis_linear(f32(count), 0.0, 0.0, length, kPi);
    return min_value + 0.5 * (max - min_value) * (1.0 + cos(phase));
  };
  return praxis_rampup(warmup_steps, decay_start, max, std::move(decay));
}

// ---- flax.training.lr_schedule

Schedule create_constant_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch,
                                                double warmup_length) {
  check_epoch_args("create_constant_learning_rate_schedule", steps_per_epoch, warmup_length);
  return [=](const Array& step) {
    Array s = count_of(step, "create_constant_learning_rate_schedule");
    return with_warmup(scalar(base_learning_rate, DType::f32), s, steps_per_epoch, warmup_length);
  };
}

Schedule create_stepped_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch,
                                               const std::vector<std::pair<double, double>>& lr_sched_steps,
                                               double warmup_length) {
  const char* fn = "create_stepped_learning_rate_schedule";
  check_epoch_args(fn, steps_per_epoch, warmup_length);
  std::vector<int64_t> boundaries;
  std::vector<double> values{base_learning_rate};
  for (size_t i = 0; i < lr_sched_steps.size(); ++i) {
    auto [epoch, factor] = lr_sched_steps[i];
    PAX_CHECK(std::isfinite(epoch), fn, ": lr_sched_steps[", i, "] has epoch ", epoch, ", expected a finite number");
    PAX_CHECK(i == 0 || epoch >= lr_sched_steps[i - 1].first, fn,
              ": lr_sched_steps must be in non-decreasing epoch order, got epoch ", lr_sched_steps[i - 1].first,
              " then ", epoch, " (entries ", i - 1, " and ", i, ")");
    // np.round: half to even, which nearbyint does in the default rounding mode.
    boundaries.push_back(int64_t(std::nearbyint(epoch * double(steps_per_epoch))));
    values.push_back(factor * base_learning_rate);
  }
  return [=](const Array& step) {
    Array s = count_of(step, fn);
    // flax takes values[#{b : b < step}]; with sorted boundaries that is the
    // value after the last boundary below the step.
    Array lr = scalar(values[0], DType::f32);
    for (size_t i = 0; i < boundaries.size(); ++i) lr = where(s > boundaries[i], values[i + 1], lr);
    return with_warmup(lr, s, steps_per_epoch, warmup_length);
  };
}

Schedule create_cosine_learning_rate_schedule(double base_learning_rate, int64_t steps_per_epoch, double halfcos_epochs,
                                              double warmup_length) {
  const char* fn = "create_cosine_learning_rate_schedule";
  check_epoch_args(fn, steps_per_epoch, warmup_length);
  PAX_CHECK(halfcos_epochs > 0, fn, ": halfcos_epochs must be > 0, got ", halfcos_epochs);
  double halfwavelength_steps = halfcos_epochs * double(steps_per_epoch);
  return [=](const Array& step) {
    Array s = count_of(step, fn);
    Array scale_factor = cos(f32(s) * kPi / halfwavelength_steps) * 0.5 + 0.5;
    return with_warmup(base_learning_rate * scale_factor, s, steps_per_epoch, warmup_length);
  };
}

// ---- logging

double schedule_value(const Schedule& schedule, int64_t step) {
  PAX_CHECK(static_cast<bool>(schedule), "schedule_value: the schedule is an empty function");
  PAX_CHECK(step >= std::numeric_limits<int32_t>::min() && step <= std::numeric_limits<int32_t>::max(),
            "schedule_value: step ", step, " does not fit the i32 step counter");
  Array v = schedule(scalar<int32_t>(int32_t(step)));
  PAX_CHECK(v.defined() && v.size() == 1, "schedule_value: the schedule returned ",
            v.defined() ? v.aval().str() : std::string("an empty Array"), ", expected a scalar");
  return f32(v).item<double>();
}

}  // namespace pax::optim

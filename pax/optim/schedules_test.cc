// Tests for the schedules: every schedule at its key steps (start, inside the
// warmup, at and around boundaries, the end, past the end) against the
// published formula evaluated here in double precision; the same values under
// jit with a traced count and for a vector of counts; argument errors.
#include "pax/optim/schedules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "pax/api/jit.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;
using Ref = std::function<double(double)>;

constexpr double kPi = std::numbers::pi;

const std::vector<int32_t> kSteps = {0,  1,  2,  3,  5,  7,  9,  10,  11,  12,  15,  19,  20,  21,  25,  29,
                                     30, 31, 40, 50, 60, 61, 99, 100, 101, 119, 120, 121, 150, 200, 1000};

// The schedule evaluated eagerly, one scalar count at a time.
std::vector<double> eager_values(const Schedule& s, const std::vector<int32_t>& steps) {
  std::vector<double> out;
  for (int32_t t : steps) {
    Array v = s(scalar<int32_t>(t));
    EXPECT_EQ(v.dtype(), DType::f32);
    EXPECT_EQ(v.ndim(), 0);
    out.push_back(v.item<double>());
  }
  return out;
}

std::vector<double> ref_values(const Ref& ref, const std::vector<int32_t>& steps) {
  std::vector<double> out;
  for (int32_t t : steps) out.push_back(ref(double(t)));
  return out;
}

// Eager values at kSteps equal the reference; so do the values of the jitted
// schedule (the count traced, one trace for every step) and of one call on
// the vector of all counts.
void expect_schedule(const Schedule& s, const Ref& ref, double rtol = 2e-6, double atol = 1e-7) {
  std::vector<double> want = ref_values(ref, kSteps);
  Array eager = array(eager_values(s, kSteps));
  EXPECT_TRUE(all_close(eager, want, rtol, atol)) << "eager";

  auto jitted = pax::jit([s](const Array& count) { return s(count); });
  std::vector<double> traced;
  for (int32_t t : kSteps) traced.push_back(jitted(scalar<int32_t>(t)).item<double>());
  EXPECT_EQ(jitted.num_traces(), 1u);
  EXPECT_TRUE(all_close(array(traced), eager.to_vector<double>(), 1e-6, 1e-7)) << "jit vs eager";

  Array vec = s(array<int32_t>(kSteps));
  if (vec.ndim() == 1) EXPECT_TRUE(all_close(vec, eager.to_vector<double>(), 1e-6, 1e-7)) << "vector of counts";
}

// optax's polynomial formula, in double.
double polynomial_ref(double init, double end, double power, double steps, double begin, double t) {
  if (steps <= 0) return init;
  double c = std::clamp(t - begin, 0.0, steps);
  return (init - end) * std::pow(1 - c / steps, power) + end;
}

double cosine_ref(double init, double decay_steps, double alpha, double exponent, double t) {
  double c = std::min(t, decay_steps);
  double cosine = 0.5 * (1 + std::cos(kPi * c / decay_steps));
  return init * ((1 - alpha) * std::pow(cosine, exponent) + alpha);
}

// ---- optax

TEST(Schedules, Constant) {
  Schedule s = constant_schedule(0.25);
  expect_schedule(s, [](double) { return 0.25; });
  EXPECT_EQ(schedule_value(s, 123456), 0.25);
}

TEST(Schedules, LinearKeySteps) {
  // Holds 1 until step 5, reaches 0.01 at step 105, stays there.
  Schedule s = linear_schedule(1.0, 0.01, 100, 5);
  expect_schedule(s, [](double t) { return polynomial_ref(1.0, 0.01, 1, 100, 5, t); });
  EXPECT_NEAR(schedule_value(s, 0), 1.0, 1e-7);
  EXPECT_NEAR(schedule_value(s, 5), 1.0, 1e-7);
  EXPECT_NEAR(schedule_value(s, 55), 0.505, 1e-6);  // halfway
  EXPECT_NEAR(schedule_value(s, 105), 0.01, 1e-7);
  EXPECT_NEAR(schedule_value(s, 5000), 0.01, 1e-7);
}

TEST(Schedules, PolynomialMatchesOptaxDocstring) {
  // optax's example: power 2, 100 steps beginning at step 5.
  Schedule s = polynomial_schedule(1.0, 0.01, 2.0, 100, 5);
  EXPECT_NEAR(schedule_value(s, 0), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 5), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 6), 0.9803, 5e-5);
  EXPECT_NEAR(schedule_value(s, 104), 0.0101, 5e-5);
  EXPECT_NEAR(schedule_value(s, 105), 0.01, 1e-6);
  EXPECT_NEAR(schedule_value(s, 110), 0.01, 1e-6);
  expect_schedule(s, [](double t) { return polynomial_ref(1.0, 0.01, 2, 100, 5, t); });
  // A fractional power goes through pow rather than repeated multiplication.
  Schedule root = polynomial_schedule(2.0, 0.5, 0.5, 40, 0);
  expect_schedule(root, [](double t) { return polynomial_ref(2.0, 0.5, 0.5, 40, 0, t); });
}

TEST(Schedules, NonPositiveTransitionStepsGiveTheInitValue) {
  // optax's fallback: the annealing is disabled.
  for (int64_t steps : {0, -3}) {
    expect_schedule(linear_schedule(0.7, 0.1, steps), [](double) { return 0.7; });
    expect_schedule(polynomial_schedule(0.7, 0.1, 2.0, steps, 4), [](double) { return 0.7; });
    expect_schedule(exponential_decay(0.7, steps, 0.5), [](double) { return 0.7; });
  }
  expect_schedule(exponential_decay(0.7, 10, 0.0), [](double) { return 0.7; });
}

TEST(Schedules, ExponentialDecayContinuousAndStaircase) {
  auto ref = [](double t, bool staircase) {
    double d = t - 10;
    double p = d / 20;
    if (staircase) p = std::floor(p);
    return d <= 0 ? 3.0 : 3.0 * std::pow(0.5, p);
  };
  Schedule cont = exponential_decay(3.0, 20, 0.5, 10, false);
  Schedule stair = exponential_decay(3.0, 20, 0.5, 10, true);
  expect_schedule(cont, [&](double t) { return ref(t, false); });
  expect_schedule(stair, [&](double t) { return ref(t, true); });
  // Hand values: one transition period after the begin halves the value; the
  // staircase holds until the period is complete.
  EXPECT_NEAR(schedule_value(cont, 30), 1.5, 1e-6);
  EXPECT_NEAR(schedule_value(stair, 30), 1.5, 1e-6);
  EXPECT_NEAR(schedule_value(cont, 20), 3.0 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(schedule_value(stair, 20), 3.0, 1e-6);
  EXPECT_NEAR(schedule_value(stair, 49), 1.5, 1e-6);
  EXPECT_NEAR(schedule_value(stair, 50), 0.75, 1e-6);
}

TEST(Schedules, ExponentialDecayEndValueBounds) {
  // decay_rate < 1: end_value is a lower bound.
  Schedule down = exponential_decay(1.0, 10, 0.1, 0, false, 0.05);
  expect_schedule(down, [](double t) { return std::max(t <= 0 ? 1.0 : std::pow(0.1, t / 10), 0.05); });
  EXPECT_NEAR(schedule_value(down, 1000), 0.05, 1e-7);
  // decay_rate > 1: an upper bound.
  Schedule up = exponential_decay(1.0, 10, 2.0, 0, false, 8.0);
  expect_schedule(up, [](double t) { return std::min(t <= 0 ? 1.0 : std::pow(2.0, t / 10), 8.0); });
  EXPECT_NEAR(schedule_value(up, 25), std::pow(2.0, 2.5), 1e-5);
  EXPECT_NEAR(schedule_value(up, 1000), 8.0, 1e-6);
}

TEST(Schedules, CosineDecay) {
  Schedule s = cosine_decay_schedule(2.0, 100);
  expect_schedule(s, [](double t) { return cosine_ref(2.0, 100, 0.0, 1.0, t); });
  EXPECT_NEAR(schedule_value(s, 0), 2.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 50), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 100), 0.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 500), 0.0, 1e-6);  // held past the end
  Schedule floor_and_exponent = cosine_decay_schedule(2.0, 100, 0.1, 2.0);
  expect_schedule(floor_and_exponent, [](double t) { return cosine_ref(2.0, 100, 0.1, 2.0, t); });
  EXPECT_NEAR(schedule_value(floor_and_exponent, 50), 2.0 * (0.9 * 0.25 + 0.1), 1e-6);
  EXPECT_NEAR(schedule_value(floor_and_exponent, 100), 0.2, 1e-6);
  Schedule fractional = cosine_decay_schedule(1.0, 60, 0.0, 1.5);
  expect_schedule(fractional, [](double t) { return cosine_ref(1.0, 60, 0.0, 1.5, t); });
}

TEST(Schedules, WarmupCosineDecay) {
  // init 0.1 -> peak 1 over 10 steps, cosine to 0.05 by step 110.
  Schedule s = warmup_cosine_decay_schedule(0.1, 1.0, 10, 110, 0.05);
  auto ref = [](double t) {
    if (t < 10) return 0.1 + (1.0 - 0.1) * t / 10;
    return cosine_ref(1.0, 100, 0.05, 1.0, t - 10);
  };
  expect_schedule(s, ref);
  EXPECT_NEAR(schedule_value(s, 0), 0.1, 1e-7);
  EXPECT_NEAR(schedule_value(s, 5), 0.55, 1e-6);
  EXPECT_NEAR(schedule_value(s, 10), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 60), 0.05 + 0.95 * 0.5, 1e-6);
  EXPECT_NEAR(schedule_value(s, 110), 0.05, 1e-6);
  EXPECT_NEAR(schedule_value(s, 1000), 0.05, 1e-6);

  // No warmup: the cosine from step 0. Exponent 2.
  Schedule no_warmup = warmup_cosine_decay_schedule(0.0, 0.5, 0, 40, 0.0, 2.0);
  expect_schedule(no_warmup, [](double t) { return cosine_ref(0.5, 40, 0.0, 2.0, t); });
  // peak_value 0: alpha is 0 (optax avoids the division), so the value is 0 after the warmup.
  Schedule zero_peak = warmup_cosine_decay_schedule(1.0, 0.0, 4, 20, 0.3);
  expect_schedule(zero_peak, [](double t) { return t < 4 ? 1.0 - t / 4 : 0.0; });
}

TEST(Schedules, PiecewiseConstant) {
  // optax's example; the scale applies from its step on.
  Schedule s = piecewise_constant_schedule(1.0, {{100, 0.1}, {200, 0.01}});
  expect_schedule(s, [](double t) { return t < 100 ? 1.0 : t < 200 ? 0.1 : 0.001; });
  EXPECT_NEAR(schedule_value(s, 50), 1.0, 1e-7);
  EXPECT_NEAR(schedule_value(s, 99), 1.0, 1e-7);
  EXPECT_NEAR(schedule_value(s, 100), 0.1, 1e-7);
  EXPECT_NEAR(schedule_value(s, 150), 0.1, 1e-7);
  EXPECT_NEAR(schedule_value(s, 250), 0.001, 1e-8);
  // Map order is step order whatever the order written; scales may exceed 1.
  Schedule up = piecewise_constant_schedule(0.5, {{30, 4.0}, {10, 2.0}, {20, 0.0}});
  expect_schedule(up, [](double t) { return t < 10 ? 0.5 : t < 20 ? 1.0 : 0.0; });
  expect_schedule(piecewise_constant_schedule(0.3), [](double) { return 0.3; });
}

TEST(Schedules, JoinSchedulesOffsetsTheLaterCounts) {
  // The second schedule starts at its own count 0 at the boundary.
  Schedule s =
      join_schedules({linear_schedule(0.0, 1.0, 10), linear_schedule(5.0, 0.0, 10), constant_schedule(-1.0)}, {10, 30});
  auto ref = [](double t) {
    if (t < 10) return t / 10;
    if (t < 30) return 5.0 - 5.0 * std::min(t - 10, 10.0) / 10;
    return -1.0;
  };
  expect_schedule(s, ref);
  EXPECT_NEAR(schedule_value(s, 9), 0.9, 1e-6);
  EXPECT_NEAR(schedule_value(s, 10), 5.0, 1e-6);  // the second schedule at its count 0
  EXPECT_NEAR(schedule_value(s, 12), 4.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 25), 0.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 30), -1.0, 1e-6);
  // A schedule between two equal boundaries is never used.
  Schedule skip = join_schedules({constant_schedule(1), constant_schedule(2), constant_schedule(3)}, {5, 5});
  expect_schedule(skip, [](double t) { return t < 5 ? 1.0 : 3.0; });
  // One schedule, no boundaries.
  expect_schedule(join_schedules({cosine_decay_schedule(1.0, 50)}, {}),
                  [](double t) { return cosine_ref(1.0, 50, 0, 1, t); });
}

TEST(Schedules, CountDtypes) {
  Schedule s = linear_schedule(1.0, 0.0, 10, 5);
  // An unsigned count before transition_begin must not wrap around.
  EXPECT_NEAR(s(scalar<uint32_t>(2)).item<double>(), 1.0, 1e-7);
  EXPECT_NEAR(s(scalar<uint32_t>(10)).item<double>(), 0.5, 1e-7);
  EXPECT_NEAR(s(scalar<int64_t>(10)).item<double>(), 0.5, 1e-7);
  EXPECT_NEAR(s(scalar<float>(10.0f)).item<double>(), 0.5, 1e-7);
  EXPECT_PAX_ERROR(s(scalar<bool>(true)), "the count must be an integer (or float) Array, got bool[]");
  EXPECT_PAX_ERROR(s(Array()), "empty");
}

TEST(Schedules, UsableAsScalarOrSchedule) {
  ScalarOrSchedule lr = exponential_decay(1.0, 4, 0.5);
  EXPECT_TRUE(lr.is_schedule());
  EXPECT_NEAR(lr(scalar<int32_t>(8)).item<double>(), 0.25, 1e-7);
}

// ---- Praxis

// LinearRampup{Exponential,Cosine}Decay, written from Praxis's description:
// linear 0 -> max over warmup, max until decay_start, decay to max * min_ratio
// at decay_end, held after.
double praxis_ref(bool cosine, double warmup, double start, double end, double max, double ratio, double t) {
  if (warmup > 0 && t < warmup) return max * t / warmup;
  if (t < start) return max;
  double x = std::min((t - start) / (end - start), 1.0);
  if (cosine) return max * ratio + 0.5 * (max - max * ratio) * (1 + std::cos(kPi * x));
  return std::exp(std::log(max) + x * (std::log(max * ratio) - std::log(max)));
}

TEST(Schedules, PraxisLinearRampupExponentialDecay) {
  Schedule s = linear_rampup_exponential_decay(10, 20, 120, 2.0, 0.1);
  expect_schedule(s, [](double t) { return praxis_ref(false, 10, 20, 120, 2.0, 0.1, t); });
  EXPECT_NEAR(schedule_value(s, 0), 0.0, 1e-7);
  EXPECT_NEAR(schedule_value(s, 5), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 10), 2.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 19), 2.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 70), 2.0 * std::sqrt(0.1), 1e-5);  // halfway in log space
  EXPECT_NEAR(schedule_value(s, 120), 0.2, 1e-6);
  EXPECT_NEAR(schedule_value(s, 5000), 0.2, 1e-6);
  // No warmup and no hold: the decay from step 0.
  Schedule decay_only = linear_rampup_exponential_decay(0, 0, 50, 1.0, 0.01);
  expect_schedule(decay_only, [](double t) { return praxis_ref(false, 0, 0, 50, 1.0, 0.01, t); });
  // Warmup straight into the decay.
  Schedule no_hold = linear_rampup_exponential_decay(20, 20, 30, 0.5);
  expect_schedule(no_hold, [](double t) { return praxis_ref(false, 20, 20, 30, 0.5, 0.01, t); });
}

TEST(Schedules, PraxisLinearRampupCosineDecay) {
  Schedule s = linear_rampup_cosine_decay(10, 20, 120, 2.0, 0.1);
  expect_schedule(s, [](double t) { return praxis_ref(true, 10, 20, 120, 2.0, 0.1, t); });
  EXPECT_NEAR(schedule_value(s, 5), 1.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 20), 2.0, 1e-6);
  EXPECT_NEAR(schedule_value(s, 70), 0.2 + 0.9, 1e-6);
  EXPECT_NEAR(schedule_value(s, 120), 0.2, 1e-6);
  EXPECT_NEAR(schedule_value(s, 5000), 0.2, 1e-6);
  Schedule to_zero = linear_rampup_cosine_decay(0, 30, 90, 1.0, 0.0);
  expect_schedule(to_zero, [](double t) { return praxis_ref(true, 0, 30, 90, 1.0, 0.0, t); });
}

// ---- flax.training.lr_schedule

double flax_warmup(double t, double warmup_length, double steps_per_epoch) {
  return warmup_length > 0 ? std::min(1.0, t / warmup_length / steps_per_epoch) : 1.0;
}

TEST(Schedules, FlaxConstant) {
  Schedule plain = create_constant_learning_rate_schedule(0.1, 10);
  expect_schedule(plain, [](double) { return 0.1; });
  // Two epochs of 10 steps of warmup.
  Schedule warm = create_constant_learning_rate_schedule(0.1, 10, 2.0);
  expect_schedule(warm, [](double t) { return 0.1 * flax_warmup(t, 2.0, 10); });
  EXPECT_NEAR(schedule_value(warm, 0), 0.0, 1e-8);
  EXPECT_NEAR(schedule_value(warm, 5), 0.025, 1e-7);
  EXPECT_NEAR(schedule_value(warm, 20), 0.1, 1e-7);
  EXPECT_NEAR(schedule_value(warm, 500), 0.1, 1e-7);
}

TEST(Schedules, FlaxStepped) {
  // The ImageNet-style example, at 10 steps per epoch: drops after steps 30 and 60.
  Schedule s = create_stepped_learning_rate_schedule(0.5, 10, {{3, 0.1}, {6, 0.01}});
  auto ref = [](double t) { return t > 60 ? 0.005 : t > 30 ? 0.05 : 0.5; };
  expect_schedule(s, ref);
  EXPECT_NEAR(schedule_value(s, 30), 0.5, 1e-7);  // flax compares boundaries < step
  EXPECT_NEAR(schedule_value(s, 31), 0.05, 1e-7);
  EXPECT_NEAR(schedule_value(s, 61), 0.005, 1e-8);
  // Fractional epochs round half to even (np.round): 2.5 * 5 = 12.5 -> 12,
  // 3.5 * 5 = 17.5 -> 18.
  Schedule frac = create_stepped_learning_rate_schedule(1.0, 5, {{2.5, 0.5}, {3.5, 0.25}}, 1.0);
  auto frac_ref = [](double t) { return (t > 18 ? 0.25 : t > 12 ? 0.5 : 1.0) * flax_warmup(t, 1.0, 5); };
  expect_schedule(frac, frac_ref);
  EXPECT_NEAR(schedule_value(frac, 13), 0.5, 1e-7);
  EXPECT_NEAR(schedule_value(frac, 18), 0.5, 1e-7);
  EXPECT_NEAR(schedule_value(frac, 19), 0.25, 1e-7);
  EXPECT_NEAR(schedule_value(frac, 2), 0.4, 1e-7);  // in the warmup
  expect_schedule(create_stepped_learning_rate_schedule(0.2, 3, {}), [](double) { return 0.2; });
}

TEST(Schedules, FlaxCosine) {
  Schedule s = create_cosine_learning_rate_schedule(0.4, 10, 5.0, 1.0);
  auto ref = [](double t) { return 0.4 * (std::cos(t * kPi / 50) * 0.5 + 0.5) * flax_warmup(t, 1.0, 10); };
  expect_schedule(s, ref, 2e-6, 2e-7);
  EXPECT_NEAR(schedule_value(s, 5), 0.4 * 0.5 * (std::cos(kPi / 10) * 0.5 + 0.5), 1e-6);
  EXPECT_NEAR(schedule_value(s, 25), 0.2, 1e-6);
  EXPECT_NEAR(schedule_value(s, 50), 0.0, 1e-6);
  // Not clamped: it rises again after halfcos_epochs, as in flax.
  EXPECT_NEAR(schedule_value(s, 75), 0.2, 1e-6);
}

// ---- schedule_value and errors

TEST(Schedules, ScheduleValue) {
  EXPECT_NEAR(schedule_value(linear_schedule(0.0, 1.0, 4), 1), 0.25, 1e-7);
  EXPECT_PAX_ERROR(schedule_value(Schedule(), 0), "schedule_value: the schedule is an empty function");
  EXPECT_PAX_ERROR(schedule_value(constant_schedule(1), int64_t(1) << 40), "does not fit");
  Schedule vector_valued = [](const Array&) { return zeros({3}); };
  EXPECT_PAX_ERROR(schedule_value(vector_valued, 0), "expected a scalar");
}

TEST(Schedules, ArgumentErrors) {
  EXPECT_PAX_ERROR(linear_schedule(1, 0, 10, -1), "linear_schedule: transition_begin must be >= 0");
  EXPECT_PAX_ERROR(polynomial_schedule(1, 0, 2, 10, -5), "polynomial_schedule: transition_begin must be >= 0");
  EXPECT_PAX_ERROR(exponential_decay(1, 10, 0.5, -2), "exponential_decay: transition_begin must be >= 0");
  EXPECT_PAX_ERROR(cosine_decay_schedule(1, 0), "cosine_decay_schedule: decay_steps must be > 0, got 0");
  EXPECT_PAX_ERROR(warmup_cosine_decay_schedule(0, 1, 10, 10), "decay_steps (10) must be > warmup_steps (10)");
  EXPECT_PAX_ERROR(warmup_cosine_decay_schedule(0, 1, -1, 10), "warmup_steps must be >= 0");
  EXPECT_PAX_ERROR(piecewise_constant_schedule(1, {{10, -0.5}}), "scales must be >= 0, got -0.5 at step 10");
  EXPECT_PAX_ERROR(join_schedules({}, {}), "join_schedules: needs at least one schedule");
  EXPECT_PAX_ERROR(join_schedules({constant_schedule(1), constant_schedule(2)}, {}), "2 schedules need 1 boundaries");
  EXPECT_PAX_ERROR(join_schedules({constant_schedule(1), constant_schedule(2)}, {1, 2}), "got 2");
  EXPECT_PAX_ERROR(join_schedules({constant_schedule(1), Schedule()}, {3}), "schedule 1 is an empty function");
  EXPECT_PAX_ERROR(join_schedules({constant_schedule(1), constant_schedule(2), constant_schedule(3)}, {10, 5}),
                   "boundaries must be non-decreasing, got 10 then 5");

  EXPECT_PAX_ERROR(linear_rampup_exponential_decay(10, 5, 20, 1.0), "decay_start (5) must be >= warmup_steps (10)");
  EXPECT_PAX_ERROR(linear_rampup_exponential_decay(0, 20, 20, 1.0), "decay_end (20) must be > decay_start (20)");
  EXPECT_PAX_ERROR(linear_rampup_exponential_decay(-1, 0, 20, 1.0), "warmup_steps must be >= 0");
  EXPECT_PAX_ERROR(linear_rampup_exponential_decay(0, 0, 20, 0.0), "max (the peak value) must be > 0");
  EXPECT_PAX_ERROR(linear_rampup_exponential_decay(0, 0, 20, 1.0, 0.0), "min_ratio must be > 0");
  EXPECT_PAX_ERROR(linear_rampup_cosine_decay(0, 0, 20, 1.0, -0.1), "min_ratio must be >= 0");
  EXPECT_PAX_ERROR(linear_rampup_cosine_decay(0, 30, 20, 1.0), "linear_rampup_cosine_decay: decay_end (20)");

  EXPECT_PAX_ERROR(create_constant_learning_rate_schedule(0.1, 0), "steps_per_epoch must be > 0, got 0");
  EXPECT_PAX_ERROR(create_constant_learning_rate_schedule(0.1, 10, -1), "warmup_length (in epochs) must be >= 0");
  EXPECT_PAX_ERROR(create_cosine_learning_rate_schedule(0.1, 10, 0), "halfcos_epochs must be > 0");
  EXPECT_PAX_ERROR(create_cosine_learning_rate_schedule(0.1, -10, 5), "create_cosine_learning_rate_schedule");
  EXPECT_PAX_ERROR(create_stepped_learning_rate_schedule(0.1, 10, {{6, 0.1}, {3, 0.01}}),
                   "non-decreasing epoch order, got epoch 6 then 3");
  EXPECT_PAX_ERROR(create_stepped_learning_rate_schedule(0.1, 10, {{std::nan(""), 0.1}}), "finite");
}

}  // namespace
}  // namespace pax::optim

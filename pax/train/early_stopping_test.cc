// Tests for EarlyStopping: flax's documented example, the patience and
// min_delta edge cases, NaN / infinite metrics, reset and the tree form.
#include "pax/train/early_stopping.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The epoch at which should_stop first becomes true, or -1.
int stopping_epoch(EarlyStopping s, const std::vector<double>& metrics) {
  for (size_t epoch = 0; epoch < metrics.size(); ++epoch) {
    s = s.update(metrics[epoch]);
    if (s.should_stop) return int(epoch);
  }
  return -1;
}

TEST(EarlyStopping, FlaxExampleStopsAtEpoch7) {
  EarlyStopping s{.min_delta = 1e-3, .patience = 2};
  EXPECT_EQ(stopping_epoch(s, {4, 3, 3, 3, 2, 2, 2, 2, 1, 1}), 7);
  // Step by step: improvements reset the count; the check reads the count
  // from before the update.
  std::vector<double> loss{4, 3, 3, 3, 2, 2, 2, 2};
  std::vector<bool> improved{true, true, false, false, true, false, false, false};
  std::vector<int64_t> count{0, 0, 1, 2, 0, 1, 2, 3};
  for (size_t i = 0; i < loss.size(); ++i) {
    s = s.update(loss[i]);
    EXPECT_EQ(s.has_improved, improved[i]) << "epoch " << i;
    EXPECT_EQ(s.patience_count, count[i]) << "epoch " << i;
    EXPECT_EQ(s.should_stop, i == 7) << "epoch " << i;
  }
  EXPECT_EQ(s.best_metric, 2.0);
}

TEST(EarlyStopping, Defaults) {
  EarlyStopping s;
  EXPECT_EQ(s.min_delta, 0.0);
  EXPECT_EQ(s.patience, 0);
  EXPECT_EQ(s.best_metric, kInf);
  EXPECT_EQ(s.patience_count, 0);
  EXPECT_FALSE(s.should_stop);
  EXPECT_FALSE(s.has_improved);
}

TEST(EarlyStopping, PatienceZeroStopsAtTheFirstNonImprovement) {
  EarlyStopping s;
  s = s.update(5.0);
  EXPECT_TRUE(s.has_improved);
  s = s.update(4.0);
  EXPECT_FALSE(s.should_stop);
  s = s.update(4.0);  // equal is no improvement with min_delta 0
  EXPECT_FALSE(s.has_improved);
  EXPECT_TRUE(s.should_stop);
  EXPECT_EQ(s.patience_count, 1);
}

TEST(EarlyStopping, ImprovementsSmallerThanMinDeltaDoNotCount) {
  EarlyStopping s{.min_delta = 0.1, .patience = 1};
  s = s.update(1.0);
  s = s.update(0.95);  // better, but by less than min_delta
  EXPECT_FALSE(s.has_improved);
  EXPECT_EQ(s.best_metric, 1.0);
  EXPECT_EQ(s.patience_count, 1);
  s = s.update(0.91);  // still within min_delta of the best (1.0), not of the last
  EXPECT_FALSE(s.has_improved);
  EXPECT_TRUE(s.should_stop);
  // Exactly min_delta is not enough either: the comparison is strict.
  EarlyStopping t{.min_delta = 0.5, .patience = 3};
  t = t.update(2.0).update(1.5);
  EXPECT_FALSE(t.has_improved);
  t = t.update(1.25);
  EXPECT_TRUE(t.has_improved);
  EXPECT_EQ(t.best_metric, 1.25);
  EXPECT_EQ(t.patience_count, 0);
}

TEST(EarlyStopping, ImprovementDoesNotClearShouldStop) {
  // As in flax, once should_stop is set it stays set until reset().
  EarlyStopping s = EarlyStopping{}.update(1.0).update(2.0);
  EXPECT_TRUE(s.should_stop);
  s = s.update(0.5);
  EXPECT_TRUE(s.has_improved);
  EXPECT_TRUE(s.should_stop);
  EarlyStopping r = s.reset();
  EXPECT_FALSE(r.should_stop);
  EXPECT_FALSE(r.has_improved);
  EXPECT_EQ(r.best_metric, kInf);
  EXPECT_EQ(r.patience_count, 0);
  EXPECT_EQ(r.patience, s.patience);
  EXPECT_EQ(r.min_delta, s.min_delta);
}

TEST(EarlyStopping, NaNAndInfiniteMetrics) {
  // A NaN metric never improves, not even the first one, and counts against patience.
  EarlyStopping s{.patience = 1};
  s = s.update(std::nan(""));
  EXPECT_FALSE(s.has_improved);
  EXPECT_EQ(s.best_metric, kInf);
  EXPECT_EQ(s.patience_count, 1);
  s = s.update(3.0);  // the first real metric still counts as an improvement
  EXPECT_TRUE(s.has_improved);
  EXPECT_EQ(s.best_metric, 3.0);
  s = s.update(std::nan("")).update(std::nan(""));
  EXPECT_TRUE(s.should_stop);
  EXPECT_EQ(s.best_metric, 3.0);
  // +inf as the first metric is accepted (nothing seen yet), as in flax.
  EarlyStopping i = EarlyStopping{}.update(kInf);
  EXPECT_TRUE(i.has_improved);
  EXPECT_TRUE(i.update(10.0).has_improved);
  // After -inf nothing improves any more.
  EarlyStopping m = EarlyStopping{.patience = 5}.update(-kInf);
  EXPECT_TRUE(m.has_improved);
  EXPECT_FALSE(m.update(0.0).has_improved);
  EXPECT_EQ(m.update(0.0).best_metric, -kInf);
}

TEST(EarlyStopping, InvalidSettings) {
  EXPECT_PAX_ERROR((EarlyStopping{.patience = -1}.update(1.0)), "EarlyStopping::update: patience must be >= 0");
  EXPECT_PAX_ERROR((EarlyStopping{.min_delta = -0.1}.update(1.0)), "min_delta must be >= 0, got -0.1");
  EXPECT_PAX_ERROR((EarlyStopping{.min_delta = std::nan("")}.update(1.0)), "min_delta must be >= 0");
}

TEST(EarlyStopping, TreeRoundTrip) {
  EarlyStopping s{.min_delta = 1e-3, .patience = 2};
  s = s.update(4).update(3).update(3.5);
  Tree t = s.to_tree();
  EXPECT_EQ(t.str(),
            "{'min_delta': f64[], 'patience': i64[], 'best_metric': f64[], 'patience_count': i64[], "
            "'should_stop': bool[], 'has_improved': bool[]}");
  EarlyStopping back = EarlyStopping::from_tree(t);
  EXPECT_EQ(back.min_delta, s.min_delta);
  EXPECT_EQ(back.patience, s.patience);
  EXPECT_EQ(back.best_metric, s.best_metric);
  EXPECT_EQ(back.patience_count, s.patience_count);
  EXPECT_EQ(back.should_stop, s.should_stop);
  EXPECT_EQ(back.has_improved, s.has_improved);
  // The fresh state, with best_metric = +inf, round-trips too, and resumes identically.
  EarlyStopping fresh{.min_delta = 1e-3, .patience = 2};
  EXPECT_EQ(EarlyStopping::from_tree(fresh.to_tree()).best_metric, kInf);
  EXPECT_EQ(stopping_epoch(EarlyStopping::from_tree(fresh.to_tree()), {4, 3, 3, 3, 2, 2, 2, 2, 1, 1}), 7);

  Tree missing = t;
  missing = Tree::dict({{"min_delta", scalar<double>(0)}});
  EXPECT_PAX_ERROR(EarlyStopping::from_tree(missing), "missing key 'patience'");
  Tree not_scalar = t;
  not_scalar.set("patience", zeros({2}));
  EXPECT_PAX_ERROR(EarlyStopping::from_tree(not_scalar), "'patience' must be a scalar array");
  Tree fractional = t;
  fractional.set("patience_count", scalar<double>(1.5));
  EXPECT_PAX_ERROR(EarlyStopping::from_tree(fractional), "'patience_count' must be an integer, got 1.5");
  Tree negative = t;
  negative.set("patience", scalar<int64_t>(-2));
  EXPECT_PAX_ERROR(EarlyStopping::from_tree(negative), "EarlyStopping::from_tree: patience must be >= 0");
  EXPECT_PAX_ERROR(EarlyStopping::from_tree(Tree()), "expected a dict of scalars");
}

TEST(EarlyStopping, JsonRoundTripKeepsTheSettings) {
  EarlyStopping s{.min_delta = 1e-3, .patience = 2};
  s = s.update(4).update(3).update(3.5);
  EarlyStopping config{.min_delta = 0.5, .patience = 7};
  EarlyStopping back = config.restore_json(s.to_json());
  EXPECT_EQ(back.min_delta, 0.5);  // the settings come from the config, the progress from the text
  EXPECT_EQ(back.patience, 7);
  EXPECT_EQ(back.best_metric, s.best_metric);
  EXPECT_EQ(back.patience_count, s.patience_count);
  EXPECT_EQ(back.should_stop, s.should_stop);
  EXPECT_EQ(back.has_improved, s.has_improved);
  EXPECT_PAX_ERROR(config.restore_json("{\"best_metric\": 1}"), "not an early-stopping state");
  EXPECT_PAX_ERROR(config.restore_json("nonsense"), "not an early-stopping state");
}

TEST(EarlyStopping, JsonRoundTripIsExactForInfiniteBests) {
  EarlyStopping config{.min_delta = 1e-3, .patience = 3};
  // The fresh state (+inf: nothing seen yet) resumes as fresh.
  EarlyStopping fresh = config.restore_json(config.to_json());
  EXPECT_EQ(fresh.best_metric, kInf);
  EXPECT_EQ(stopping_epoch(fresh, {4, 3, 3, 3, 3, 3}), stopping_epoch(config, {4, 3, 3, 3, 3, 3}));
  // After a -inf metric nothing improves any more, before and after a resume
  // (read as +inf, the next metric would count as the first one seen).
  EarlyStopping low = config.update(-kInf);
  EarlyStopping resumed = config.restore_json(low.to_json());
  EXPECT_EQ(resumed.best_metric, -kInf);
  EXPECT_FALSE(resumed.update(0.0).has_improved);
  EXPECT_EQ(resumed.update(0.0).patience_count, 1);
  // A higher-is-better metric is stopped on its negation: a +inf accuracy is a -inf best.
  EXPECT_EQ(config.restore_json(config.update(-kInf).update(5).to_json()).patience_count, 1);
  EXPECT_TRUE(std::isnan(config.restore_json(EarlyStopping{.best_metric = std::nan("")}.to_json()).best_metric));
  // null, the form +inf was written in before, still reads as +inf.
  const std::string old_form =
      "{\"best_metric\": null, \"patience_count\": 0, \"should_stop\": false, "
      "\"has_improved\": false}";
  EXPECT_EQ(config.restore_json(old_form).best_metric, kInf);
  EXPECT_PAX_ERROR(config.restore_json("{\"best_metric\": \"-infinity\", \"patience_count\": 0, "
                                       "\"should_stop\": false, \"has_improved\": false}"),
                   "best_metric must be a number, \"inf\", \"-inf\", \"nan\" or null, got \"-infinity\"");
}

TEST(EarlyStopping, RestoreJsonChecksTheSettings) {
  const std::string negative =
      "{\"best_metric\": 1.5, \"patience_count\": -2, \"should_stop\": false, "
      "\"has_improved\": false}";
  EXPECT_PAX_ERROR(EarlyStopping{}.restore_json(negative),
                   "EarlyStopping::restore_json: patience_count must be >= 0, got -2");
  const std::string good = EarlyStopping{}.update(1.5).to_json();
  EXPECT_PAX_ERROR((EarlyStopping{.patience = -1}.restore_json(good)),
                   "EarlyStopping::restore_json: patience must be >= 0, got -1");
  EXPECT_PAX_ERROR((EarlyStopping{.min_delta = -0.5}.restore_json(good)), "restore_json: min_delta must be >= 0");
}

}  // namespace
}  // namespace pax::train

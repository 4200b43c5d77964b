// Tests for the console output: durations, rates and summary lines on hand
// values, the progress bar, and ConsoleProgress on a terminal and on a log
// (a fake clock drives the redraw and plain-line intervals).
#include "pax/train/console.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

namespace pax::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// (input, expected) pairs worked out by hand.
struct Case {
  double value;
  const char* want;
};

TEST(ConsoleFormat, Durations) {
  const Case cases[] = {{0, "0s"},      {42.4, "42s"},   {59.6, "1m00s"},
                        {185, "3m05s"}, {3720, "1h02m"}, {2 * 86400 + 3 * 3600 + 100, "2d03h"},
                        {kNaN, "?"},    {kInf, "?"},     {-1, "?"},
                        {1e300, "?"}};
  for (const Case& c : cases) EXPECT_EQ(format_duration(c.value), c.want) << c.value;
}

TEST(ConsoleFormat, Rates) {
  const Case cases[] = {{950, "950"},     {12345, "12.3k"}, {0.5, "0.500"},     {3.214, "3.21"}, {9.996, "10.0"},
                        {999.7, "1.00k"}, {1.5e6, "1.50M"}, {0.0123, "0.0123"}, {0, "0"},        {kNaN, "?"}};
  for (const Case& c : cases) EXPECT_EQ(format_rate(c.value), c.want) << c.value;
  EXPECT_EQ(format_metric(2.345678), "2.3457");
  EXPECT_EQ(format_metric(2.4), "2.4");
}

StepMetrics train_metrics() {
  StepMetrics m;
  m.step = 1200;
  m.metrics = {{"loss", 2.345678}, {"accuracy", 0.5}};
  m.steps_per_sec = 3.2;
  m.tokens_per_sec = 12345;
  m.mfu = 0.312;
  m.learning_rate = 1e-3;  // not on the console line
  return m;
}

TEST(ConsoleFormat, SummaryLines) {
  // ETA = (10000 - 1200) / 3.2 = 2750 s.
  EXPECT_EQ(format_summary_line(train_metrics(), 10000),
            "train step 1200/10000  loss 2.3457  accuracy 0.5  3.20 steps/s  12.3k tokens/s  MFU 31.2%  ETA 45m50s");
  // Unknown total: no fraction and no ETA.
  EXPECT_EQ(format_summary_line(train_metrics(), 0),
            "train step 1200  loss 2.3457  accuracy 0.5  3.20 steps/s  12.3k tokens/s  MFU 31.2%");
  // The wait for input, where it slows training down (5% or more).
  StepMetrics waiting = train_metrics();
  waiting.input_wait = 0.124;
  EXPECT_EQ(format_summary_line(waiting, 0),
            "train step 1200  loss 2.3457  accuracy 0.5  3.20 steps/s  12.3k tokens/s  MFU 31.2%  input wait 12%");
  waiting.input_wait = 0.01;
  EXPECT_EQ(format_summary_line(waiting, 0), format_summary_line(train_metrics(), 0));
  StepMetrics vision;
  vision.step = 50;
  vision.metrics = {{"loss", 0.25}};
  vision.examples_per_sec = 2048;
  EXPECT_EQ(format_summary_line(vision, 100), "train step 50/100  loss 0.25  2.05k examples/s");
  StepMetrics eval;
  eval.split = "eval_test_kjv";
  eval.step = 1200;
  eval.metrics = {{"loss", 2.4}, {"accuracy", 0.51}};
  eval.steps_per_sec = 10;
  EXPECT_EQ(format_summary_line(eval, 10000), "eval_test_kjv step 1200/10000  loss 2.4  accuracy 0.51  10.0 steps/s");
  StepMetrics nan_loss;
  nan_loss.metrics = {{"loss", kNaN}};
  EXPECT_EQ(format_summary_line(nan_loss, 0), "train step 0  loss nan");
}

// The line shows the loss the learner minimises: with a MultiLossAggregator
// the weighted sum of its terms, not total_loss; the summary keeps the rest.
TEST(ConsoleFormat, TheLineShowsTheAggregatedLoss) {
  StepMetrics m;
  m.step = 10;
  m.metrics = {{"total_loss", 2.0},
               {"avg_xent", 2.0},
               {"log_pplx", 2.0},
               {"num_predictions", 64},
               {"fraction_of_correct_next_step_preds", 0.25}};
  auto multi = std::make_shared<MultiLossAggregator>();
  multi->loss_keys = {"avg_xent", "num_predictions"};
  multi->loss_weights = {0.5, 0.01};
  const StepMetrics shown = console_line_metrics(m, loss_terms(multi, "total_loss"));
  EXPECT_EQ(format_summary_line(shown, 0), "train step 10  loss 1.64  accuracy 0.25");  // 0.5 * 2 + 0.01 * 64
  EXPECT_EQ(m.metrics.size(), 5u) << "the summary's own metrics are left whole";
  // The default aggregator: the learner's loss_name alone.
  EXPECT_EQ(format_summary_line(console_line_metrics(m, loss_terms(nullptr, "total_loss")), 0),
            "train step 10  loss 2  accuracy 0.25");
  // A term the metrics aggregator does not log: no loss rather than a wrong one.
  multi->loss_keys = {"avg_xent", "aux_loss"};
  EXPECT_EQ(format_summary_line(console_line_metrics(m, loss_terms(multi, "total_loss")), 0),
            "train step 10  accuracy 0.25");
}

TEST(ConsoleFormat, ProgressBar) {
  // 7500 steps left at 2 steps/s: 3750 s.
  EXPECT_EQ(format_progress_bar(2500, 10000, 2.0, 20),
            "[#####---------------]  2500/10000  25.0%  2.00 steps/s  ETA 1h02m");
  EXPECT_EQ(format_progress_bar(0, 10, kNaN, 10), "[----------]  0/10  0.0%");
  EXPECT_EQ(format_progress_bar(12, 10, 1.0, 4), "[####]  12/10  100.0%  1.00 steps/s  ETA 0s");
  EXPECT_EQ(format_progress_bar(42, 0, 1.0, 10), "step 42  1.00 steps/s");
  EXPECT_EQ(format_progress_bar(42, 0, 0.0, 10), "step 42");
}

// A clock the test moves by hand.
struct FakeClock {
  double t = 100;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

TEST(ConsoleProgress, TerminalRedrawsInPlaceAndClearsForSummaries) {
  std::ostringstream out;
  FakeClock clock;
  ConsoleProgress p(
      {.total_steps = 100, .out = &out, .tty = true, .redraw_secs = 1, .bar_width = 10, .clock = clock.fn()});
  EXPECT_TRUE(p.tty());
  p.update(0);  // first draw at once
  EXPECT_EQ(out.str(), "\r[----------]  0/100  0.0%\x1b[K");
  clock.t += 0.5;
  p.update(1);  // within redraw_secs: nothing
  EXPECT_EQ(count(out.str(), "\r["), 1u);
  clock.t += 0.5;
  p.update(2);  // 2 steps in 1 s
  EXPECT_EQ(p.measured_steps_per_sec(), 2.0);
  EXPECT_NE(out.str().find("\r[----------]  2/100  2.0%  2.00 steps/s  ETA 49s\x1b[K"), std::string::npos);

  out.str("");
  StepMetrics m;
  m.step = 2;
  m.metrics = {{"loss", 1.5}};
  p.summary(m);  // the measured rate fills in steps/s and the ETA
  EXPECT_EQ(out.str(), "\r\x1b[Ktrain step 2/100  loss 1.5  2.00 steps/s  ETA 49s\n");

  out.str("");
  p.update(3);  // the bar comes back at once after a line
  EXPECT_EQ(out.str().rfind("\r[", 0), 0u);
  EXPECT_EQ(p.measured_steps_per_sec(), 2.0);  // the new window is empty: the last rate stands
  clock.t += 2;
  p.update(4);  // 2 steps in 2 s since the summary
  EXPECT_EQ(p.measured_steps_per_sec(), 1.0);
  out.str("");
  p.message("saved checkpoint 4");
  EXPECT_EQ(out.str(), "\r\x1b[Ksaved checkpoint 4\n");
  out.str("");
  p.finish();
  p.finish();
  EXPECT_EQ(out.str(), "");  // the bar was already cleared
}

TEST(ConsoleProgress, LogGetsNoBarOnlyLines) {
  std::ostringstream out;
  FakeClock clock;
  ConsoleProgress p({.total_steps = 10, .out = &out, .tty = false, .clock = clock.fn()});
  EXPECT_FALSE(p.tty());
  for (int step = 0; step < 10; ++step) {
    clock.t += 100;
    p.update(step);
  }
  EXPECT_EQ(out.str(), "");
  StepMetrics m;
  m.step = 9;
  m.metrics = {{"loss", 0.5}};
  m.steps_per_sec = 0.01;
  p.summary(m);
  p.finish();
  EXPECT_EQ(out.str(), "train step 9/10  loss 0.5  0.0100 steps/s  ETA 1m40s\n");
}

TEST(ConsoleProgress, LogGetsSparsePlainLines) {
  std::ostringstream out;
  FakeClock clock;
  ConsoleProgress p(
      {.total_steps = 100, .out = &out, .tty = false, .plain_secs = 10, .bar_width = 4, .clock = clock.fn()});
  for (int step = 0; step <= 30; ++step) {
    p.update(step);
    clock.t += 1;  // one step per second: a line every 10 steps, the first 10 s in
  }
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  EXPECT_EQ(count(out.str(), "\n"), 3u);
  EXPECT_EQ(out.str().substr(0, out.str().find('\n')), "[----]  10/100  10.0%  1.00 steps/s  ETA 1m30s");
}

TEST(ConsoleProgress, DefaultsToStdoutWhenNotATerminalInTests) {
  ConsoleProgress p({.total_steps = 0, .tty = false});
  EXPECT_FALSE(p.tty());
  EXPECT_TRUE(std::isnan(p.measured_steps_per_sec()));
}

TEST(ConsoleProgress, AStreamOtherThanStdoutOrStderrIsNoTerminal) {
  std::ostringstream out;
  ConsoleProgress p({.total_steps = 10, .out = &out});
  EXPECT_FALSE(p.tty());
  p.update(5);
  p.finish();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace pax::train

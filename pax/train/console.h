// Console output of a training loop: one line per summary step and, between
// them, a progress bar redrawn in place with carriage returns when the
// stream (stdout or stderr) is a terminal. When it is not (a log file, a
// pipe), the bar is left out, or replaced by a plain line at a long interval,
// so that logs stay readable.
//
//   ConsoleProgress progress({.total_steps = num_steps});
//   for (...) {
//     ...
//     progress.update(step);
//     if (summary_step) progress.summary(metrics);
//   }
//   progress.finish();
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pax/train/loss_aggregator.h"
#include "pax/train/summary.h"

namespace pax::train {

// "42s", "3m05s", "1h02m", "2d03h"; "?" when not finite or negative.
std::string format_duration(double seconds);
// Three significant digits with a k / M / G / T suffix: 950 -> "950",
// 12345 -> "12.3k", 0.5 -> "0.500"; "?" when not finite.
std::string format_rate(double per_sec);
// A metric value with up to five significant digits: 2.345678 -> "2.3457", 2.4 -> "2.4".
std::string format_metric(double v);

// One summary step as one line, e.g.
//   train step 1200/10000  loss 2.3457  3.21 steps/s  12.3k tokens/s  MFU 31.2%  ETA 45m40s
//   eval_test_kjv step 1200  loss 2.4  accuracy 0.51
// Loss comes first, then the other metrics by name; the rates, MFU and ETA
// appear when known. The ETA is (total_steps - step) / steps_per_sec, shown
// for the train split when total_steps > 0 (0: unknown).
std::string format_summary_line(const StepMetrics& m, int64_t total_steps);

// What a console line shows of a summary's metrics: the loss the learner
// minimises as "loss" (loss_value of the loss aggregator's `loss` terms over
// m.metrics: the one metric of a LossAggregator, the weighted sum of a
// MultiLossAggregator's; left out when a term's metric is not logged) and
// one accuracy ("accuracy", or a language model's
// fraction_of_correct_next_step_preds). metrics.jsonl and TensorBoard get
// every metric; this is only the line.
StepMetrics console_line_metrics(StepMetrics m, const std::vector<LossTerm>& loss);

// "[##########----------]  1234/10000  12.3%  3.21 steps/s  ETA 45m40s"; with
// total_steps <= 0 only the step and the rate. A non-positive or non-finite
// rate leaves out the rate and the ETA.
std::string format_progress_bar(int64_t step, int64_t total_steps, double steps_per_sec, int bar_width);

class ConsoleProgress {
 public:
  struct Options {
    int64_t total_steps = 0;      // the last step; 0: unknown (no fraction, no ETA)
    std::ostream* out = nullptr;  // nullptr: std::cout
    // Whether `out` is a terminal; unset: isatty(stdout) for std::cout,
    // isatty(stderr) for std::cerr and std::clog, false for other streams.
    std::optional<bool> tty;
    double redraw_secs = 0.2;  // terminal: the bar is redrawn at most this often
    double plain_secs = 0;     // not a terminal: a plain progress line at most this often; 0: none
    int bar_width = 30;
    std::function<double()> clock;  // monotonic seconds; unset: std::chrono::steady_clock
  };

  explicit ConsoleProgress(Options options);
  ConsoleProgress(const ConsoleProgress&) = delete;
  ConsoleProgress& operator=(const ConsoleProgress&) = delete;
  ~ConsoleProgress();

  // After each training step: redraws the bar when due. The rate is measured
  // over the steps since the last summary (or the first update).
  void update(int64_t step);
  // A summary line (the bar is cleared first and redrawn by the next update).
  // A train summary without steps_per_sec gets the measured rate for its ETA.
  void summary(const StepMetrics& m);
  // Any other line, printed without garbling the bar.
  void message(const std::string& line);
  // Clears the bar; nothing is drawn afterwards until the next update().
  void finish();

  bool tty() const { return tty_; }
  // The measured rate (steps/s); NaN before two updates.
  double measured_steps_per_sec() const;

 private:
  double now() const;
  void clear_bar();
  std::ostream& out_;
  Options options_;
  bool tty_ = false;
  bool bar_visible_ = false;
  int64_t step_ = -1;
  double last_update_ = 0;
  int64_t anchor_step_ = -1;  // the rate window starts at this step and time
  double anchor_time_ = 0;
  double last_rate_ = std::numeric_limits<double>::quiet_NaN();  // the previous window's rate
  double last_draw_ = 0;
};

}  // namespace pax::train

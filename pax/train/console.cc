// Console formatting (durations, rates, summary lines, the progress bar) and
// ConsoleProgress, which draws them on a terminal or a log.
#include "pax/train/console.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <utility>

namespace pax::train {

std::string format_duration(double seconds) {
  // Beyond ~270 years an ETA means "never"; it also keeps llround in range.
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e10) return "?";
  const int64_t s = std::llround(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_rate(double per_sec) {
  if (!std::isfinite(per_sec)) return "?";
  if (per_sec == 0) return "0";
  static constexpr const char* kSuffixes[] = {"", "k", "M", "G", "T"};
  double v = per_sec;
  size_t i = 0;
  // Move to the next suffix when three significant digits would round to 1000.
  while (std::abs(v) >= 999.5 && i + 1 < std::size(kSuffixes)) v /= 1000, ++i;
  const int decimals = std::max(0, 2 - int(std::floor(std::log10(std::abs(v)))));
  std::string out = fmt::format("{:.{}f}", v, decimals);
  // 9.996 -> "10.00" has four significant digits; print it with the decimals of 10.
  if (decimals > 0 && std::abs(std::stod(out)) >= std::pow(10.0, 3 - decimals)) {
    out = fmt::format("{:.{}f}", v, decimals - 1);
  }
  return out + kSuffixes[i];
}

std::string format_metric(double v) { return fmt::format("{:.5g}", v); }

std::string format_summary_line(const StepMetrics& m, int64_t total_steps) {
  std::string line = m.split + " step " + std::to_string(m.step);
  if (total_steps > 0) line += "/" + std::to_string(total_steps);
  if (auto it = m.metrics.find(std::string(kTagLoss)); it != m.metrics.end()) {
    line += "  loss " + format_metric(it->second);
  }
  for (const auto& [name, value] : m.metrics) {
    if (name != kTagLoss) line += "  " + name + " " + format_metric(value);
  }
  if (m.steps_per_sec) line += "  " + format_rate(*m.steps_per_sec) + " steps/s";
  if (m.tokens_per_sec) line += "  " + format_rate(*m.tokens_per_sec) + " tokens/s";
  if (m.examples_per_sec) line += "  " + format_rate(*m.examples_per_sec) + " examples/s";
  if (m.mfu) line += fmt::format("  MFU {:.1f}%", *m.mfu * 100);
  if (m.skipped_steps && *m.skipped_steps > 0) line += fmt::format("  skipped {:.0f} steps", *m.skipped_steps);
  // Shown where the input slows training down.
  if (m.input_wait && *m.input_wait >= 0.05) line += fmt::format("  input wait {:.0f}%", *m.input_wait * 100);
  if (m.split == kTrainSplit && total_steps > 0 && m.steps_per_sec && *m.steps_per_sec > 0) {
    line += "  ETA " + format_duration(double(std::max<int64_t>(total_steps - m.step, 0)) / *m.steps_per_sec);
  }
  return line;
}

StepMetrics console_line_metrics(StepMetrics m, const std::vector<LossTerm>& loss) {
  std::map<std::string, double> shown;
  if (const std::optional<double> value = loss_value(loss, m.metrics)) shown[std::string(kTagLoss)] = *value;
  for (const char* accuracy : {"accuracy", "fraction_of_correct_next_step_preds"}) {
    auto it = m.metrics.find(accuracy);
    if (it != m.metrics.end()) shown["accuracy"] = it->second;
  }
  m.metrics = std::move(shown);
  return m;
}

std::string format_progress_bar(int64_t step, int64_t total_steps, double steps_per_sec, int bar_width) {
  std::string line;
  if (total_steps > 0) {
    const double frac = std::clamp(double(step) / double(total_steps), 0.0, 1.0);
    const int width = std::max(bar_width, 1);
    const int filled = int(std::floor(frac * width));
    line = "[" + std::string(size_t(filled), '#') + std::string(size_t(width - filled), '-') + "]  " +
           fmt::format("{}/{}  {:.1f}%", step, total_steps, frac * 100);
  } else {
    line = "step " + std::to_string(step);
  }
  if (std::isfinite(steps_per_sec) && steps_per_sec > 0) {
    line += "  " + format_rate(steps_per_sec) + " steps/s";
    if (total_steps > 0) {
      line += "  ETA " + format_duration(double(std::max<int64_t>(total_steps - step, 0)) / steps_per_sec);
    }
  }
  return line;
}

// --- ConsoleProgress ---

namespace {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

constexpr double kNever = -std::numeric_limits<double>::infinity();

// Only the standard streams can be matched to a file descriptor.
bool is_terminal(const std::ostream* out) {
  if (out == nullptr || out == &std::cout) return ::isatty(STDOUT_FILENO);
  if (out == &std::cerr || out == &std::clog) return ::isatty(STDERR_FILENO);
  return false;
}

}  // namespace

ConsoleProgress::ConsoleProgress(Options options)
    : out_(options.out ? *options.out : std::cout), options_(std::move(options)) {
  if (!options_.clock) options_.clock = steady_seconds;
  tty_ = options_.tty.value_or(is_terminal(options_.out));
  // A log gets its first plain line one interval in, not at step 0.
  last_draw_ = tty_ ? kNever : now();
}

ConsoleProgress::~ConsoleProgress() {
  try {
    finish();
  } catch (...) {
  }
}

double ConsoleProgress::now() const { return options_.clock(); }

double ConsoleProgress::measured_steps_per_sec() const {
  if (step_ > anchor_step_ && last_update_ > anchor_time_) {
    return double(step_ - anchor_step_) / (last_update_ - anchor_time_);
  }
  return last_rate_;
}

void ConsoleProgress::update(int64_t step) {
  const double t = now();
  if (anchor_step_ < 0) anchor_step_ = step, anchor_time_ = t;
  step_ = step;
  last_update_ = t;
  if (tty_) {
    if (t - last_draw_ < options_.redraw_secs) return;
    // "\x1b[K" clears what a longer previous bar left on the line.
    out_ << '\r' << format_progress_bar(step, options_.total_steps, measured_steps_per_sec(), options_.bar_width)
         << "\x1b[K" << std::flush;
    bar_visible_ = true;
    last_draw_ = t;
  } else if (options_.plain_secs > 0 && t - last_draw_ >= options_.plain_secs) {
    out_ << format_progress_bar(step, options_.total_steps, measured_steps_per_sec(), options_.bar_width) << '\n'
         << std::flush;
    last_draw_ = t;
  }
}

void ConsoleProgress::summary(const StepMetrics& m) {
  StepMetrics shown = m;
  const double rate = measured_steps_per_sec();
  if (shown.split == kTrainSplit && !shown.steps_per_sec && std::isfinite(rate)) shown.steps_per_sec = rate;
  message(format_summary_line(shown, options_.total_steps));
  // The next window starts here, so the rate follows changes in speed; until
  // it has a step, the last window's rate stands in.
  if (std::isfinite(rate)) last_rate_ = rate;
  if (step_ >= 0) anchor_step_ = step_, anchor_time_ = last_update_;
}

void ConsoleProgress::message(const std::string& line) {
  clear_bar();
  out_ << line << '\n' << std::flush;
}

void ConsoleProgress::finish() {
  clear_bar();
  out_ << std::flush;
}

void ConsoleProgress::clear_bar() {
  if (!bar_visible_) return;
  out_ << "\r\x1b[K";
  bar_visible_ = false;
  last_draw_ = kNever;
}

}  // namespace pax::train

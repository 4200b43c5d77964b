// report.html: one self-contained page (inline SVG, no scripts, no network)
// with a chart per training quantity over steps, drawn from the history in
// metrics.jsonl (pax/train/summary.h): loss and every other metric with one
// series per split (train vs eval), learning rate, gradient norm, steps/s,
// tokens/s or examples/s and MFU, plus a table of each split's latest values;
// with a ReportContext also the machine and build, the configuration
// (collapsed), the parameter table and the latest decoded samples. The page
// fits a 1300 px window: tables wrap their cells, long names and lines break.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/train/report_context.h"
#include "pax/train/summary.h"

namespace pax::train {

// One line of a chart: (step, value) points in increasing step order.
// Non-finite values leave a gap in the line.
struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

struct Chart {
  std::string title;  // e.g. "loss", "learning rate"
  std::string y_label;
  std::vector<ChartSeries> series;
};

// The chart as an <svg> element: axes with "nice" tick labels (1, 2, 5 x
// 10^k), grid lines, a path per series and a legend. Series longer than the
// plot is wide keep each pixel column's first, lowest, highest and last
// points, so spikes survive.
std::string render_chart_svg(const Chart& chart, int width = 560, int height = 280);

// The history with restarts resolved, per split: a record whose step is not
// above the last kept step of its split (a job resumed from an earlier
// checkpoint replays those steps) drops the kept records from its step on.
// Splits come out in order of first appearance ("train" first), each in
// step order.
std::vector<StepMetrics> resolve_history(const std::vector<StepMetrics>& history);

// The report's charts, those with data: one per metric ("loss" first, then by
// name) with a series per split, then learning rate, gradient norm, steps/s,
// tokens/s, examples/s and MFU (in percent).
std::vector<Chart> report_charts(const std::vector<StepMetrics>& history);

// The samples file of the highest step in `decode_dir` (samples_step_<N>.txt):
// its step and at most `max_bytes` of its text (cut at a line end, "..."
// appended). nullopt when the directory is missing or holds no such file.
struct DecodedSamples {
  int64_t step = 0;
  std::string file, text;
};
std::optional<DecodedSamples> latest_decoded_samples(const std::string& decode_dir, size_t max_bytes = 16384);

// The whole page for `history` (resolved first) and `context`.
std::string render_report_html(const std::vector<StepMetrics>& history, const std::string& title,
                               const ReportContext& context = {});

// Writes the page to `path` through a temporary file and a rename, so that a
// reader never sees half a page; pax::Error naming the file on failure, and
// naming the path at fault when `path` or its directory cannot be written (a
// directory in its place, a dangling symlink, a read-only directory).
void write_report_file(const std::string& path, const std::vector<StepMetrics>& history, const std::string& title,
                       const ReportContext& context = {});

}  // namespace pax::train

// report.html: history resolution, chart grouping, SVG line charts with nice
// ticks, and the page around them.
#include "pax/train/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "pax/core/error.h"
#include "pax/train/fs_util.h"

namespace pax::train {

namespace {

// Colour-blind-friendly enough, and "train" (the first series) is always blue.
constexpr std::string_view kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                         "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// --- axes ---

// A linear axis over [lo, hi] with ticks every `step`, lo and hi multiples of step.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  int ticks() const { return int(std::lround((hi - lo) / step)) + 1; }
  double tick(int i) const {
    double v = lo + i * step;
    return std::abs(v) < step * 1e-9 ? 0.0 : v;  // no "-0" or 1e-17 labels
  }
};

// About `n` intervals of 1, 2 or 5 times a power of ten covering [lo, hi].
Axis nice_axis(double lo, double hi, int n) {
  if (!(hi > lo)) {
    double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / n;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

// Tick labels with just the digits the step needs; k / M / G suffixes for
// large values, exponents for tiny ones (learning rates).
std::vector<std::string> tick_labels(const Axis& axis) {
  const double big = std::max(std::abs(axis.lo), std::abs(axis.hi));
  double div = 1;
  std::string_view suffix;
  for (auto [d, s] : {std::pair{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e4, "k"}}) {
    if (big >= d) {
      div = d == 1e4 ? 1e3 : d;
      suffix = s;
      break;
    }
  }
  const bool tiny = big < 1e-3;
  const int decimals = std::max(0, int(-std::floor(std::log10(axis.step / div) + 1e-9)));
  // Tiny axes: one mantissa precision for all labels, enough for the largest.
  const int digits = tiny ? std::clamp(int(std::floor(std::log10(big)) - std::floor(std::log10(axis.step))), 0, 3) : 0;
  std::vector<std::string> out;
  for (int i = 0; i < axis.ticks(); ++i) {
    double v = axis.tick(i);
    if (tiny && v != 0) {
      out.push_back(fmt::format("{:.{}e}", v, digits));
    } else {
      out.push_back(fmt::format("{:.{}f}{}", v / div, decimals, suffix));
    }
  }
  return out;
}

// --- series decimation ---

// The points drawn for a series on `width` pixels over `x_axis`: all of them
// when few, else each pixel column's first, lowest, highest and last point
// (in their original order), with non-finite values kept as gaps.
std::vector<std::pair<double, double>> decimate(const std::vector<std::pair<double, double>>& pts, const Axis& x_axis,
                                                double width) {
  if (pts.size() <= size_t(2 * width)) return pts;
  std::vector<std::pair<double, double>> out;
  size_t i = 0;
  while (i < pts.size()) {
    if (!std::isfinite(pts[i].second)) {
      out.push_back(pts[i++]);
      continue;
    }
    const long column = std::lround((pts[i].first - x_axis.lo) / (x_axis.hi - x_axis.lo) * width);
    size_t j = i, lo = i, hi = i;
    while (j < pts.size() && std::isfinite(pts[j].second) &&
           std::lround((pts[j].first - x_axis.lo) / (x_axis.hi - x_axis.lo) * width) == column) {
      if (pts[j].second < pts[lo].second) lo = j;
      if (pts[j].second > pts[hi].second) hi = j;
      ++j;
    }
    std::set<size_t> keep = {i, lo, hi, j - 1};
    for (size_t k : keep) out.push_back(pts[k]);
    i = j;
  }
  return out;
}

std::string format_value(double v) { return std::isfinite(v) ? fmt::format("{:.5g}", v) : "NaN"; }

std::string local_time(double unix_seconds) {
  std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// How the quantities outside `metrics` are titled in the report, in chart order.
struct ExtraChart {
  std::string_view tag, title, y_label;
  double scale;
};
constexpr ExtraChart kExtraCharts[] = {
    {kTagLearningRate, "learning rate", "", 1},          {kTagGradNorm, "gradient norm", "", 1},
    {kTagStepsPerSec, "steps/s", "steps/s", 1},          {kTagTokensPerSec, "tokens/s", "tokens/s", 1},
    {kTagExamplesPerSec, "examples/s", "examples/s", 1}, {kTagMfu, "MFU", "%", 100}};

const ExtraChart* extra_chart(std::string_view tag) {
  for (const ExtraChart& e : kExtraCharts) {
    if (e.tag == tag) return &e;
  }
  return nullptr;
}

// The scalar names of a resolved history in chart order: "loss", the other
// metrics by name, then the extras in kExtraCharts order.
std::vector<std::string> chart_order(const std::vector<StepMetrics>& resolved) {
  std::set<std::string> metric_names, extra_names;
  for (const StepMetrics& m : resolved) {
    for (const auto& [name, value] : m.scalars()) {
      (m.metrics.count(name) ? metric_names : extra_names).insert(name);
    }
  }
  std::vector<std::string> order;
  if (metric_names.count(std::string(kTagLoss))) order.emplace_back(kTagLoss);
  for (const std::string& name : metric_names) {
    if (name != kTagLoss) order.push_back(name);
  }
  for (const ExtraChart& e : kExtraCharts) {
    if (extra_names.count(std::string(e.tag)) && !metric_names.count(std::string(e.tag))) order.emplace_back(e.tag);
  }
  return order;
}

}  // namespace

std::string render_chart_svg(const Chart& chart, int width, int height) {
  PAX_CHECK(width >= 120 && height >= 80, "render_chart_svg: the chart '", chart.title,
            "' needs width >= 120 and height >= 80, got ", width, "x", height);
  constexpr double kLeft = 62, kRight = 14, kTop = 34, kBottom = 38;
  const double pw = width - kLeft - kRight, ph = height - kTop - kBottom;

  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const ChartSeries& s : chart.series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  const bool empty = !(x_lo <= x_hi);
  const Axis xa = empty ? Axis{} : nice_axis(x_lo, x_hi, 6);
  const Axis ya = empty ? Axis{} : nice_axis(y_lo, y_hi, 5);
  auto px = [&](double x) { return kLeft + (x - xa.lo) / (xa.hi - xa.lo) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - ya.lo) / (ya.hi - ya.lo) * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\" role=\"img\" aria-label=\"{2}\">\n"
      "<title>{2}</title>\n<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"{3}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{2}</text>\n",
      width, height, escape(chart.title), kLeft);

  // Legend on the title's line, one swatch per series.
  double lx = kLeft + 9.0 * double(chart.title.size()) + 24;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    std::string_view color = kPalette[i % std::size(kPalette)];
    svg += fmt::format(
        "<g class=\"legend\"><line x1=\"{0:.1f}\" y1=\"12\" x2=\"{1:.1f}\" y2=\"12\" stroke=\"{2}\" "
        "stroke-width=\"2.5\"/><text x=\"{3:.1f}\" y=\"16\">{4}</text></g>\n",
        lx, lx + 16, color, lx + 20, escape(chart.series[i].name));
    lx += 20 + 6.5 * double(chart.series[i].name.size()) + 16;
  }

  // Grid, tick labels and axis labels.
  svg += "<g class=\"axes\" stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  if (!empty) {
    for (int i = 0; i < ya.ticks(); ++i) {
      double y = py(ya.tick(i));
      svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", kLeft, y, kLeft + pw, y);
    }
    for (int i = 0; i < xa.ticks(); ++i) {
      double x = px(xa.tick(i));
      svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>\n", x, kTop, x, kTop + ph);
    }
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#888888\"/>\n",
                     kLeft, kTop, pw, ph);
  svg += "</g>\n<g class=\"ticks\" fill=\"#333333\">\n";
  if (!empty) {
    std::vector<std::string> yl = tick_labels(ya), xl = tick_labels(xa);
    for (int i = 0; i < ya.ticks(); ++i) {
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 5,
                         py(ya.tick(i)) + 4, yl[i]);
    }
    for (int i = 0; i < xa.ticks(); ++i) {
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", px(xa.tick(i)),
                         kTop + ph + 15, xl[i]);
    }
  } else {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">no data</text>\n", kLeft + pw / 2,
                       kTop + ph / 2);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step</text>\n", kLeft + pw / 2,
                     double(height) - 6);
  if (!chart.y_label.empty()) {
    svg += fmt::format(
        "<text x=\"12\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {0:.1f})\">{1}</text>\n",
        kTop + ph / 2, escape(chart.y_label));
  }
  svg += "</g>\n";

  // One path per series; a non-finite value starts a new sub-path. Sparse
  // series also get markers whose <title> shows the value on hover.
  for (size_t i = 0; i < chart.series.size() && !empty; ++i) {
    const ChartSeries& s = chart.series[i];
    std::string_view color = kPalette[i % std::size(kPalette)];
    std::string d;
    bool pen_down = false;
    for (auto [x, y] : decimate(s.points, xa, pw)) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f} {:.1f} ", pen_down ? "L" : "M", px(x), py(y));
      pen_down = true;
    }
    svg += fmt::format(
        "<path class=\"series\" data-series=\"{}\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"1.6\" stroke-linejoin=\"round\"/>\n",
        escape(s.name), d, color);
    if (s.points.size() <= 60) {
      for (auto [x, y] : s.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        svg += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"><title>{} step {}: {}</title></circle>\n", px(x),
            py(y), color, escape(s.name), format_value(x), format_value(y));
      }
    }
  }
  svg += "</svg>\n";
  return svg;
}

std::vector<StepMetrics> resolve_history(const std::vector<StepMetrics>& history) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<StepMetrics>> by_split;
  for (const StepMetrics& m : history) {
    auto [it, inserted] = by_split.try_emplace(m.split);
    if (inserted) order.push_back(m.split);
    std::vector<StepMetrics>& kept = it->second;  // strictly increasing steps
    while (!kept.empty() && kept.back().step >= m.step) kept.pop_back();
    kept.push_back(m);
  }
  std::stable_partition(order.begin(), order.end(), [](const std::string& s) { return s == kTrainSplit; });
  std::vector<StepMetrics> out;
  for (const std::string& split : order) {
    for (StepMetrics& m : by_split[split]) out.push_back(std::move(m));
  }
  return out;
}

std::vector<Chart> report_charts(const std::vector<StepMetrics>& history) {
  const std::vector<StepMetrics> resolved = resolve_history(history);
  std::vector<Chart> charts;
  for (const std::string& name : chart_order(resolved)) {
    const ExtraChart* extra = extra_chart(name);
    Chart chart{extra ? std::string(extra->title) : name, extra ? std::string(extra->y_label) : "", {}};
    const double scale = extra ? extra->scale : 1;
    for (const StepMetrics& m : resolved) {
      for (const auto& [tag, value] : m.scalars()) {
        if (tag != name) continue;
        if (chart.series.empty() || chart.series.back().name != m.split) chart.series.push_back({m.split, {}});
        chart.series.back().points.emplace_back(double(m.step), value * scale);
      }
    }
    charts.push_back(std::move(chart));
  }
  return charts;
}

std::string render_report_html(const std::vector<StepMetrics>& history, const std::string& title) {
  const std::vector<StepMetrics> resolved = resolve_history(history);
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>{0}</title>\n<style>\n"
      "body {{ font-family: sans-serif; margin: 16px; color: #222222; }}\n"
      "table {{ border-collapse: collapse; margin: 8px 0 16px 0; }}\n"
      "th, td {{ border: 1px solid #cccccc; padding: 3px 8px; text-align: right; }}\n"
      "th:first-child, td:first-child {{ text-align: left; }}\n"
      "figure {{ display: inline-block; margin: 6px; border: 1px solid #dddddd; }}\n"
      "</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
      escape(title));
  if (resolved.empty()) {
    html += "<p>No summaries yet.</p>\n";
  } else {
    double t0 = INFINITY, t1 = -INFINITY;
    int64_t s0 = resolved.front().step, s1 = s0;
    for (const StepMetrics& m : resolved) {
      if (std::isfinite(m.wall_time) && m.wall_time > 0) t0 = std::min(t0, m.wall_time), t1 = std::max(t1, m.wall_time);
      s0 = std::min(s0, m.step), s1 = std::max(s1, m.step);
    }
    html += fmt::format("<p>{} summary steps, steps {} to {}", resolved.size(), s0, s1);
    if (t0 <= t1) html += fmt::format(", from {} to {}", local_time(t0), local_time(t1));
    html += ".</p>\n";

    // The latest values of every split, one row each.
    const std::vector<std::string> columns = chart_order(resolved);
    html += "<table>\n<tr><th>split</th><th>step</th>";
    for (const std::string& c : columns) {
      const ExtraChart* e = extra_chart(c);
      html +=
          "<th>" + escape(e ? (e->scale == 100 ? std::string(e->title) + " (%)" : std::string(e->title)) : c) + "</th>";
    }
    html += "</tr>\n";
    for (size_t i = 0; i < resolved.size(); ++i) {
      if (i + 1 < resolved.size() && resolved[i + 1].split == resolved[i].split) continue;
      const StepMetrics& m = resolved[i];
      html += fmt::format("<tr><td>{}</td><td>{}</td>", escape(m.split), m.step);
      const auto scalars = m.scalars();
      for (const std::string& c : columns) {
        auto it = std::find_if(scalars.begin(), scalars.end(), [&](const auto& p) { return p.first == c; });
        const ExtraChart* e = extra_chart(c);
        html +=
            "<td>" + (it == scalars.end() ? std::string() : format_value(it->second * (e ? e->scale : 1))) + "</td>";
      }
      html += "</tr>\n";
    }
    html += "</table>\n";
  }
  html += "<div class=\"charts\">\n";
  for (const Chart& chart : report_charts(resolved)) html += "<figure>\n" + render_chart_svg(chart) + "</figure>\n";
  html += "</div>\n<p><small>Written from metrics.jsonl";
  if (!resolved.empty()) html += fmt::format(" at {}", local_time(double(std::time(nullptr))));
  html += ".</small></p>\n</body>\n</html>\n";
  return html;
}

void write_report_file(const std::string& path, const std::vector<StepMetrics>& history, const std::string& title) {
  // A directory or a dangling symlink in the page's place, or a directory
  // that cannot be written, is one error naming it, before anything is made.
  fs::ensure_writable_file(path, "report.html");
  const std::string html = render_report_html(history, title);
  const std::string tmp = path + ".tmp";
  // On any failure the temporary file goes, and the error says why.
  auto fail = [&](const std::string& what, const std::string& why) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    PAX_FAIL("write_report_file: ", what, " failed: ", why);
  };
  errno = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("creating '" + tmp + "'", std::strerror(errno ? errno : EIO));
    out.write(html.data(), std::streamsize(html.size()));
    out.close();
    if (!out) fail("writing '" + tmp + "'", std::strerror(errno ? errno : EIO));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("renaming '" + tmp + "' to '" + path + "'", ec.message());
}

}  // namespace pax::train

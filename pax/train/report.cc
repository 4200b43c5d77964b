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
  constexpr double kLeft = 62, kRight = 14, kBottom = 38;
  // The legend follows the title and wraps onto lines of its own below it
  // (each adds kLegendLine to the chart's height); a name or title wider
  // than the chart is cut with an ellipsis, its whole text in a <title>.
  // Widths are estimated per character (11 px sans for the legend, 13 px
  // bold for the title).
  constexpr double kLegendChar = 6.8, kTitleChar = 8.6, kLegendLine = 14;
  const double right = width - kRight;
  auto fit = [](const std::string& text, double room, double char_width) {
    size_t n = size_t(std::max(1.0, std::floor(room / char_width)));
    if (text.size() <= n) return text;
    n = n > 1 ? n - 1 : 1;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
    return text.substr(0, n) + "\u2026";
  };
  const std::string title = fit(chart.title, right - kLeft, kTitleChar);
  std::string legend;
  double lx = kLeft + kTitleChar * double(title.size()) + 24, ly = 16;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const std::string& name = chart.series[i].name;
    const std::string shown = fit(name, right - kLeft - 20, kLegendChar);
    const double w = 20 + kLegendChar * double(shown.size());
    if (lx + w > right) lx = kLeft, ly += kLegendLine;
    legend += fmt::format(
        "<g class=\"legend\"><title>{5}</title><line x1=\"{0:.1f}\" y1=\"{6:.1f}\" x2=\"{1:.1f}\" y2=\"{6:.1f}\" "
        "stroke=\"{2}\" stroke-width=\"2.5\"/><text x=\"{3:.1f}\" y=\"{7:.1f}\">{4}</text></g>\n",
        lx, lx + 16, kPalette[i % std::size(kPalette)], lx + 20, escape(shown), escape(name), ly - 4, ly);
    lx += w + 16;
  }
  const double kTop = 34 + (ly - 16);
  height += int(ly - 16);
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
      "<text x=\"{3}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{4}</text>\n",
      width, height, escape(chart.title), kLeft, escape(title));
  svg += legend;

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

std::optional<DecodedSamples> latest_decoded_samples(const std::string& decode_dir, size_t max_bytes) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  if (decode_dir.empty() || !stdfs::is_directory(decode_dir, ec)) return std::nullopt;
  std::optional<DecodedSamples> best;
  constexpr std::string_view kPrefix = "samples_step_", kSuffix = ".txt";
  for (stdfs::directory_iterator it(decode_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix))
      continue;
    const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const int64_t step = std::stoll(digits);
    if (!best || step > best->step) best = DecodedSamples{step, it->path().string(), ""};
  }
  if (!best) return std::nullopt;
  std::ifstream in(best->file, std::ios::binary);
  if (!in) return std::nullopt;  // removed since the listing: no samples this time
  best->text.resize(max_bytes + 1);
  in.read(best->text.data(), std::streamsize(best->text.size()));
  best->text.resize(size_t(in.gcount()));
  if (best->text.size() > max_bytes) {
    const size_t cut = best->text.rfind('\n', max_bytes);
    best->text.resize(cut == std::string::npos ? max_bytes : cut + 1);
    best->text += "...\n";
  }
  return best;
}

namespace {

// The latest values of every split: a row per quantity, a column per split
// (splits are few; quantities can be many, so they run down the page).
std::string latest_values_table(const std::vector<StepMetrics>& resolved) {
  std::vector<const StepMetrics*> latest;  // one per split, in the history's split order
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (i + 1 == resolved.size() || resolved[i + 1].split != resolved[i].split) latest.push_back(&resolved[i]);
  }
  std::string html = "<table class=\"values\">\n<tr><th></th>";
  for (const StepMetrics* m : latest) html += "<th>" + escape(m->split) + "</th>";
  html += "</tr>\n<tr><td>step</td>";
  for (const StepMetrics* m : latest) html += fmt::format("<td>{}</td>", m->step);
  html += "</tr>\n";
  for (const std::string& c : chart_order(resolved)) {
    const ExtraChart* e = extra_chart(c);
    html += "<tr><td>" + escape(e ? (e->scale == 100 ? std::string(e->title) + " (%)" : std::string(e->title)) : c) +
            "</td>";
    for (const StepMetrics* m : latest) {
      const auto scalars = m->scalars();
      auto it = std::find_if(scalars.begin(), scalars.end(), [&](const auto& p) { return p.first == c; });
      html += "<td>" + (it == scalars.end() ? std::string() : format_value(it->second * (e ? e->scale : 1))) + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

std::string machine_section(const ReportContext& context) {
  if (context.machine.empty()) return "";
  std::string html = "<h2>Machine and build</h2>\n<table class=\"pairs\">\n";
  for (const auto& [what, value] : context.machine)
    html += "<tr><th>" + escape(what) + "</th><td>" + escape(value) + "</td></tr>\n";
  return html + "</table>\n";
}

std::string config_section(const ReportContext& context) {
  if (context.config_json.empty()) return "";
  return "<h2>Configuration</h2>\n<details><summary>the resolved configuration (config.json)</summary>\n<pre>" +
         escape(context.config_json) + "</pre>\n</details>\n";
}

// Open when short; a large model's table starts collapsed under its totals.
std::string parameters_section(const ReportContext& context) {
  if (context.parameters.empty()) return "";
  int64_t total = 0;
  for (const ReportParameter& p : context.parameters) total += p.count;
  std::string html = fmt::format("<h2>Parameters</h2>\n<details{}><summary>{} arrays, {} parameters</summary>\n",
                                 context.parameters.size() <= 40 ? " open" : "", context.parameters.size(), total);
  html +=
      "<table class=\"params\">\n<tr><th>name</th><th>shape</th><th>dtype</th><th>count</th><th>sharding</th></tr>\n";
  for (const ReportParameter& p : context.parameters) {
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", escape(p.name),
                        escape(p.shape), escape(p.dtype), p.count, escape(p.sharding));
  }
  return html + "</table>\n</details>\n";
}

std::string samples_section(const ReportContext& context) {
  std::optional<DecodedSamples> samples = latest_decoded_samples(context.decode_dir);
  if (!samples) return "";
  return fmt::format("<h2>Decoded samples</h2>\n<p>Step {} ({}).</p>\n<pre class=\"samples\">{}</pre>\n", samples->step,
                     escape(std::filesystem::path(samples->file).filename().string()), escape(samples->text));
}

}  // namespace

std::string render_report_html(const std::vector<StepMetrics>& history, const std::string& title,
                               const ReportContext& context) {
  const std::vector<StepMetrics> resolved = resolve_history(history);
  // Everything wraps to the window: cells break long names, <pre> wraps
  // lines, charts shrink below their natural width.
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>{0}</title>\n<style>\n"
      "body {{ font-family: sans-serif; margin: 16px; color: #222222; }}\n"
      "h2 {{ font-size: 1.2em; margin: 20px 0 6px 0; }}\n"
      "table {{ border-collapse: collapse; margin: 8px 0 16px 0; max-width: 100%; }}\n"
      "th, td {{ border: 1px solid #cccccc; padding: 3px 8px; text-align: right; overflow-wrap: anywhere; }}\n"
      "th:first-child, td:first-child {{ text-align: left; }}\n"
      "table.pairs th, table.pairs td {{ text-align: left; }}\n"
      "table.params td:first-child {{ font-family: monospace; }}\n"
      "pre {{ white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6; padding: 8px; margin: 6px 0; }}\n"
      "details summary {{ cursor: pointer; }}\n"
      "figure {{ display: inline-block; vertical-align: top; margin: 6px; border: 1px solid #dddddd; max-width: "
      "calc(100% - 14px); }}\n"
      "figure svg {{ max-width: 100%; height: auto; display: block; }}\n"
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
    html += ".</p>\n" + latest_values_table(resolved);
  }
  html += "<div class=\"charts\">\n";
  for (const Chart& chart : report_charts(resolved)) html += "<figure>\n" + render_chart_svg(chart) + "</figure>\n";
  html += "</div>\n";
  html += samples_section(context) + parameters_section(context) + config_section(context) + machine_section(context);
  html += "<p><small>Written from metrics.jsonl";
  if (!resolved.empty()) html += fmt::format(" at {}", local_time(double(std::time(nullptr))));
  html += ".</small></p>\n</body>\n</html>\n";
  return html;
}

void write_report_file(const std::string& path, const std::vector<StepMetrics>& history, const std::string& title,
                       const ReportContext& context) {
  // A directory or a dangling symlink in the page's place, or a directory
  // that cannot be written, is one error naming it, before anything is made.
  fs::ensure_writable_file(path, "report.html");
  const std::string html = render_report_html(history, title, context);
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

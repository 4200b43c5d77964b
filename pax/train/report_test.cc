// Tests for report.html: restart resolution of the history, the charts and
// their series, SVG axes and tick labels on hand ranges, gaps and spikes, and
// the page's structure (an <svg> per chart, balanced tags, no scripts).
#include "pax/train/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "pax/testing/testing.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

StepMetrics record(const std::string& split, int64_t step, double loss) {
  StepMetrics m;
  m.split = split;
  m.step = step;
  m.metrics = {{"loss", loss}};
  m.wall_time = 1700000000 + double(step);
  return m;
}

std::vector<int64_t> steps_of(const std::vector<StepMetrics>& h, const std::string& split) {
  std::vector<int64_t> out;
  for (const StepMetrics& m : h) {
    if (m.split == split) out.push_back(m.step);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Whether every element is closed in order (self-closing tags, <!DOCTYPE>
// and comments aside); names the first problem in `*problem`.
bool balanced_tags(const std::string& html, std::string* problem) {
  std::vector<std::string> open;
  size_t at = 0;
  while ((at = html.find('<', at)) != std::string::npos) {
    const size_t end = html.find('>', at);
    if (end == std::string::npos) return *problem = "unterminated tag", false;
    std::string tag = html.substr(at + 1, end - at - 1);
    at = end + 1;
    if (tag.empty() || tag[0] == '!') continue;
    if (tag.back() == '/') continue;
    const bool closing = tag[0] == '/';
    std::string name = tag.substr(closing ? 1 : 0);
    name = name.substr(0, name.find_first_of(" \n\t"));
    if (!closing) {
      open.push_back(name);
    } else if (open.empty() || open.back() != name) {
      return *problem = "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">"), false;
    } else {
      open.pop_back();
    }
  }
  if (!open.empty()) return *problem = "<" + open.back() + "> never closed", false;
  return true;
}

// The numbers of a path's "M x y L x y ..." data, as (command, x, y).
struct PathPoint {
  char cmd;
  double x, y;
};
std::vector<PathPoint> path_points(const std::string& svg, const std::string& series) {
  const std::string key = "data-series=\"" + series + "\" d=\"";
  const size_t at = svg.find(key);
  if (at == std::string::npos) return {};
  const std::string d = svg.substr(at + key.size(), svg.find('"', at + key.size()) - at - key.size());
  std::vector<PathPoint> out;
  std::istringstream in(d);
  std::string token;
  while (in >> token) {
    PathPoint p{token[0], std::stod(token.substr(1)), 0};
    in >> p.y;
    out.push_back(p);
  }
  return out;
}

// --- history ---

TEST(ReportHistory, RestartsReplaceReplayedSteps) {
  // Run 1 reaches step 40; run 2 resumes from the step-20 checkpoint and
  // summarises 30 again; eval splits are resolved on their own.
  const std::vector<StepMetrics> h = {
      record("eval_test_a", 10, 5), record("train", 10, 4),       record("train", 20, 3),   record("train", 30, 2.5),
      record("train", 40, 2),       record("eval_test_a", 40, 3), record("train", 30, 2.4), record("train", 50, 1.5)};
  const std::vector<StepMetrics> r = resolve_history(h);
  EXPECT_EQ(steps_of(r, "train"), (std::vector<int64_t>{10, 20, 30, 50}));
  EXPECT_EQ(steps_of(r, "eval_test_a"), (std::vector<int64_t>{10, 40}));
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0].split, "train");  // train first, whatever came first in the file
  EXPECT_EQ(r[2].metrics.at("loss"), 2.4);
  // A repeated step replaces the earlier record.
  const std::vector<StepMetrics> twice = resolve_history({record("train", 5, 1), record("train", 5, 0.5)});
  ASSERT_EQ(twice.size(), 1u);
  EXPECT_EQ(twice[0].metrics.at("loss"), 0.5);
  EXPECT_TRUE(resolve_history({}).empty());
}

// --- charts ---

// A report that cannot be written says why and leaves no temporary file.
TEST(ReportFile, AFailedWriteSaysWhyAndCleansUp) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pax_report_fail_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "report.html" / "child");  // a directory in the way
  const std::vector<StepMetrics> history = {StepMetrics{.step = 1, .metrics = {{"loss", 1.0}}}};
  EXPECT_PAX_ERROR(
      write_report_file((dir / "report.html").string(), history, "t"),
      "report.html: cannot write to '" + (dir / "report.html").string() + "': it is a directory, not a regular file");
  EXPECT_FALSE(std::filesystem::exists(dir / "report.html.tmp"));
  std::filesystem::remove_all(dir);
}

// A directory that cannot hold the page is named with why, and nothing is
// made through a dangling symlink.
TEST(ReportFile, AnUnusableDirectoryIsNamed) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pax_report_dir_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<StepMetrics> history = {StepMetrics{.step = 1, .metrics = {{"loss", 1.0}}}};
  std::ofstream((dir / "file").string()) << "x";
  EXPECT_PAX_ERROR(
      write_report_file((dir / "file/report.html").string(), history, "t"),
      "report.html: cannot write to '" + (dir / "file").string() + "': it is a regular file, not a directory");
  std::filesystem::create_symlink(dir / "nowhere", dir / "link");
  EXPECT_PAX_ERROR(write_report_file((dir / "link/report.html").string(), history, "t"),
                   "cannot write to '" + (dir / "link").string() + "': it is a dangling symlink to '" +
                       (dir / "nowhere").string() + "'");
  EXPECT_FALSE(std::filesystem::exists(dir / "nowhere"));
  std::filesystem::remove_all(dir);
}

TEST(ReportCharts, OneChartPerQuantityWithASeriesPerSplit) {
  std::vector<StepMetrics> h;
  for (int64_t step : {100, 200}) {
    StepMetrics t = record("train", step, 3.0 / double(step));
    t.metrics["log_pplx"] = 2.0;
    t.learning_rate = 1e-3;
    t.grad_norm = 0.5;
    t.steps_per_sec = 4;
    t.tokens_per_sec = 8192;
    t.mfu = 0.25;
    h.push_back(t);
    StepMetrics e = record("eval_test_kjv", step, 4.0 / double(step));
    e.metrics["accuracy"] = 0.5;
    h.push_back(e);
  }
  const std::vector<Chart> charts = report_charts(h);
  std::vector<std::string> titles;
  for (const Chart& c : charts) titles.push_back(c.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"loss", "accuracy", "log_pplx", "learning rate", "gradient norm",
                                              "steps/s", "tokens/s", "MFU"}));
  // loss: train and eval.
  ASSERT_EQ(charts[0].series.size(), 2u);
  EXPECT_EQ(charts[0].series[0].name, "train");
  EXPECT_EQ(charts[0].series[1].name, "eval_test_kjv");
  EXPECT_EQ(charts[0].series[0].points, (std::vector<std::pair<double, double>>{{100, 0.03}, {200, 0.015}}));
  EXPECT_EQ(charts[0].series[1].points, (std::vector<std::pair<double, double>>{{100, 0.04}, {200, 0.02}}));
  ASSERT_EQ(charts[1].series.size(), 1u);
  EXPECT_EQ(charts[1].series[0].name, "eval_test_kjv");
  // MFU in percent.
  EXPECT_EQ(charts[7].y_label, "%");
  EXPECT_EQ(charts[7].series.at(0).points, (std::vector<std::pair<double, double>>{{100, 25}, {200, 25}}));
  EXPECT_TRUE(report_charts({}).empty());
}

TEST(ReportSvg, AxesTicksAndSeriesOnHandRanges) {
  Chart c{"loss", "", {{"train", {{0, 2.0}, {500, 2.5}, {1000, 3.0}}}, {"eval_test_x", {{1000, 2.2}}}}};
  const std::string svg = render_chart_svg(c, 560, 280);
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  std::string problem;
  EXPECT_TRUE(balanced_tags(svg, &problem)) << problem;
  // x: 0..1000 in steps of 200; y: 2..3 in steps of 0.2.
  for (const char* label : {">0<", ">200<", ">400<", ">1000<", ">2.0<", ">2.2<", ">2.8<", ">3.0<", ">step<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }
  EXPECT_EQ(svg.find(">1200<"), std::string::npos);
  // The plot spans x 62..546 and y 34..242 (560x280 less the margins).
  const std::vector<PathPoint> train = path_points(svg, "train");
  ASSERT_EQ(train.size(), 3u);
  EXPECT_EQ(train[0].cmd, 'M');
  EXPECT_EQ(train[1].cmd, 'L');
  EXPECT_NEAR(train[0].x, 62, 0.05);
  EXPECT_NEAR(train[0].y, 242, 0.05);
  EXPECT_NEAR(train[1].x, 304, 0.05);
  EXPECT_NEAR(train[1].y, 138, 0.05);
  EXPECT_NEAR(train[2].x, 546, 0.05);
  EXPECT_NEAR(train[2].y, 34, 0.05);
  ASSERT_EQ(path_points(svg, "eval_test_x").size(), 1u);
  // Legend and markers (few points: one circle each, with a hover title).
  EXPECT_NE(svg.find(">eval_test_x</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 4u);
  EXPECT_NE(svg.find("<title>train step 500: 2.5</title>"), std::string::npos);
}

TEST(ReportSvg, LargeAndTinyValuesGetCompactLabels) {
  const std::string big = render_chart_svg({"tokens/s", "", {{"train", {{0, 10000}, {50000, 50000}}}}});
  EXPECT_NE(big.find(">50k<"), std::string::npos) << big;
  EXPECT_NE(big.find(">10k<"), std::string::npos);
  const std::string millions = render_chart_svg({"x", "", {{"train", {{0, 1.5e6}, {1, 2.5e6}}}}});
  EXPECT_NE(millions.find(">2.0M<"), std::string::npos) << millions;
  const std::string tiny = render_chart_svg({"learning rate", "", {{"train", {{0, 0}, {10, 1e-4}}}}});
  EXPECT_NE(tiny.find(">1.0e-04<"), std::string::npos) << tiny;
  EXPECT_NE(tiny.find(">2.0e-05<"), std::string::npos);
  EXPECT_NE(tiny.find(">0<"), std::string::npos);
  // A constant series still gets a range around its value.
  const std::string flat = render_chart_svg({"x", "", {{"train", {{0, 5}, {10, 5}}}}});
  EXPECT_NE(flat.find(">5.0<"), std::string::npos) << flat;
}

TEST(ReportSvg, NonFiniteValuesLeaveGaps) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string svg = render_chart_svg(
      {"loss",
       "",
       {{"train", {{0, 1}, {1, 2}, {2, nan}, {3, 3}, {4, std::numeric_limits<double>::infinity()}, {5, 2}}}}});
  const std::vector<PathPoint> p = path_points(svg, "train");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(std::string({p[0].cmd, p[1].cmd, p[2].cmd, p[3].cmd}), "MLMM");
  const std::string empty = render_chart_svg({"loss", "", {{"train", {{0, nan}}}}});
  EXPECT_NE(empty.find("no data"), std::string::npos);
}

TEST(ReportSvg, LongSeriesAreDecimatedKeepingSpikes) {
  ChartSeries s{"train", {}};
  for (int i = 0; i < 20000; ++i) s.points.emplace_back(i, i == 12345 ? 1.0 : 0.5 + 0.001 * (i % 7));
  s.points.emplace_back(20000, 0.0);
  const std::string svg = render_chart_svg({"loss", "", {s}});
  const std::vector<PathPoint> p = path_points(svg, "train");
  EXPECT_LT(p.size(), 4u * 500);
  EXPECT_GT(p.size(), 484u);
  double top = 1e9, bottom = -1e9;
  for (const PathPoint& q : p) top = std::min(top, q.y), bottom = std::max(bottom, q.y);
  EXPECT_NEAR(top, 34, 0.05);            // the spike at 1.0, the axis top
  EXPECT_NEAR(bottom, 242, 0.05);        // the last point at 0.0, the axis bottom
  EXPECT_EQ(count(svg, "<circle"), 0u);  // no markers on long series
}

TEST(ReportSvg, Errors) { EXPECT_PAX_ERROR(render_chart_svg({"loss", "", {}}, 50, 300), "needs width >= 120"); }

// --- the page ---

std::vector<StepMetrics> sample_history() {
  std::vector<StepMetrics> h;
  for (int64_t step = 0; step <= 1000; step += 100) {
    StepMetrics t = record("train", step, 5.0 / (1 + double(step) / 100));
    t.metrics["log_pplx"] = t.metrics["loss"];
    t.learning_rate = 1e-3 * double(step) / 1000;
    t.grad_norm = 1.0;
    t.steps_per_sec = 3;
    t.tokens_per_sec = 12000;
    t.mfu = 0.4;
    h.push_back(t);
    if (step % 500 == 0) h.push_back(record("eval_test_<kjv>", step, 6.0 / (1 + double(step) / 100)));
  }
  return h;
}

TEST(ReportHtml, OneSvgPerChartWellFormedAndScriptFree) {
  const std::vector<StepMetrics> h = sample_history();
  const std::string html = render_report_html(h, "lm & friends");
  const size_t charts = report_charts(h).size();
  EXPECT_EQ(charts, 7u);  // loss, log_pplx, lr, grad norm, steps/s, tokens/s, MFU
  EXPECT_EQ(count(html, "<svg"), charts);
  EXPECT_EQ(count(html, "</svg>"), charts);
  std::string problem;
  EXPECT_TRUE(balanced_tags(html, &problem)) << problem;
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://", html.find("<body")), html.find("http://www.w3.org/2000/svg"));  // no links out
  EXPECT_NE(html.find("<h1>lm &amp; friends</h1>"), std::string::npos);
  // Names are escaped; the eval series appears in the loss chart.
  EXPECT_EQ(html.find("eval_test_<kjv>"), std::string::npos);
  EXPECT_NE(html.find("data-series=\"eval_test_&lt;kjv&gt;\""), std::string::npos);
  // The latest values table: a column per split, a row per quantity, MFU in percent.
  EXPECT_NE(html.find("<tr><th></th><th>train</th><th>eval_test_&lt;kjv&gt;</th></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>step</td><td>1000</td><td>1000</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>loss</td><td>0.45455</td><td>0.54545</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>MFU (%)</td><td>40</td><td></td></tr>"), std::string::npos);
  EXPECT_NE(html.find("14 summary steps, steps 0 to 1000"), std::string::npos);
  for (const char* title : {">loss</text>", ">log_pplx</text>", ">learning rate</text>", ">gradient norm</text>",
                            ">steps/s</text>", ">tokens/s</text>", ">MFU</text>"}) {
    EXPECT_NE(html.find(title), std::string::npos) << title;
  }
}

// A file of `text` at `path`.
void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(ReportHtml, TheLatestDecodedSamplesAreShown) {
  const std::string dir = (fs::temp_directory_path() / ("pax_report_samples_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  EXPECT_FALSE(latest_decoded_samples(dir));  // missing directory: no samples
  fs::create_directories(dir);
  EXPECT_FALSE(latest_decoded_samples(dir));
  write_text(dir + "/samples_step_00000020.txt", "old <one>\n");
  write_text(dir + "/samples_step_00000100.txt", "new <one>\nsecond line\n");
  write_text(dir + "/samples_step_00000090.txt", "older\n");
  write_text(dir + "/samples_step_x.txt", "not a step\n");
  write_text(dir + "/notes_step_00000500.txt", "not samples\n");
  std::optional<DecodedSamples> s = latest_decoded_samples(dir);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 100);
  EXPECT_EQ(s->text, "new <one>\nsecond line\n");
  // A long file is cut at a line end.
  s = latest_decoded_samples(dir, 12);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->text, "new <one>\n...\n");
  const std::string html = render_report_html(sample_history(), "t", {.decode_dir = dir});
  EXPECT_NE(html.find("<h2>Decoded samples</h2>\n<p>Step 100 (samples_step_00000100.txt).</p>"), std::string::npos);
  EXPECT_NE(html.find("new &lt;one&gt;\nsecond line"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReportHtml, MachineConfigurationAndParameterSections) {
  ReportContext context;
  context.machine = {{"CPU", "Xeon <8480>"}, {"MFU peak", "f32 peak 1 TFLOP/s"}};
  context.config_json = "{\n  \"name\": \"a<b\"\n}\n";
  context.parameters = {{"lm/ff/w", "(64, 256)", "f32", 16384, "dim 1 in 2 blocks over data"},
                        {"lm/ff/b", "(256,)", "f32", 256, "replicated"}};
  const std::string html = render_report_html(sample_history(), "t", context);
  std::string problem;
  EXPECT_TRUE(balanced_tags(html, &problem)) << problem;
  EXPECT_NE(html.find("<tr><th>CPU</th><td>Xeon &lt;8480&gt;</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>MFU peak</th><td>f32 peak 1 TFLOP/s</td></tr>"), std::string::npos);
  // The configuration is collapsed and escaped.
  EXPECT_NE(html.find("<details><summary>the resolved configuration (config.json)</summary>\n<pre>{\n  "
                      "&quot;name&quot;: &quot;a&lt;b&quot;\n}"),
            std::string::npos);
  EXPECT_NE(html.find("<details open><summary>2 arrays, 16640 parameters</summary>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>lm/ff/w</td><td>(64, 256)</td><td>f32</td><td>16384</td><td>dim 1 in 2 blocks over "
                      "data</td></tr>"),
            std::string::npos);
  // A long table starts collapsed; no context: no sections.
  context.parameters.resize(41, context.parameters[1]);
  EXPECT_NE(render_report_html({}, "t", context).find("<details><summary>41 arrays"), std::string::npos);
  const std::string bare = render_report_html(sample_history(), "t");
  for (const char* section : {"<h2>Machine", "<h2>Configuration", "<h2>Parameters", "<h2>Decoded"})
    EXPECT_EQ(bare.find(section), std::string::npos) << section;
}

TEST(ReportHtml, EmptyHistory) {
  const std::string html = render_report_html({}, "empty");
  EXPECT_NE(html.find("No summaries yet"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 0u);
  std::string problem;
  EXPECT_TRUE(balanced_tags(html, &problem)) << problem;
}

TEST(ReportHtml, WriteReportFileReplacesThePage) {
  const std::string dir = (fs::temp_directory_path() / ("pax_report_test_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const std::string path = dir + "/report.html";
  write_report_file(path, {}, "first");
  write_report_file(path, sample_history(), "second");
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("<h1>second</h1>"), std::string::npos);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A missing directory is made; one that cannot be is named.
  write_report_file(dir + "/missing/report.html", {}, "x");
  EXPECT_TRUE(fs::exists(dir + "/missing/report.html"));
  EXPECT_PAX_ERROR(write_report_file(path + "/report.html", {}, "x"),
                   "report.html: cannot write to '" + path + "': it is a regular file, not a directory");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pax::train

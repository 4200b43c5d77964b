// report.html in a real browser: headless Chromium (Debian's chromium,
// installed by scripts/setup.sh) loads a page at 1300 px, and a script added
// to the page reports script errors and every element that reaches past the
// window's right edge (which would make the page scroll sideways). The pages
// are made as wide as runs make them: many metrics and splits with long
// names, a parameter table of a deep model, an unbroken configuration value
// and decoded text without spaces. The harness is checked first on pages
// that must fail it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pax/train/report.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

// The first Chromium on PATH (PAX_CHROMIUM names one elsewhere); "" if none.
std::string find_chromium() {
  if (const char* given = std::getenv("PAX_CHROMIUM"); given && *given) return given;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
    start = end + 1;
  }
  return "";
}

// Runs at load: every element whose box ends right of the window, the
// page's own horizontal overflow, and uncaught script errors, written into
// the DOM between markers for --dump-dom to carry out (the markers are split
// in the source, which the dump also holds).
constexpr const char* kCheckScript = R"(<script>
(function () {
  var problems = [];
  window.addEventListener('error', function (e) { problems.push('script error: ' + e.message); });
  window.addEventListener('load', function () {
    var width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth > width)
      problems.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' px wide in ' + width);
    var all = document.body.getElementsByTagName('*');
    for (var i = 0; i < all.length && problems.length < 20; i++) {
      var right = all[i].getBoundingClientRect().right;
      if (right > width + 0.5)
        problems.push('<' + all[i].tagName.toLowerCase() + '> ends at ' + Math.round(right) + ' px, past ' + width);
    }
    var out = document.createElement('pre');
    out.textContent = 'PAX_CHECK_' + 'BEGIN[' + problems.join('; ') + ']PAX_CHECK_' + 'END';
    document.body.appendChild(out);
  });
})();
</script>
)";

std::string unescape(std::string s) {
  for (auto [from, to] : std::array<std::pair<std::string, std::string>, 4>{
           {{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  }
  return s;
}

class ReportInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/setup.sh installs Debian's chromium)";
    dir_ = fs::temp_directory_path() / ("pax_report_browser_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "profile");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The problems the page shows at 1300 px ("" when none). Fails the test
  // when the check did not run at all.
  std::string problems(const std::string& html) {
    std::string page = html;
    const size_t head = page.find("<head>");
    EXPECT_NE(head, std::string::npos);
    page.insert(head + 6, kCheckScript);  // first, so that it sees every error
    const fs::path file = dir_ / "page.html";
    std::ofstream(file, std::ios::binary) << page;
    const std::string command =
        "timeout 120 '" + chromium_ + "' --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir='" +
        (dir_ / "profile").string() + "' --window-size=1300,900 --virtual-time-budget=5000 --dump-dom 'file://" +
        file.string() + "' 2>'" + (dir_ / "stderr.txt").string() + "'";
    std::string dom;
    if (FILE* pipe = ::popen(command.c_str(), "r")) {
      std::array<char, 65536> buf;
      for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) dom.append(buf.data(), n);
      const int status = ::pclose(pipe);
      EXPECT_EQ(status, 0) << command;
    }
    const size_t begin = dom.find("PAX_CHECK_BEGIN["), end = dom.find("]PAX_CHECK_END");
    if (begin == std::string::npos || end == std::string::npos || end < begin) {
      std::ifstream err(dir_ / "stderr.txt");
      std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
      ADD_FAILURE() << "the page's check did not run; chromium's stderr:\n" << text.substr(0, 4000);
      return "(no result)";
    }
    return unescape(dom.substr(begin + 16, end - begin - 16));
  }

  std::string chromium_;
  fs::path dir_;
};

StepMetrics wide_record(const std::string& split, int64_t step) {
  StepMetrics m;
  m.split = split;
  m.step = step;
  m.wall_time = 1700000000 + double(step);
  for (int i = 0; i < 24; ++i)
    m.metrics["fraction_of_correct_next_step_preds_in_bucket_" + std::to_string(i)] = 1.0 / (1 + double(step) + i);
  m.metrics["loss"] = 12345.678 / (1 + double(step));
  m.learning_rate = 1.23456e-4;
  m.grad_norm = 3.5;
  m.steps_per_sec = 1.5;
  m.tokens_per_sec = 123456789;
  m.mfu = 0.41;
  return m;
}

TEST_F(ReportInChromium, TheHarnessSeesOverflowAndScriptErrors) {
  EXPECT_EQ(problems("<!DOCTYPE html><html><head></head><body><p>fits</p></body></html>"), "");
  EXPECT_NE(problems("<!DOCTYPE html><html><head></head><body><div style=\"width: 2000px\">wide</div></body></html>")
                .find("<div> ends at"),
            std::string::npos);
  EXPECT_NE(problems("<!DOCTYPE html><html><head><script>undefined_function();</script></head><body></body></html>")
                .find("script error"),
            std::string::npos);
}

TEST_F(ReportInChromium, AWideRunsReportFitsA1300PxWindow) {
  std::vector<StepMetrics> history;
  for (int64_t step = 0; step <= 2000; step += 100) {
    history.push_back(wide_record("train", step));
    if (step % 500 == 0) {
      history.push_back(wide_record("eval_test_c4_en_validation_split_with_a_long_name", step));
      history.push_back(wide_record("eval_train_c4_en_train_split_sample", step));
    }
  }
  ReportContext context;
  context.machine = {
      {"CPU", "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143), x86_64; 56 cores, 112 logical CPUs"},
      {"devices", "cpu:0    " + std::string(300, 'x') + "\ncuda     no CUDA device"},
      {"MFU peak", "f32 peak 485.4 GFLOP/s (2 cores x 3.79 GHz (timed) x 64 FLOP/cycle, AMX-BF16 tiles)"}};
  context.config_json = "{\n  \"train_input\": {\n    \"files\": [\"" + std::string(3000, 'f') + "\"]\n  }\n}\n";
  for (int layer = 0; layer < 48; ++layer) {
    for (const char* v : {"self_attention/combined_qkv/w", "self_attention/post/w", "ff_layer/ffn_layer1/linear/w",
                          "ff_layer/ffn_layer2/linear/w", "ff_layer/layer_norm/scale"}) {
      context.parameters.push_back({"lm/transformer/repeat/sub/x_layers_" + std::to_string(layer) + "/" + v,
                                    "(2048, 3, 16, 128)", "bf16", 12582912,
                                    "dim 0 in 2 blocks over stage, then dim 2 in 8 blocks over mdl,data"});
    }
  }
  context.decode_dir = (dir_ / "decode").string();
  fs::create_directories(context.decode_dir);
  std::ofstream(context.decode_dir + "/samples_step_00002000.txt")
      << "In the beginning " << std::string(2500, 'w') << "\nAnd God said\n";
  const std::string html = render_report_html(history, "c4.C4Spmd1BAdam4Replicas with a long title", context);
  EXPECT_EQ(problems(html), "");
  // With its sections open too (details closed hide their content).
  std::string opened = html;
  for (size_t at = opened.find("<details>"); at != std::string::npos; at = opened.find("<details>", at))
    opened.replace(at, 9, "<details open>");
  EXPECT_EQ(problems(opened), "");
}

}  // namespace
}  // namespace pax::train

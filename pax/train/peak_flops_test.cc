// peak_flops: the measurement, the cache file (written, reused, bad files
// ignored), the overrides and their precedence, mfu. No assertion on timing.
#include "pax/train/peak_flops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pax/testing/testing.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

// A fresh cache directory per test, and PAX_PEAK_FLOPS unset around it.
class PeakFlopsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("pax_peak_flops_") + info->name() + "_" +
                                        std::to_string(std::rand()));
    fs::remove_all(dir_);
    unsetenv("PAX_PEAK_FLOPS");
  }
  void TearDown() override {
    unsetenv("PAX_PEAK_FLOPS");
    fs::remove_all(dir_);
  }
  PeakFlopsOptions options() const {
    PeakFlopsOptions o;
    o.cache_dir = dir_.string();
    o.measure_seconds = 0.0;  // the minimum of ten timed matmuls,
    o.matmul_size = 128;      // small ones
    return o;
  }
  std::string cache_file() const { return (dir_ / "peak_flops.json").string(); }
  std::string read_cache() const {
    std::ifstream in(cache_file());
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write_cache(const std::string& text) const {
    fs::create_directories(dir_);
    std::ofstream(cache_file()) << text;
  }
  fs::path dir_;
};

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

TEST_F(PeakFlopsTest, MeasurementIsPositiveAndFinite) {
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::f32, 0.0, 256)));
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::bf16, 0.0, 256)));
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::f32, 0.0, 1)));
}

TEST_F(PeakFlopsTest, CacheIsWrittenAndReused) {
  const double first = peak_flops(DType::f32, options());
  EXPECT_TRUE(positive_finite(first));
  ASSERT_TRUE(fs::exists(cache_file()));
  const std::string key = peak_flops_cache_key(DType::f32);
  EXPECT_NE(read_cache().find(key), std::string::npos) << read_cache();
  EXPECT_EQ(peak_flops_cache_path(options()), cache_file());

  // A value no measurement gives: returned only when the cache is read.
  write_cache(R"({"entries": {")" + key + R"(": 1234.5}})");
  EXPECT_EQ(peak_flops(DType::f32, options()), 1234.5);

  // Another dtype is another entry; the first one is kept.
  EXPECT_TRUE(positive_finite(peak_flops(DType::bf16, options())));
  EXPECT_NE(read_cache().find(peak_flops_cache_key(DType::bf16)), std::string::npos);
  EXPECT_EQ(peak_flops(DType::f32, options()), 1234.5);

  // use_cache = false measures without touching the file.
  PeakFlopsOptions no_cache = options();
  no_cache.use_cache = false;
  EXPECT_NE(peak_flops(DType::f32, no_cache), 1234.5);
  EXPECT_EQ(peak_flops(DType::f32, options()), 1234.5);
}

TEST_F(PeakFlopsTest, KeyNamesThreadsAndDtype) {
  const std::string key = peak_flops_cache_key(DType::bf16);
  EXPECT_NE(key.find("|threads="), std::string::npos) << key;
  const std::string dtype = std::string("|") + dtype_name(DType::bf16);
  EXPECT_EQ(key.substr(key.size() - dtype.size()), dtype) << key;
  EXPECT_NE(key, peak_flops_cache_key(DType::f32));
}

TEST_F(PeakFlopsTest, BadCacheFilesAreIgnored) {
  const std::string key = peak_flops_cache_key(DType::f32);
  const std::string bad[] = {
      "not json at all {",
      "[1, 2, 3]",
      R"({"entries": 5})",
      R"({"entries": {")" + key + R"(": "fast"}})",
      R"({"entries": {")" + key + R"(": -3.0}})",
      R"({"entries": {")" + key + R"(": 0}})",
      R"({"other": {")" + key + R"(": 1234.5}})",
      "",
  };
  for (const std::string& text : bad) {
    write_cache(text);
    const double v = peak_flops(DType::f32, options());
    EXPECT_TRUE(positive_finite(v)) << text;
    EXPECT_NE(v, 1234.5) << text;
    // Rewritten with a valid entry, which the next call reuses.
    EXPECT_NE(read_cache().find(key), std::string::npos) << text;
    EXPECT_EQ(peak_flops(DType::f32, options()), v) << text;
  }
}

TEST_F(PeakFlopsTest, OverridesWin) {
  const std::string key = peak_flops_cache_key(DType::f32);
  write_cache(R"({"entries": {")" + key + R"(": 1234.5}})");
  setenv("PAX_PEAK_FLOPS", "2.5e11", 1);
  EXPECT_EQ(peak_flops(DType::f32, options()), 2.5e11);
  PeakFlopsOptions o = options();
  o.override_flops = 7e9;
  EXPECT_EQ(peak_flops(DType::f32, o), 7e9);
  EXPECT_EQ(peak_flops(DType::bf16, o), 7e9);
  setenv("PAX_PEAK_FLOPS", "", 1);  // empty: unset
  EXPECT_EQ(peak_flops(DType::f32, options()), 1234.5);

  // No cache file is created when an override answers.
  fs::remove_all(dir_);
  EXPECT_EQ(peak_flops(DType::f32, o), 7e9);
  EXPECT_FALSE(fs::exists(cache_file()));
}

TEST_F(PeakFlopsTest, Errors) {
  EXPECT_PAX_ERROR(peak_flops(DType::f16, options()), "f32 or bf16");
  EXPECT_PAX_ERROR(peak_flops(DType::i32, options()), "f32 or bf16");
  EXPECT_PAX_ERROR(measure_peak_flops(DType::f64), "f32 or bf16");
  EXPECT_PAX_ERROR(measure_peak_flops(DType::f32, -1.0), "seconds");
  EXPECT_PAX_ERROR(measure_peak_flops(DType::f32, 0.0, 0), "size");
  PeakFlopsOptions o = options();
  for (double bad : {0.0, -1e9, double(NAN), double(INFINITY)}) {
    o.override_flops = bad;
    EXPECT_PAX_ERROR(peak_flops(DType::f32, o), "override_flops");
  }
  for (const char* bad : {"fast", "1e9x", "-5", "0", "nan", "inf"}) {
    setenv("PAX_PEAK_FLOPS", bad, 1);
    EXPECT_PAX_ERROR(peak_flops(DType::f32, options()), "PAX_PEAK_FLOPS");
  }
}

TEST(Mfu, HandValues) {
  EXPECT_DOUBLE_EQ(mfu(1e12, 2.0, 1e12), 0.5);
  EXPECT_DOUBLE_EQ(mfu(3e9, 0.01, 6e11), 0.5);
  EXPECT_DOUBLE_EQ(mfu(0, 1.0, 1e9), 0.0);
  EXPECT_PAX_ERROR(mfu(1e9, 0.0, 1e9), "step_seconds");
  EXPECT_PAX_ERROR(mfu(1e9, -1.0, 1e9), "step_seconds");
  EXPECT_PAX_ERROR(mfu(1e9, 1.0, 0.0), "peak");
  EXPECT_PAX_ERROR(mfu(-1.0, 1.0, 1e9), "model_flops_per_step");
  EXPECT_PAX_ERROR(mfu(double(NAN), 1.0, 1e9), "model_flops_per_step");
}

}  // namespace
}  // namespace pax::train

// MFU's peaks: the theoretical peak (the table by hand values, and no GEMM
// measured on this machine above it), the achievable peak's cache file (read,
// bad or implausible entries ignored), the overrides and their precedence,
// mfu. No assertion on timing.
#include "pax/train/peak_flops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/cpu_info.h"
#include "pax/backend/cpu/isa.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

// A fresh cache directory per test, and PAX_PEAK_FLOPS unset around it.
class PeakFlopsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / (std::string("pax_peak_flops_") + info->name() + "_" + std::to_string(std::rand()));
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

TEST_F(PeakFlopsTest, TheCpuAndSimUseTheCpuTableAndAGpuItsOwn) {
  EXPECT_FALSE(device_peak(DType::f32).has_value());
  {
    const DefaultDeviceScope on_sim(Device{DeviceKind::sim, 0});
    EXPECT_FALSE(device_peak(DType::bf16).has_value());  // sim runs the CPU's kernels
  }
  if (!platform_present(DeviceKind::cuda)) return;
  const DefaultDeviceScope on_gpu(Device{DeviceKind::cuda, 0});
  const std::optional<DevicePeak> gpu = device_peak(DType::bf16);
  ASSERT_TRUE(gpu.has_value());
  EXPECT_GT(gpu->flops, 1e13);
  EXPECT_NE(gpu->how.find("(cuda:0)"), std::string::npos) << gpu->how;
  EXPECT_EQ(peak_flops(DType::bf16), gpu->flops);
}

TEST_F(PeakFlopsTest, MeasurementIsPositiveAndFinite) {
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::f32, 0.0, 256)));
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::bf16, 0.0, 256)));
  EXPECT_TRUE(positive_finite(measure_peak_flops(DType::f32, 0.0, 1)));
}

TEST_F(PeakFlopsTest, TheoreticalPeakIsCoresTimesClockTimesRate) {
  for (DType t : {DType::f32, DType::bf16}) {
    const TheoreticalPeak p = theoretical_peak(t);
    EXPECT_TRUE(positive_finite(p.flops)) << p.str();
    EXPECT_GE(p.cores, 1);
    EXPECT_LE(p.cores, num_threads());
    EXPECT_DOUBLE_EQ(p.flops, double(p.cores) * p.clock_hz * double(p.flops_per_cycle));
    EXPECT_NE(p.str().find("FLOP/cycle"), std::string::npos) << p.str();
    EXPECT_EQ(peak_flops(t, options()), p.flops);  // MFU's denominator
  }
  EXPECT_GE(theoretical_peak(DType::bf16).flops_per_cycle, theoretical_peak(DType::f32).flops_per_cycle);
  EXPECT_EQ(theoretical_peak(DType::f32, 1).cores, 1);
}

// MFU never exceeds 100% only if no GEMM outruns the theoretical peak: the
// table's row for this CPU must not be too low.
TEST_F(PeakFlopsTest, NoMeasuredGemmExceedsTheTheoreticalPeak) {
  for (DType t : {DType::f32, DType::bf16}) {
    const double measured = measure_peak_flops(t, 0.05, 512);
    EXPECT_LE(measured, theoretical_peak(t).flops * 1.05) << dtype_name(t) << ": " << theoretical_peak(t).str();
  }
}

TEST(CoreRate, TableRows) {
  auto rate = [](auto set) {
    cpu::CpuInfo c;
    set(c);
    return cpu::core_flops_per_cycle(c);
  };
  const auto zen4 = rate([](cpu::CpuInfo& c) {
    c = {.arch = "x86_64", .vendor = "AuthenticAMD", .family = 0x19, .model = 0x11};
    c.avx = c.avx2 = c.fma = c.avx512f = c.avx512_bf16 = true;
  });
  EXPECT_EQ(zen4.f32, 32);
  EXPECT_EQ(zen4.bf16, 64);
  const auto zen4_avx2 = rate([](cpu::CpuInfo& c) {  // PAX_MAX_ISA=avx2 masks AVX-512
    c = {.arch = "x86_64", .vendor = "AuthenticAMD", .family = 0x19, .model = 0x11};
    c.avx = c.avx2 = c.fma = true;
  });
  EXPECT_EQ(zen4_avx2.f32, 32);
  EXPECT_EQ(zen4_avx2.bf16, 32);
  const auto zen1 = rate([](cpu::CpuInfo& c) {
    c = {.arch = "x86_64", .vendor = "AuthenticAMD", .family = 0x17, .model = 0x01};
    c.avx = c.avx2 = c.fma = true;
  });
  EXPECT_EQ(zen1.f32, 16);
  const auto sapphire = rate([](cpu::CpuInfo& c) {
    c = {.arch = "x86_64", .vendor = "GenuineIntel", .family = 6, .model = 0x8f};
    c.avx = c.avx2 = c.fma = c.avx512f = c.avx512_bf16 = c.amx_bf16 = true;
  });
  EXPECT_EQ(sapphire.f32, 64);
  EXPECT_EQ(sapphire.bf16, 1024);
  const auto skylake = rate([](cpu::CpuInfo& c) {
    c = {.arch = "x86_64", .vendor = "GenuineIntel", .family = 6, .model = 0x55};
    c.avx = c.avx2 = c.fma = c.avx512f = true;
  });
  EXPECT_EQ(skylake.f32, 64);
  EXPECT_EQ(skylake.bf16, 64);
  const auto n1 = rate([](cpu::CpuInfo& c) {
    c = {.arch = "aarch64", .vendor = "0x41", .part = 0xd0c};
    c.neon = true;
  });
  EXPECT_EQ(n1.f32, 16);
  const auto v1 = rate([](cpu::CpuInfo& c) {
    c = {.arch = "aarch64", .vendor = "0x41", .part = 0xd40};
    c.neon = c.sve = c.arm_bf16 = true;
    c.sve_bits = 256;
  });
  EXPECT_EQ(v1.f32, 32);
  EXPECT_EQ(v1.bf16, 64);
}

TEST_F(PeakFlopsTest, AchievablePeakIsCachedAndCheckedAgainstTheTheoretical) {
  const std::string key = peak_flops_cache_key(DType::f32);
  EXPECT_NE(key.find(cpu::isa_summary()), std::string::npos) << key;
  EXPECT_EQ(peak_flops_cache_path(options()), cache_file());
  // An entry under the theoretical peak is read back as is.
  write_cache(R"({"entries": {")" + key + R"(": 1234.5}})");
  EXPECT_EQ(achievable_flops(DType::f32, options()), 1234.5);
  // Another dtype is another entry; the first one is kept.
  EXPECT_TRUE(positive_finite(achievable_flops(DType::bf16, options())));
  EXPECT_EQ(achievable_flops(DType::f32, options()), 1234.5);
  // use_cache = false measures without reading the file.
  PeakFlopsOptions no_cache = options();
  no_cache.use_cache = false;
  EXPECT_NE(achievable_flops(DType::f32, no_cache), 1234.5);
  // An entry above the theoretical peak (measured elsewhere, or edited) is
  // ignored and measured again; the new figure is kept only when plausible.
  write_cache(R"({"entries": {")" + key + R"(": 1e30}})");
  const double v = achievable_flops(DType::f32, options());
  EXPECT_TRUE(positive_finite(v));
  EXPECT_LE(v, theoretical_peak(DType::f32).flops * 1.05);
  EXPECT_EQ(read_cache().find("1e+30"), std::string::npos) << read_cache();
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
    const double v = achievable_flops(DType::f32, options());
    EXPECT_TRUE(positive_finite(v)) << text;
    EXPECT_NE(v, 1234.5) << text;
  }
}

TEST_F(PeakFlopsTest, OverridesWin) {
  setenv("PAX_PEAK_FLOPS", "2.5e11", 1);
  EXPECT_EQ(peak_flops(DType::f32, options()), 2.5e11);
  PeakFlopsOptions o = options();
  o.override_flops = 7e9;
  EXPECT_EQ(peak_flops(DType::f32, o), 7e9);
  EXPECT_EQ(peak_flops(DType::bf16, o), 7e9);
  setenv("PAX_PEAK_FLOPS", "", 1);  // empty: unset
  EXPECT_EQ(peak_flops(DType::f32, options()), theoretical_peak(DType::f32).flops);
  // No cache file is created: the theoretical peak is not measured.
  EXPECT_FALSE(fs::exists(cache_file()));
}

TEST_F(PeakFlopsTest, Errors) {
  EXPECT_PAX_ERROR(peak_flops(DType::f16, options()), "f32 or bf16");
  EXPECT_PAX_ERROR(achievable_flops(DType::f64, options()), "f32 or bf16");
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

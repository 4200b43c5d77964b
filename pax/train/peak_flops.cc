// MFU's peaks: the theoretical table, the overrides, the GEMM measurement and
// its JSON cache (see peak_flops.h).
#include "pax/train/peak_flops.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <tuple>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/cpu_info.h"
#include "pax/backend/cpu/isa.h"
#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool usable(double flops) { return std::isfinite(flops) && flops > 0; }

void check_dtype(DType dtype, const char* fn) {
  PAX_CHECK(dtype == DType::f32 || dtype == DType::bf16, fn, ": compute dtype must be f32 or bf16, got ",
            dtype_name(dtype));
}

// PAX_PEAK_FLOPS, when set and not empty.
std::optional<double> env_override() {
  const char* text = std::getenv("PAX_PEAK_FLOPS");
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  PAX_CHECK(end && *end == '\0' && usable(v),
            "peak_flops: PAX_PEAK_FLOPS must be a positive number of FLOP/s "
            "(e.g. 2.2e11), got '",
            text, "'");
  return v;
}

// The cache's entries; an unreadable or malformed file counts as empty.
json read_entries(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return json::object();
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("entries") || !doc["entries"].is_object()) return json::object();
  return doc["entries"];
}

// Best effort: a cache that cannot be written only costs a re-measurement.
void write_entries(const fs::path& path, const json& entries) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << json{{"entries", entries}}.dump(2) << '\n';
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);  // atomic: readers see the old file or the new one
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

namespace {

// The clock: cpufreq's maximum, else timed once per process.
std::pair<double, std::string> core_clock() {
  static const std::pair<double, std::string> clock = []() -> std::pair<double, std::string> {
    const cpu::CpuInfo& c = cpu::cpu_info();
    if (c.max_clock_hz > 0) return {c.max_clock_hz, "cpufreq"};
    return {cpu::measure_clock_hz(), "timed"};
  }();
  return clock;
}

}  // namespace

std::string TheoreticalPeak::str() const {
  return fmt::format("{:.1f} GFLOP/s ({} core{} x {:.2f} GHz ({}) x {} FLOP/cycle, {})", flops / 1e9, cores,
                     cores == 1 ? "" : "s", clock_hz / 1e9, clock_source, flops_per_cycle, unit);
}

TheoreticalPeak theoretical_peak(DType compute_dtype, int threads) {
  check_dtype(compute_dtype, "theoretical_peak");
  const cpu::CpuInfo& c = cpu::cpu_info();
  const cpu::CoreRate rate = cpu::core_flops_per_cycle(c);
  TheoreticalPeak p;
  p.cores = std::min(c.physical_cores, threads > 0 ? threads : num_threads());
  std::tie(p.clock_hz, p.clock_source) = core_clock();
  p.flops_per_cycle = compute_dtype == DType::bf16 ? rate.bf16 : rate.f32;
  p.unit = rate.unit;
  p.flops = double(p.cores) * p.clock_hz * double(p.flops_per_cycle);
  PAX_CHECK(usable(p.flops), "theoretical_peak: could not work out this CPU's peak (", p.cores, " cores, clock ",
            p.clock_hz, " Hz); pass --peak_flops or set PAX_PEAK_FLOPS");
  return p;
}

std::string peak_flops_cache_key(DType compute_dtype) {
  std::ostringstream key;
  key << cpu::cpu_info().model_name << "|threads=" << num_threads() << "|" << cpu::isa_summary() << "|"
      << dtype_name(compute_dtype);
  return key.str();
}

std::string peak_flops_cache_path(const PeakFlopsOptions& options) {
  fs::path dir;
  if (!options.cache_dir.empty()) {
    dir = options.cache_dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = fs::path(xdg) / "paxcc";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = fs::path(home) / ".cache" / "paxcc";
  } else {
    dir = fs::temp_directory_path() / "paxcc";
  }
  return (dir / "peak_flops.json").string();
}

double measure_peak_flops(DType compute_dtype, double seconds, int64_t size) {
  check_dtype(compute_dtype, "measure_peak_flops");
  PAX_CHECK(std::isfinite(seconds) && seconds >= 0, "measure_peak_flops: seconds must be >= 0, got ", seconds);
  PAX_CHECK(size > 0, "measure_peak_flops: size must be > 0, got ", size);
  auto keys = random::split_keys(random::key(0), 2);
  const Array a = random::normal(keys[0], {size, size}).astype(compute_dtype);
  const Array b = random::normal(keys[1], {size, size}).astype(compute_dtype);
  const double flops = 2.0 * double(size) * double(size) * double(size);
  using clock = std::chrono::steady_clock;
  Array warm = matmul(a, b);  // oneDNN primitive creation and first-touch of the output
  double best = 0, spent = 0;
  for (int calls = 0; calls < 10 || (spent < seconds && calls < 1000); ++calls) {
    const auto start = clock::now();
    Array c = matmul(a, b);  // eager: done when it returns
    const double s = std::chrono::duration<double>(clock::now() - start).count();
    spent += s;
    if (s > 0) best = std::max(best, flops / s);
  }
  PAX_CHECK(usable(best), "measure_peak_flops: the timed matmuls gave no usable rate");
  return best;
}

double peak_flops(DType compute_dtype, const PeakFlopsOptions& options) {
  check_dtype(compute_dtype, "peak_flops");
  if (options.override_flops) {
    PAX_CHECK(usable(*options.override_flops), "peak_flops: override_flops must be a positive finite FLOP/s, got ",
              *options.override_flops);
    return *options.override_flops;
  }
  if (std::optional<double> env = env_override()) return *env;
  if (std::optional<DevicePeak> d = device_peak(compute_dtype)) return d->flops;
  return theoretical_peak(compute_dtype).flops;
}

std::optional<DevicePeak> device_peak(DType compute_dtype) {
  const Device device = default_device();
  const Backend* b = find_backend(device.kind);
  if (!b || !b->peak_flops) return std::nullopt;
  DevicePeak p;
  p.flops = b->peak_flops(device.index, compute_dtype, &p.how);
  p.how += " (" + device.str() + ")";
  return p;
}

double achievable_flops(DType compute_dtype, const PeakFlopsOptions& options) {
  check_dtype(compute_dtype, "achievable_flops");
  const double theoretical = theoretical_peak(compute_dtype).flops;
  const double ceiling = theoretical * 1.05;  // timing noise aside
  auto measure = [&] { return measure_peak_flops(compute_dtype, options.measure_seconds, options.matmul_size); };
  if (!options.use_cache) return measure();
  const fs::path path = peak_flops_cache_path(options);
  const std::string key = peak_flops_cache_key(compute_dtype);
  json entries = read_entries(path);
  if (entries.contains(key) && entries[key].is_number()) {
    const double cached = entries[key].get<double>();
    if (usable(cached) && cached <= ceiling) return cached;
  }
  const double a = measure(), b = measure();
  const double best = std::max(a, b);
  // Kept only when plausible: the two agree, and the GEMM reaches at least a
  // quarter of the theoretical peak (oneDNN's reach 75% to 95% of it on an
  // idle x86 machine, half that on parts with one FMA pipe where the table
  // counts two; less is other work on the machine, which may be steady).
  if (std::min(a, b) >= best / 1.1 && best <= ceiling && best >= theoretical / 4) {
    entries[key] = best;
    write_entries(path, entries);
  }
  return best;
}

double mfu(double model_flops_per_step, double step_seconds, double peak) {
  PAX_CHECK(std::isfinite(step_seconds) && step_seconds > 0, "mfu: step_seconds must be > 0, got ", step_seconds);
  PAX_CHECK(usable(peak), "mfu: peak must be a positive finite FLOP/s, got ", peak);
  PAX_CHECK(std::isfinite(model_flops_per_step) && model_flops_per_step >= 0,
            "mfu: model_flops_per_step must be >= 0, got ", model_flops_per_step);
  return model_flops_per_step / step_seconds / peak;
}

}  // namespace pax::train

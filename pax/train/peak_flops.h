// Model FLOPs utilisation (MFU) as PaLM defines it: the model's FLOPs per
// second over the theoretical peak of the hardware the job uses. On the CPU
// that peak is cores x clock x FLOPs per cycle per core for the compute dtype
// and the widest matmul unit the kernels use (after PAX_MAX_ISA):
//
//   unit (FLOPs per cycle per core; an FMA counts 2)        f32    bf16
//   x86-64 AMX-BF16 tiles (Sapphire Rapids on)               64    1024
//   AVX-512, two 512-bit FMA pipes (Intel Xeon, AMD Zen 5)    64    128 with AVX512_BF16, else 64
//   AVX-512 on two 256-bit FMA pipes (AMD Zen 4)              32    64 with AVX512_BF16, else 32
//   AVX2 + FMA, two 256-bit pipes (Haswell on, Zen 2 / 3)    32    32 (bf16 is computed in f32)
//   AVX2 + FMA on two 128-bit pipes (AMD Zen 1)              16    16
//   AVX without FMA (a multiply and an add pipe)              16    16
//   SSE                                                        8     8
//   aarch64 NEON, two 128-bit FMA pipes (Neoverse N1 / N2,
//     Cortex-A7x)                                             16    32 with BF16, else 16
//   aarch64 NEON, four 128-bit pipes (Neoverse V1 / V2,
//     Apple, and any other core not in this table)            32    64 with BF16, else 32
//
// Cores are the physical cores among the CPUs the process may run on, at
// most one per kernel thread. The clock is cpufreq's maximum where /sys has
// it, else the clock timed on a chain of dependent additions (cpu_info.h).
// Where a CPU has fewer pipes than its row (some client and low-end server
// parts), the peak is high and MFU low, never above 100%.
//
// Beside it, the "achievable" peak: the best rate of square GEMMs through
// paxcc's matmul (oneDNN) on all kernel threads, measured (~0.6 s) and cached
// per CPU model, thread count, ISA and dtype in
// $XDG_CACHE_HOME/paxcc/peak_flops.json (~/.cache/paxcc/ when XDG_CACHE_HOME
// is unset) only when two measurements agree within 10% and lie between a
// quarter of the theoretical peak and the peak, so a figure taken on a busy
// machine is not kept.
//
//   TheoreticalPeak p = train::theoretical_peak(DType::f32);      // p.flops, p.str()
//   double peak = train::peak_flops(DType::f32);                  // MFU's denominator
//   double peak = train::peak_flops(DType::f32, {.override_flops = 2e11});  // --peak_flops
//   double gemm = train::achievable_flops(DType::f32);            // measured, cached when checked
//   double u = train::mfu(flops_per_step, seconds_per_step, peak);  // 0.37
//
// peak_flops' precedence: options.override_flops, then the environment
// variable PAX_PEAK_FLOPS (FLOP/s, e.g. "2.2e11"), then the theoretical peak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pax/core/dtype.h"

namespace pax::train {

struct TheoreticalPeak {
  double flops = 0;  // FLOP/s
  int cores = 0;     // physical cores counted
  double clock_hz = 0;
  std::string clock_source;  // "cpufreq" or "timed"
  int flops_per_cycle = 0;   // per core
  std::string unit;          // the table's row, e.g. "AVX-512 on two 256-bit FMA pipes"
  // "332.3 GFLOP/s (2 cores x 2.59 GHz x 64 FLOP/cycle, AVX-512 ...)".
  std::string str() const;
};

// The theoretical peak for matmuls computed in compute_dtype (f32 or bf16)
// on the cores this process uses with `threads` kernel threads (0: the
// current thread count). The clock is read or timed once per process.
TheoreticalPeak theoretical_peak(DType compute_dtype, int threads = 0);

struct PeakFlopsOptions {
  // Used as is when set (must be > 0 and finite).
  std::optional<double> override_flops;
  // Directory of peak_flops.json ("" : $XDG_CACHE_HOME/paxcc or ~/.cache/paxcc).
  std::string cache_dir;
  // Read and write the cache (false: always measure).
  bool use_cache = true;
  // Least time spent in timed matmuls per measurement, and their side (the
  // default is large enough for oneDNN's best blocking, and short enough for
  // dozens of calls; tests use less).
  double measure_seconds = 0.3;
  int64_t matmul_size = 1024;
};

// MFU's denominator for compute_dtype (f32 or bf16), as above. pax::Error for
// another dtype, a bad override or a bad PAX_PEAK_FLOPS.
double peak_flops(DType compute_dtype, const PeakFlopsOptions& options = {});

// The peak of the default device when its backend keeps a table of its own
// (a GPU's: the datasheet figure or SMs x clock x rate), with its
// description; nullopt where the CPU's table applies (cpu, sim).
struct DevicePeak {
  double flops = 0;
  std::string how;
};
std::optional<DevicePeak> device_peak(DType compute_dtype);

// The achievable peak: the cached measurement, or two new ones (cached when
// they agree within 10% and lie between a quarter of the theoretical peak
// and the peak; the larger is returned either way). A cache file that cannot be read or parsed, or whose
// entry is not a positive finite number under the theoretical peak, is
// ignored. Overrides do not apply.
double achievable_flops(DType compute_dtype, const PeakFlopsOptions& options = {});

// One measurement, without the cache: the best rate of size^3 matmuls
// (2 size^3 FLOPs each) over at least `seconds` and 10 timed calls.
double measure_peak_flops(DType compute_dtype, double seconds = 0.3, int64_t size = 1024);

// The cache file achievable_flops() uses with these options.
std::string peak_flops_cache_path(const PeakFlopsOptions& options = {});

// The key of this machine's entry for compute_dtype in the cache:
// "<cpu model name>|threads=<n>|<isa summary>|<dtype>".
std::string peak_flops_cache_key(DType compute_dtype);

// Model FLOPs utilisation: model_flops_per_step / step_seconds / peak
// (a fraction; pax::Error unless step_seconds and peak are > 0).
double mfu(double model_flops_per_step, double step_seconds, double peak);

}  // namespace pax::train

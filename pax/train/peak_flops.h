// The machine's peak FLOP/s for a compute dtype, the denominator of model
// FLOPs utilisation (MFU). "Peak" is the best rate of square GEMMs through
// paxcc's matmul (oneDNN) on all kernel threads: measured once (~0.3 s) and
// cached per CPU model, thread count and dtype in
// $XDG_CACHE_HOME/paxcc/peak_flops.json (~/.cache/paxcc/ when XDG_CACHE_HOME
// is unset), so that later runs start at once. The best of many short calls
// is kept, so that other work on the machine lowers it only when it lasts
// through the whole measurement; a value measured on a busy machine stays in
// the cache until the file is removed (or is overridden, below).
//
//   double peak = train::peak_flops(DType::bf16);               // cached or measured
//   double peak = train::peak_flops(DType::f32, {.override_flops = 2e11});  // --peak_flops
//   double u = train::mfu(flops_per_step, seconds_per_step, peak);  // 0.37
//
// Precedence: options.override_flops, then the environment variable
// PAX_PEAK_FLOPS (FLOP/s, e.g. "2.2e11"), then the cache, then a measurement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pax/core/dtype.h"

namespace pax::train {

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

// Peak FLOP/s for matmuls computed in compute_dtype (f32 or bf16), as above.
// pax::Error for another dtype, a bad override or a bad PAX_PEAK_FLOPS. A
// cache file that cannot be read or parsed, or whose entry is not a positive
// finite number, is ignored: the value is measured and the file rewritten.
double peak_flops(DType compute_dtype, const PeakFlopsOptions& options = {});

// One measurement, without the cache: the best rate of size^3 matmuls
// (2 size^3 FLOPs each) over at least `seconds` and 10 timed calls.
double measure_peak_flops(DType compute_dtype, double seconds = 0.3, int64_t size = 1024);

// The cache file peak_flops() uses with these options.
std::string peak_flops_cache_path(const PeakFlopsOptions& options = {});

// The key of this machine's entry for compute_dtype in the cache:
// "<cpu model name>|threads=<n>|<dtype>".
std::string peak_flops_cache_key(DType compute_dtype);

// Model FLOPs utilisation: model_flops_per_step / step_seconds / peak
// (a fraction; pax::Error unless step_seconds and peak are > 0).
double mfu(double model_flops_per_step, double step_seconds, double peak);

}  // namespace pax::train

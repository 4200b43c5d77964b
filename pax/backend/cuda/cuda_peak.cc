// GPU matmul peaks: datasheet figures for the parts people train on, a
// per-architecture rate for the rest.
#include "pax/backend/cuda/cuda_peak.h"

#include <cstdio>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

struct Part {
  const char* label;
  int arch, sms;
  const char* name_has;    // a part of the driver's name that tells it apart, or ""
  double f32, tf32, bf16;  // TFLOP/s, dense
};

// Matched in order: the first row whose architecture, SM count and name match.
constexpr Part kParts[] = {
    {"A100", 80, 108, "", 19.5, 156, 312},
    {"H100 NVL", 90, 132, "NVL", 60.0, 417.5, 835.0},
    {"H100 SXM / H200", 90, 132, "", 66.9, 494.7, 989.4},
    {"H100 PCIe", 90, 114, "", 51.2, 378, 756},
    {"B200", 100, 148, "", 80.0, 1100, 2250},
};

// FLOPs per SM per clock (an FMA counts 2) of the CUDA cores in f32 and of
// the tensor cores in 16-bit floats, dense; TF32 runs at half the 16-bit rate.
struct ArchRate {
  int arch_from;  // this row holds from this compute capability on
  int f32, bf16;
};
constexpr ArchRate kRates[] = {
    {70, 128, 1024},   // Volta (f16 only)
    {75, 128, 512},    // Turing
    {80, 128, 2048},   // A100, A30
    {86, 256, 1024},   // GA10x, Orin, Ada (workstation rate)
    {90, 256, 4096},   // Hopper
    {100, 256, 8192},  // Blackwell data centre
    {120, 256, 8192},  // later parts: the highest rate known, so MFU stays below 100%
};

std::string tflops(double flops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", flops / 1e12);
  return buf;
}

}  // namespace

DevicePeak device_peak(const std::string& name, int arch, int sms, int clock_khz, DType compute_dtype, F32Matmul f32) {
  PAX_CHECK(compute_dtype == DType::f32 || compute_dtype == DType::bf16 || compute_dtype == DType::f16,
            "device_peak: no matmul peak for ", dtype_name(compute_dtype), "; valid: f32, bf16, f16");
  const bool tf32 = compute_dtype == DType::f32 && f32 == F32Matmul::tf32;
  const char* kind = compute_dtype != DType::f32 ? "bf16" : tf32 ? "tf32" : "f32";
  for (const Part& p : kParts) {
    if (p.arch != arch || p.sms != sms || name.find(p.name_has) == std::string::npos) continue;
    const double t = compute_dtype != DType::f32 ? p.bf16 : tf32 ? p.tf32 : p.f32;
    return {t * 1e12, tflops(t * 1e12) + " TFLOP/s " + kind + " dense (" + p.label + " datasheet)"};
  }
  PAX_CHECK(sms > 0 && clock_khz > 0, "device_peak: ", name, " reports ", sms, " SMs at ", clock_khz, " kHz");
  const ArchRate* rate = &kRates[0];
  for (const ArchRate& r : kRates)
    if (arch >= r.arch_from) rate = &r;
  const int per_clock = compute_dtype != DType::f32 ? rate->bf16 : tf32 ? rate->bf16 / 2 : rate->f32;
  const double flops = double(sms) * clock_khz * 1e3 * per_clock;
  char how[160];
  std::snprintf(how, sizeof how, " TFLOP/s %s dense (%d SMs x %.2f GHz x %d FLOP/clock, sm_%d)", kind, sms,
                clock_khz / 1e6, per_clock, arch);
  return {flops, tflops(flops) + how};
}

}  // namespace pax::cuda

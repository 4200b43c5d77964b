// The theoretical peak of a CUDA device for matmuls, MFU's denominator:
//
//   part (as the driver names it, SMs)       f32    tf32   bf16/f16 dense (TFLOP/s)
//   A100 (sm_80, 108 SMs)                     19.5   156    312
//   H100 SXM, H200, GH200 (sm_90, 132 SMs)    66.9   494.7  989.4
//   H100 NVL (sm_90, 132 SMs, "NVL")          60.0   417.5  835.0
//   H100 PCIe (sm_90, 114 SMs)                51.2   378    756
//   B200 (sm_100, 148 SMs)                    80.0   1100   2250
//
// NVIDIA's datasheet figures, dense (without 2:4 sparsity). Any other part:
// SMs x the SM clock the driver reports x the FLOPs per SM per clock of its
// architecture (the table in cuda_peak.cc), rounded up where a generation
// varies, so that MFU stays below 100%.
#pragma once

#include <string>

#include "pax/core/dtype.h"

namespace pax::cuda {

// How matmuls of f32 operands are computed: exactly in f32, or on the
// tensor cores in TF32 (jax.default_matmul_precision("tensorfloat32")).
enum class F32Matmul { f32, tf32 };

struct DevicePeak {
  double flops = 0;  // FLOP/s
  std::string how;   // "989.4 TFLOP/s bf16 dense (H100 SXM datasheet)"
};

// The peak of a device with compute capability `arch` (90 for sm_90), `sms`
// multiprocessors at `clock_khz`, named `name`, for matmuls in
// `compute_dtype` (f32, bf16 or f16).
DevicePeak device_peak(const std::string& name, int arch, int sms, int clock_khz, DType compute_dtype,
                       F32Matmul f32 = F32Matmul::f32);

}  // namespace pax::cuda

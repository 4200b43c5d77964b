// What the CPU is, for figures that depend on the hardware (MFU's theoretical
// peak): architecture, vendor / family / model (x86) or implementer / part
// (aarch64), the instruction-set features that matter to GEMM, the physical
// cores this process may run on, and the core clock.
//
// Read from /proc/cpuinfo (the kernel's view of cpuid on x86 and of the ID
// registers on aarch64) and /sys (topology, cpufreq). Features beyond
// PAX_MAX_ISA are masked out, so that a capped run reports the capped machine.
#pragma once

#include <optional>
#include <string>

namespace pax::cpu {

struct CpuInfo {
  std::string arch;           // "x86_64", "aarch64" or another uname machine
  std::string model_name;     // "AMD EPYC 9R14", "Neoverse-V1", ...
  std::string vendor;         // x86: "GenuineIntel" / "AuthenticAMD"; aarch64: the implementer ("0x41")
  int family = 0, model = 0;  // x86
  int part = 0;               // aarch64 part number (0xd40: Neoverse V1, ...)
  // Features (after PAX_MAX_ISA).
  bool avx = false, avx2 = false, fma = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  bool neon = false, sve = false, arm_bf16 = false;
  int sve_bits = 0;        // SVE vector length
  int physical_cores = 0;  // distinct cores among the CPUs this process may run on
  int logical_cpus = 0;
  double max_clock_hz = 0;  // cpufreq's cpuinfo_max_freq, 0 when /sys does not say
  // The model name and the kernel's whole feature line: what -march=native
  // resolves from (the code generator keys its cache by it).
  std::string identity;
};

// This machine (read once).
const CpuInfo& cpu_info();

// FLOPs per cycle per core of the widest matmul unit (an FMA counts 2), for
// f32 and bf16 matmuls: the table in pax/train/peak_flops.h.
struct CoreRate {
  int f32 = 0, bf16 = 0;
  std::string unit;  // "AVX-512 on two 256-bit FMA pipes, AVX512_BF16", ...
};
CoreRate core_flops_per_cycle(const CpuInfo& cpu);

// The clock of the core running the caller, timed over a chain of dependent
// integer additions (one a cycle on every core paxcc targets); the best of a
// few short trials, so that other work on the machine can only lower it.
double measure_clock_hz();

}  // namespace pax::cpu

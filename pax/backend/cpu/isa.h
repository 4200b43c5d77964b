// The instruction set the CPU kernels run, and the cap PAX_MAX_ISA puts on it.
//
// Three parts of paxcc pick code for the CPU at run time: Highway's dispatch
// (the elementwise, reduction and fused-loop kernels), oneDNN (GEMM and
// convolution) and the fused-loop code generator (the flags it gives the
// system compiler). PAX_MAX_ISA caps all three together, so that a machine
// with more runs exactly what a smaller one runs:
//
//   PAX_MAX_ISA   Highway target   oneDNN max ISA      generated code
//   avx2          AVX2             avx2                -march=native -mno-avx512f
//   avx512        AVX3             avx512_core         -march=native
//   avx512_bf16   AVX3             avx512_core_bf16    -march=native
//   amx           AVX3             avx512_core_amx     -march=native
//   native / unset  the best each has for this CPU (aarch64: NEON / SVE)
//
// A cap above what the CPU has changes nothing. The cap is applied when the
// library loads, before any kernel runs (Highway's DisableTargets and
// dnnl::set_max_cpu_isa); PAX_MAX_ISA wins over ONEDNN_MAX_CPU_ISA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pax::cpu {

// The cap's name as given ("native" when PAX_MAX_ISA is unset or empty).
// pax::Error when PAX_MAX_ISA names no known cap (the message lists them).
std::string isa_cap();

// The Highway target the dispatched kernels run (a bit of HWY_TARGETS).
int64_t hwy_target();
// Its name ("AVX2", "AVX3", "NEON", ...).
std::string hwy_target_name();
// oneDNN's effective ISA, as its name ("avx2", "avx512_core_bf16", ...).
std::string dnnl_isa_name();

// The compiler flags that make generated Highway code compile for exactly
// hwy_target(): the host's instructions (-march=native, less what the cap
// removes) with every better Highway target disabled. PAX_CODEGEN_MARCH
// replaces "native" (a cross compiler, or a container that hides the CPU).
std::vector<std::string> codegen_isa_flags();

// One line for logs and the README: architecture, Highway target, oneDNN ISA.
std::string isa_summary();

}  // namespace pax::cpu

// The CUDA C dialect of the loop renderer (compile/loop_render.h): the table
// from each fused-loop operation to a CUDA C expression, and the device
// functions those expressions call, which every generated kernel source
// starts with (cuda_kernels_source.h).
//
// Values are computed as the CPU's kernels compute them: bf16 values are f32
// values rounded to bf16 precision by every instruction that produces one
// (round to nearest even, NaN made quiet), int32 arithmetic wraps, and the
// kernels' rules for int32 division, remainder, shifts and powers hold. The
// operations that are exact in IEEE arithmetic (add, sub, mul, div, sqrt,
// rsqrt as 1 / sqrt, abs, neg, sign, floor, ceil, both roundings, max, min,
// fmod, compares, conversions, selects, integer_pow) give the CPU's bits:
// NVRTC compiles with --fmad=false (no a * b + c contracted into an FMA, as
// -ffp-contract=off on the CPU), --prec-div=true, --prec-sqrt=true and
// --ftz=false (nvrtc_compiler.h). erf is the CPU's own rational function
// (its FMAs as fmaf: the CPU's Highway MulAdd is fused where FMA exists), so
// it gives the CPU's bits as well. The other transcendentals use CUDA's
// functions, whose documented bounds (CUDA C Programming Guide, "Mathematical
// Functions") differ from the CPU's Highway approximations by an ulp or two:
// expf 2 ulp, expm1f 1, logf 1, log1pf 1, tanhf 2, cbrtf 1, sinf / cosf 2
// (over the whole range, where the CPU's vector path covers |x| < 39000 and
// calls the C library beyond), powf 2 (the CPU calls the C library's powf);
// logistic is the CPU's formula over expf, and erf_inv the CPU's polynomial
// in w = -logf((1 - x)(1 + x)).
#pragma once

#include <span>
#include <string_view>

#include "pax/compile/loop_render.h"

namespace pax::cuda {

// The language table. Slot memory is read through p<slot> (a pointer) at
// i<slot> (an element index), which the kernel declares per slot; the store
// templates only keep a value in its variable v<slot>: instruction results
// live in registers, and the kernel writes stores and feeds the reduction
// from those variables.
const LoopDialect& cuda_dialect();

// The device functions (pax_*) that the templates call, and the loads and
// vector moves of the kernels: CUDA C that NVRTC compiles without any
// header.
std::string_view cuda_dialect_prelude();

// An operation the dialect leaves out on purpose, and why.
struct LeftOut {
  std::string_view table;  // "unary", "binary", "unary_int", "binary_int"
  int op;                  // the UnaryOp / BinaryOp
  std::string_view why;
};
// Every operation of the tables that has no template, each with its reason;
// every other operation has one (cuda_codegen_test.cc checks both ways).
std::span<const LeftOut> cuda_dialect_left_out();

}  // namespace pax::cuda

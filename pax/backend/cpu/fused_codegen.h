// Machine code for fused loops (fused_loop.h) from generated C++: runs of a
// program's instructions are rendered (pax/compile/loop_render.h, with the
// Highway dialect below) into one function each that walks a block a vector
// at a time and keeps values in vector registers; the functions of all the
// loops of an executable form one source, built by the system compiler for
// the target Highway dispatches to (native_compiler.h, isa.h) and published
// into each program once loaded. The functions call the same Highway
// functors as the elementwise kernels (elementwise_ops-inl.h), so compiled
// loops keep the bits of eager execution (NaN payloads aside).
//
// Compiled: f32 arithmetic and every f32 unary operation except sin / cos
// (bf16 values held as f32, rounded as the bf16 kernels round), max / min,
// integer_pow, comparisons of f32 or i32 into masks, is_finite, select_n of
// two float or int32 cases by a bool, int32 arithmetic, bitwise operations,
// division, remainder, shifts and integer_pow (with the kernels' rules for
// zero divisors, INT32_MIN / -1 and wide shifts), and conversions between
// f32, bf16, bool and i32 (float -> i32 saturated, NaN -> 0). Other
// instructions (sin / cos, int32 abs / sign / pow, other dtypes) stay with the
// interpreter between runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cpu/fused_loop.h"
#include "pax/backend/cpu/native_compiler.h"

namespace pax::cpu {

using FusedRunFn = void (*)(void* const* slots, int64_t m);

// The compiled runs of one program (FusedLoop::compiled_runs, in order).
struct FusedCode {
  std::vector<FusedRunFn> runs;
  std::shared_ptr<NativeLibrary> library;  // keeps the functions loaded
};

// Whether generated code would compute every instruction of `p` with its bf16
// slots narrow (finalize asks before it lays out registers: such a loop needs
// no wide bf16 registers). False when nothing can be compiled here.
bool codegen_compiles_every_instruction(const FusedLoop& p);

// The runs of finalized `p` that generated code computes ([begin, end) of
// two instructions or more).
std::vector<std::pair<int, int>> codegen_runs(const FusedLoop& p);

// One C++ translation unit with the runs of every program: run r of program
// k is the C function pax_run_<k>_<r>(slots, m).
std::string render_fused_source(std::span<const FusedLoop* const> programs);

// Builds the runs of `programs` (on the compiler thread, or at once with
// PAX_COMPILE=sync) and publishes each program's FusedCode when loaded.
// Programs already published, or with no runs, are left as they are.
void compile_fused_programs(std::vector<std::shared_ptr<const FusedLoop>> programs);

}  // namespace pax::cpu

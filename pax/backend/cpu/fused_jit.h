// Machine code for a fused loop's instructions (x86-64 AVX-512, generated with
// Xbyak). The interpreter of fused_loop.cc runs each instruction over a whole
// block held in memory; here consecutive instructions become one function
// that walks the block 16 elements at a time and keeps their values in vector
// registers: an operand is loaded from its slot's memory once, an
// intermediate read only inside the run never touches memory, and a result is
// written to its slot only when something after the run reads it (a later
// instruction, a store, the reduction).
//
// Each instruction computes exactly what its kernel computes (the same
// instructions on the same f32 values, bf16 results rounded as RoundBf16
// rounds them), so compiled loops keep the bits of eager execution. Runs cover
// f32 arithmetic (bf16 values are held as f32 in registers, loaded widened
// and stored narrow where the loop keeps them as bf16): add, sub, mul, div,
// max, min (NaN-propagating), neg, abs, sqrt, exp, tanh, integer_pow, converts
// between f32 and bf16, comparisons of f32 or i32 values and select_n of two
// f32 cases by a bool. Other instructions (log, logistic, integer and f64
// work, ...) stay with the interpreter between runs.
//
// Used only where the CPU has AVX-512 (F, BW, VL) and BMI2; PAX_FUSED_JIT=0
// turns it off.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pax::cpu {

struct FusedProgram;

// A run of instructions [begin, end) compiled to fn(slot_pointers, m): the
// pointers are the block's slot pointers (as the interpreter holds them) and
// m the block's element count.
struct FusedJitRun {
  int begin = 0, end = 0;
  void (*fn)(void* const* slots, int64_t m) = nullptr;
  std::shared_ptr<const void> code;  // owns fn's memory
};

// Whether every instruction of `p` would be compiled (it looks only at the
// instructions and their slots' dtypes, so finalize asks before it lays out
// the registers). Such a loop needs no wide bf16 registers: the compiled
// code widens bf16 as it loads and narrows as it stores.
bool jit_compiles_every_instruction(const FusedProgram& p);

// The runs of `p` (finalized, without an accumulator chain) worth compiling,
// in instruction order; empty when the CPU or the environment rules it out.
std::vector<FusedJitRun> compile_fused_runs(const FusedProgram& p);

}  // namespace pax::cpu

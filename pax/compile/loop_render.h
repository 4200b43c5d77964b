// Rendering runs of a fused loop's instructions (loop_program.h) as source
// code, for any language a backend compiles: the walk over the instructions
// is here, the language is a table (LoopDialect) from each operation to an
// expression template and from each memory format to a load / store template,
// in the way of tinygrad's renderers. The CPU renders C++ over Highway
// (backend/cpu/fused_codegen.h); a CUDA C table for NVRTC can sit beside it.
//
// A run computes one vector (or one element, in a scalar language) of each of
// its instructions per iteration: operands are loaded from their slots' memory
// once, intermediates stay in variables, and a result is stored only when
// something after the run reads it (a later instruction, a store, the
// reduction). Templates name operands {0}, {1}, {2}; the statements of a body
// refer to the slot pointers as the dialect's load / store templates do.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pax/compile/loop_program.h"

namespace pax {

// How a slot's values sit in the memory a run reads and writes. Float values
// are computed as f32 whatever their memory format.
enum class SlotFormat : uint8_t {
  none,     // not readable by a compiled run
  f32,      // 4-byte floats (f32 values, or bf16 values held widened)
  bf16,     // 2-byte bf16 bits, widened on load and narrowed on store
  i32,      // 4-byte integers
  boolean,  // one byte, 0 or 1 (a mask while computed)
};
inline constexpr int kNumSlotFormats = int(SlotFormat::boolean) + 1;

// A language's templates; an empty one means the operation is not compiled.
// Each computes exactly what the eager kernel of its operation computes, for
// every input: int32 arithmetic wraps around, int32 division by zero gives -1
// and remainder by zero the dividend, INT32_MIN / -1 gives INT32_MIN and
// INT32_MIN % -1 gives 0, shifts by a count outside [0, 32) give 0 (the sign
// fill for arithmetic right shifts), int32 integer_pow takes its exponent
// modulo 2^32 as an int32 and gives 1 / x^e truncated for a negative one (0
// unless x is 1 or -1), and float -> int32 truncates toward zero, saturates
// at the int32 range and takes NaN to 0. None of them may have
// undefined behaviour in the language (no C division by zero, no shift by 32).
struct LoopDialect {
  std::array<std::string_view, kNumUnaryOps> unary;                         // float {0}
  std::array<std::string_view, kNumBinaryOps> binary;                       // float {0}, {1}
  std::array<std::string_view, kNumUnaryOps> unary_int;                     // int32 {0}
  std::array<std::string_view, kNumBinaryOps> binary_int;                   // int32 {0}, {1}
  std::array<std::string_view, kNumCompareOps> compare_float, compare_int;  // -> mask
  std::string_view round_bf16;                                              // a float value rounded to bf16 precision
  std::string_view is_finite;                                               // float -> mask
  std::string_view integer_pow;                                             // float {0} to the integer power {1}
  std::string_view integer_pow_int;                                         // int32 {0} to the integer power {1}
  std::string_view select;                                                  // mask {0} ? {2} : {1}
  std::string_view select_int;                                              // the same over int32 cases
  std::string_view mask_to_float;                                           // 1 / 0
  std::string_view float_to_mask;                                           // != 0
  std::string_view int_to_float;
  std::string_view float_to_int;                  // toward zero, saturated, NaN -> 0
  std::string_view int_to_mask;                   // != 0
  std::string_view mask_to_int;                   // 1 / 0
  std::string_view let_float, let_int, let_mask;  // declare {0} = {1}
  // Per SlotFormat: a load of slot {0} at this iteration's index, a splat
  // (the slot's first element, read once before the loop), and a store of
  // value {0} into slot {1} at this iteration's index.
  std::array<std::string_view, kNumSlotFormats> load, splat, store;
};

// The statements of one run.
struct RenderedRun {
  std::vector<std::string> splats;  // before the loop: the splat operands
  std::vector<std::string> body;    // one iteration: loads, the instructions, stores
  std::vector<int> loaded, stored;  // slots whose memory the body reads / writes
};

// Whether the dialect renders instruction `ins` of `p` with these slot formats.
bool renderable(const LoopProgram& p, const FusedInstr& ins, std::span<const SlotFormat> formats,
                const LoopDialect& dialect);

// The statements of instructions [begin, end) of `p` (each renderable).
// formats[s] is slot s's memory format; a splat slot's operands come from
// the dialect's splat template.
RenderedRun render_run(const LoopProgram& p, int begin, int end, std::span<const SlotFormat> formats,
                       const LoopDialect& dialect);

}  // namespace pax

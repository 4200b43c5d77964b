// A fused loop as the compiler describes it, for any backend: a small program
// of elementwise instructions over numbered slots, computed for every element
// of a flat domain of `size` elements, with stores of some slots to outputs
// and possibly one trailing reduction. The fusion pass (fusion.h) builds one
// per fused group; a backend prepares it for execution (the CPU's
// cpu::FusedLoop, fused_loop.h) and may render runs of its instructions
// into source code for its compiler (loop_render.h).
//
// Slots are values of the domain: inputs read contiguously, inputs seen
// through a broadcast view (strides per dimension), single input elements
// splat over the domain, and instruction results. Every instruction computes
// exactly what the eager kernel of its operation computes for each element
// (16-bit floats widened to f32, computed, and rounded back), so a loop gives
// the bits that eager execution gives, however a backend runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pax/core/dtype.h"
#include "pax/ir/elementwise_ops.h"

namespace pax {

// Most dimensions of a broadcast view in a fused loop.
inline constexpr size_t kMaxFusedViewRank = 12;
// Most cases of a select_n instruction in a fused loop.
inline constexpr size_t kMaxFusedSelectCases = 16;

struct FusedSlot {
  enum class Kind : uint8_t {
    input,  // an input of `size` elements, read at the element's index
    view,   // an input seen through strides
    splat,  // one input element, the same for every index
    reg,    // an instruction result
  };
  Kind kind = Kind::reg;
  DType dtype = DType::f32;
  int arg = -1;  // input / view / splat: index into the loop's inputs
  // view: element i of the domain is input[sum_d index(i)[d] * strides[d]]
  // with index(i) the multi-index of i over `dims` (dims multiply to size).
  std::vector<int64_t> dims, strides;
  // splat of an int32 select_n selector: clamped to [0, clamp_hi] as the
  // select_n kernel does for a scalar selector (-1: no clamp).
  int64_t clamp_hi = -1;
  // Set by the backend when it prepares the loop (CPU: fused_loop.h).
  int reg = -1;       // view / splat / reg: scratch register
  uint8_t width = 0;  // bytes per element
  // A view read one segment of the domain at a time (LoopProgram::segment):
  // constant over each segment (a value per row, read as a splat) or
  // contiguous in the input over it (read in place).
  enum class Segment : uint8_t { none, splat, contiguous };
  Segment segment = Segment::none;
};

// Whether code reads the slot as one value for the whole run it is given:
// a splat, or a view constant over each segment.
inline bool read_as_splat(const FusedSlot& s) {
  return s.kind == FusedSlot::Kind::splat || s.segment == FusedSlot::Segment::splat;
}

// Drops size-1 dimensions of a view and merges adjacent dimensions that step
// through the input as one (the same elements in the same order); at least
// one dimension remains.
void coalesce_view(std::vector<int64_t>& dims, std::vector<int64_t>& strides);

struct FusedInstr {
  enum class Kind : uint8_t { unary, binary, compare, is_finite, integer_pow, convert, select_n };
  Kind kind = Kind::unary;
  uint8_t op = 0;                // UnaryOp / BinaryOp / CompareOp
  DType dtype = DType::f32;      // operand dtype (select_n: the selector's)
  DType out_dtype = DType::f32;  // result dtype
  int64_t exponent = 0;          // integer_pow
  int result = -1;               // slot written
  std::vector<int> args;         // slots read (select_n: selector, then cases)
};

// Stores slot `slot` into output `output` (an array of `size` elements).
struct FusedStore {
  int slot;
  int output;
  // A later loop of the same row sweep reads the value: its stores must
  // not bypass the cache (set by the compiler, row_sweep.h).
  bool keep_in_cache = false;
  // Set by the backend when it prepares the loop (CPU: fused_loop.h).
  bool stream = false;  // non-temporal stores (large outputs)
  // How the value reaches the output. When the instruction writes the
  // output itself, later reads of the slot read it.
  enum class Write : uint8_t {
    copy,    // computed into its register, copied at the end of each block
    direct,  // the last instruction writes it, in every block: its reads of
             // the block all precede its writes, so this holds in place too
    apart,   // its instruction writes it in blocks the task owns whole, when
             // no input of the call shares memory with an output
  };
  Write write = Write::copy;
};

struct FusedReduce {
  ReduceOp op = ReduceOp::sum;          // sum, max or min
  int slot = -1;                        // the reduced value (an instruction result)
  int64_t outer = 1, n = 1, inner = 1;  // the domain as (outer, n, inner); outer == 1 or inner == 1
  DType out_dtype = DType::f32;
  int output = -1;
};

struct LoopProgram {
  int64_t size = 0;  // elements of the loop domain
  std::vector<FusedSlot> slots;
  std::vector<FusedInstr> instrs;
  std::vector<FusedStore> stores;
  std::optional<FusedReduce> reduce;
  int num_inputs = 0;
  int num_outputs = 0;
  // Set by the backend: when > 0, compiled code runs over segments of the
  // domain that never cross a multiple of `segment` elements, and views
  // marked with a Segment are read per segment instead of gathered.
  int64_t segment = 0;
};

}  // namespace pax

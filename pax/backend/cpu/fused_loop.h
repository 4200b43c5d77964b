// A fused elementwise loop: a small register program that computes a group of
// elementwise operations (and optionally one trailing reduction) in a single
// pass over memory. The loop domain is a flat index space of `size` elements;
// it is cut into blocks of kFusedBlock elements, and every instruction runs
// the contiguous elementwise kernel of pax/backend/cpu/elementwise.h on one
// block held in a per-thread scratch register (a few KiB, so blocks stay in
// L1). Each element goes through the same kernels, in the same dtypes, as
// eager execution, so results are bit-identical to it (bf16 stays rounded
// per operation).
//
// A loop of several bf16 operations holds its bf16 values as f32 in the
// registers (`wide_bf16`): inputs are widened once per block, each operation
// runs an f32 kernel that rounds its results to bf16 precision as it writes
// them (elementwise.h), and stores narrow. The elementwise kernels compute bf16 exactly so (widen, f32
// operation, round), so the results are the same bits, without a conversion
// of every operand and result inside every kernel call.
//
// Inputs are read three ways: contiguously at the block's offset (`input`),
// through a broadcast view gathered per block (`view`), or as one element
// filled into a register once per task (`splat`). Stored values are copied
// from their slot to the output at the end of each block, after every read of
// the block (or written by the last instruction itself), so an output may
// share its buffer with a same-sized input that is read contiguously
// (in-place execution), when the loop has no reduction. Outputs of 4 MiB and
// more are written with non-temporal stores.
//
// A loop whose instructions form an accumulator chain (each combines the
// previous result with an input or a constant: add, sub, mul, div, max, min,
// neg, abs in f32 / f64) runs as one cpu::chain() per block instead, in
// vector registers (fused_kernels.h).
//
// The trailing reduction (sum / max / min) reduces the domain seen as
// (outer, n, inner):
//   inner == 1 (trailing axes): rows are cut into segments exactly as
//     cpu::reduce cuts them, each segment is computed into a tile and reduced
//     with cpu::reduce_rows, and the partials are combined by cpu::reduce:
//     bit-identical to the unfused reduction.
//   outer == 1 (leading axes): each task accumulates its rows into a partial
//     row with the elementwise kernels, and the partials are combined by
//     cpu::reduce. Integer results and max / min values are identical to the
//     unfused reduction; float sums are summed in another order (within a few
//     ulp), and the sign of a zero maximum / minimum may differ.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/fused_jit.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/backend/cpu/reduce.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

// Elements per block: a multiple of 512, the window in which the bf16 / f16
// staging and the sin / cos range check of the elementwise kernels work, so
// that blocks see exactly the windows eager execution sees.
inline constexpr int64_t kFusedBlock = 1024;
// Most dimensions of a broadcast view in a fused loop.
inline constexpr size_t kMaxFusedViewRank = 12;
// Most cases of a select_n instruction in a fused loop.
inline constexpr size_t kMaxFusedSelectCases = 16;

struct FusedSlot {
  enum class Kind : uint8_t {
    input,  // an input of `size` elements, read at the block's offset
    view,   // an input seen through strides, gathered into a register per block
    splat,  // one input element, filled into a register once per task
    reg,    // an instruction result in a register
  };
  Kind kind = Kind::reg;
  DType dtype = DType::f32;
  int arg = -1;  // input / view / splat: index into the loop's inputs
  int reg = -1;  // view / splat / reg: scratch register
  // view: element i of the domain is input[sum_d index(i)[d] * strides[d]]
  // with index(i) the multi-index of i over `dims` (dims multiply to size).
  std::vector<int64_t> dims, strides;
  // splat of an int32 select_n selector: clamped to [0, clamp_hi] as the
  // select_n kernel does for a scalar selector (-1: no clamp).
  int64_t clamp_hi = -1;
  uint8_t width = 0;  // bytes per element (set by finalize)
};

struct FusedInstr {
  enum class Kind : uint8_t { unary, binary, compare, is_finite, integer_pow, convert, select_n };
  Kind kind = Kind::unary;
  uint8_t op = 0;                 // UnaryOp / BinaryOp / CompareOp
  DType dtype = DType::f32;       // operand dtype (select_n: the selector's)
  DType out_dtype = DType::f32;   // result dtype
  int64_t exponent = 0;           // integer_pow
  int result = -1;                // slot written
  std::vector<int> args;          // slots read (select_n: selector, then cases)
};

// Stores slot `slot` into output `output` (an array of `size` elements) at
// the end of each block.
struct FusedStore {
  int slot;
  int output;
  bool stream = false;  // non-temporal stores (set by finalize for large outputs)
  // How the value reaches the output (set by finalize). When the
  // instruction writes the output itself, later reads of the slot read it.
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
  ReduceOp op = ReduceOp::sum;  // sum, max or min
  int slot = -1;                // the reduced value (a register slot)
  int64_t outer = 1, n = 1, inner = 1;  // outer == 1 or inner == 1
  DType out_dtype = DType::f32;
  int output = -1;
};

struct FusedProgram {
  int64_t size = 0;  // elements of the loop domain
  std::vector<FusedSlot> slots;
  std::vector<FusedInstr> instrs;
  std::vector<FusedStore> stores;
  std::optional<FusedReduce> reduce;
  // Set by finalize:
  std::vector<int> per_block;   // input and view slots, resolved per block
  // When every instruction combines the previous result with an input or a
  // constant (f32 / f64), the instructions run as one accumulator chain in
  // vector registers (fused_kernels.h): the first operand's slot, the steps
  // and each step's leaf slot (-1 for unary steps; leaves are set per block).
  int chain_first = -1;
  std::vector<ChainStep> chain_steps;
  std::vector<int> chain_leaves;
  int num_regs = 0;
  int64_t block = kFusedBlock;  // elements per block
  size_t reg_bytes = 0;  // bytes of one register
  // bf16 slots are held as f32 in registers (inputs then take a register
  // too), and bf16 operations run as f32 ones rounded to bf16.
  bool wide_bf16 = false;
  bool wide(const FusedSlot& s) const { return wide_bf16 && s.dtype == DType::bf16; }
  // Bytes of one element of the slot in a register.
  size_t reg_width(const FusedSlot& s) const { return wide(s) ? sizeof(float) : itemsize(s.dtype); }
  int num_inputs = 0;
  int num_outputs = 0;
  // Runs of instructions compiled to machine code (fused_jit.h); the others
  // are interpreted. Empty for accumulator chains.
  std::vector<FusedJitRun> jit_runs;

  // Assigns registers to view / splat / reg slots (liveness over the
  // instruction order; stored slots live to the end of the block), finds an
  // accumulator chain and checks the program. Call once after filling slots,
  // instrs, stores and reduce.
  void finalize();

 private:
  void find_chain();
};

// Whether a reduction of (outer, n, inner) can end a fused loop.
bool fusable_reduction(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner);

// Runs the program. inputs[k] / outputs[k] point at the loop's input and
// output arrays (outputs of `size` elements, or the reduction's result).
void run_fused(const FusedProgram& program, std::span<const void* const> inputs, std::span<void* const> outputs);

}  // namespace pax::cpu

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
// filled into a register once per task (`splat`). Where compiled code
// computes every instruction, views that are constant (a value per row) or
// contiguous (a bias) along runs of the domain are read in place instead:
// the code is called once per segment of the block that no run boundary
// crosses, with each such view as a splat or a pointer into its input. Stored values are copied
// from their slot to the output at the end of each block, after every read of
// the block (or written by the last instruction itself), so an output may
// share its buffer with a same-sized input that is read contiguously
// (in-place execution), when the loop has no reduction. Outputs that would
// not stay in the last-level cache (half of it, at least 4 MiB) are written
// with non-temporal stores.
//
// Runs of consecutive instructions are compiled into machine code that keeps
// their values in vector registers (fused_codegen.h): a generated C++
// function per run, built by the system compiler on a background thread and
// published into the program when ready. Until then (and where nothing is
// compiled) the interpreter above runs every instruction; both compute the
// same bits.
//
// A loop whose instructions form an accumulator chain (each combines the
// previous result with an input or a constant: add, sub, mul, div, max, min,
// neg, abs in f32 / f64) runs as one cpu::chain() per block instead, in
// vector registers (fused_kernels.h).
//
// run_row_sweep runs several loops over the same rows (a row sweep, see
// pax/compile/row_sweep.h) one tile of rows at a time, values that only the
// sweep reads held in a per-thread tile buffer.
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

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/backend/cpu/reduce.h"
#include "pax/compile/loop_program.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

// Elements per block: a multiple of 512, the window in which the bf16 / f16
// staging and the sin / cos range check of the elementwise kernels work, so
// that blocks see exactly the windows eager execution sees.
inline constexpr int64_t kFusedBlock = 1024;
// Most views of a loop that compiled code reads per segment.
inline constexpr size_t kMaxFusedSegmentViews = 16;

using ::pax::FusedInstr;
using ::pax::FusedReduce;
using ::pax::FusedSlot;
using ::pax::FusedStore;
using ::pax::kMaxFusedSelectCases;
using ::pax::kMaxFusedViewRank;

struct FusedCode;  // fused_codegen.h

// A loop program prepared for the CPU: registers laid out, stores planned, an
// accumulator chain found, and (from fused_codegen.h) compiled code for runs
// of its instructions once it is ready.
struct FusedLoop : LoopProgram {
  // Set by finalize:
  std::vector<int> per_block;  // input and view slots, resolved per block
  // When every instruction combines the previous result with an input or a
  // constant (f32 / f64), the instructions run as one accumulator chain in
  // vector registers (fused_kernels.h): the first operand's slot, the steps
  // and each step's leaf slot (-1 for unary steps; leaves are set per block).
  int chain_first = -1;
  std::vector<ChainStep> chain_steps;
  std::vector<int> chain_leaves;
  int num_regs = 0;
  int64_t block = kFusedBlock;  // elements per block
  size_t reg_bytes = 0;         // bytes of one register
  // bf16 slots are held as f32 in registers (inputs then take a register
  // too), and bf16 operations run as f32 ones rounded to bf16.
  bool wide_bf16 = false;
  bool wide(const FusedSlot& s) const { return wide_bf16 && s.dtype == DType::bf16; }
  // Bytes of one element of the slot in a register.
  size_t reg_width(const FusedSlot& s) const { return wide(s) ? sizeof(float) : itemsize(s.dtype); }
  // Runs of instructions [begin, end) that generated code computes once it
  // is compiled (fused_codegen.h); the others are interpreted. Empty for
  // accumulator chains.
  std::vector<std::pair<int, int>> compiled_runs;
  bool compiled_whole() const {
    return compiled_runs.size() == 1 && compiled_runs[0] == std::pair<int, int>(0, int(instrs.size()));
  }
  // The compiled functions of those runs, published once by the code
  // generator's thread (null until then: the interpreter runs every
  // instruction). Readers load it once per task.
  mutable std::atomic<const FusedCode*> code{nullptr};
  // When `segment` > 0 (LoopProgram): the views read per segment, and the
  // other slots whose pointers move through the block (inputs, registers).
  std::vector<int> segment_views, segment_moved;
  mutable std::shared_ptr<const FusedCode> code_owner;  // keeps `code` alive

  FusedLoop() = default;
  // The compiler's loop, to be prepared with finalize().
  explicit FusedLoop(const LoopProgram& loop) : LoopProgram(loop) {}
  // Copies share the compiled code published so far.
  FusedLoop(const FusedLoop& other);
  FusedLoop& operator=(const FusedLoop& other);

  // Assigns registers to view / splat / reg slots (liveness over the
  // instruction order; stored slots live to the end of the block), finds an
  // accumulator chain, chooses the runs to compile and checks the program.
  // Call once after filling slots, instrs, stores and reduce.
  void finalize();

 private:
  void find_chain();
  void choose_segments();
};

// Sets the output size from which loops prepared from now on stream their
// stores (0: half the last-level cache, at least 4 MiB); returns the previous
// setting. For tests of the streamed path.
size_t set_stream_bytes_for_testing(size_t bytes);

// Whether a reduction of (outer, n, inner) can end a fused loop.
bool fusable_reduction(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner);

// Runs the program. inputs[k] / outputs[k] point at the loop's input and
// output arrays (outputs of `size` elements, or the reduction's result). A
// reduction's partials are scratch from ctx, the context of the device the
// loop runs for.
void run_fused(const KernelContext& ctx, const FusedLoop& program, std::span<const void* const> inputs,
               std::span<void* const> outputs);

// One loop (or row reduction) of a row sweep (pax/compile/fusion.h,
// RowSweep) with its arrays.
// input_local / output_local name, per input and output, the sweep-local
// value it is (-1: none): a value of whole rows that only the sweep's loops
// read, kept in a per-thread buffer of one tile instead of its array.
struct SweepLoop {
  const FusedLoop* program;            // null: a reduction of input 0's rows into output 0
  ReduceOp reduce_op = ReduceOp::sum;  // program == null: the reduction
  DType reduce_dtype = DType::f32;
  std::span<const void* const> inputs;
  std::span<void* const> outputs;
  std::span<const int> input_local, output_local;
};

// Runs the loops of a row sweep over rows x row_len elements, one tile of
// whole rows at a time: each loop computes the tile (loops of `rows`
// elements: one element per row) before the next starts on it. A loop's
// reduction reduces each row of the tile as run_fused reduces it, so every
// value has the bits run_fused would give it. local_widths: bytes per
// element of each sweep-local value. ctx: the context of the device the
// sweep runs for (the sweep's tiles live in per-thread buffers that every
// sweep reuses, so it asks ctx for no scratch of its own).
void run_row_sweep(const KernelContext& ctx, std::span<const SweepLoop> loops, int64_t rows, int64_t row_len,
                   std::span<const size_t> local_widths);

}  // namespace pax::cpu

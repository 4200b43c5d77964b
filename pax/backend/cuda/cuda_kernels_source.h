// CUDA C kernels generated from the compiler's fused loops (LoopProgram,
// compile/loop_program.h) and row sweeps (RowSweep, compile/fusion.h), for
// NVRTC (nvrtc_compiler.h). Each kernel is a whole translation unit: the
// dialect's prelude (cuda_dialect.h) and one `extern "C" __global__` entry.
//
//   elementwise loops   a grid-stride loop over the domain, a chunk of V
//                       elements per thread and iteration: contiguous inputs
//                       and outputs move with 16-byte loads and stores
//                       (float4, 8 x bf16) when every pointer is aligned for
//                       them, and a scalar loop takes the rest; broadcast
//                       views are read at offsets computed from their dims
//                       and strides, splats once per thread.
//   row reductions      (inner == 1) a warp per row for rows of up to 1024
//                       elements (eight rows per block), a block of 256 or
//                       1024 threads per row above: thread t accumulates
//                       elements t, t + T, ... in order, the group combines
//                       in a fixed butterfly (cuda_dialect.h), so the result
//                       depends on the row length only, never on timing.
//   column reductions   (outer == 1, inner > 1) 32 columns per block, each
//                       column's rows split among G row groups (up to 32,
//                       and no more than the rows) that each accumulate in
//                       order, combined in group order.
//   row sweeps          one kernel for the loops of a sweep, a block (or a
//                       warp) per row: each loop finishes the row before the
//                       next starts on it (softmax's max, exp-sum and
//                       division read the logits from memory once per loop
//                       and nothing else: values between them go through
//                       global memory, read back from cache).
//
// Every instruction computes what the eager kernel computes: f32 math on
// widened bf16, rounded back to bf16 by every instruction with a bf16
// result, as the CPU's fused loops do. Sums of f32 and bf16 values
// accumulate in f32 (rounded once to a bf16 result), of int32 values with
// wrapping; max / min propagate NaN.
//
// The kernel's parameters: the loop's inputs (`const void*`, in the order of
// its slots' `arg`), then its outputs (`void*`, in FusedStore / FusedReduce
// `output` order), then `long long size`, the elements of the loop domain.
// A sweep's kernel takes each loop's inputs then outputs, loop after loop,
// then `long long size` (rows x row_len).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pax/compile/fusion.h"
#include "pax/compile/loop_program.h"
#include "pax/ir/jaxpr.h"

namespace pax::cuda {

// A kernel's source and how to launch it (one-dimensional blocks and grid).
struct CudaKernelSource {
  std::string source;  // the whole translation unit
  std::string name;    // its extern "C" __global__ entry
  int block_threads = 256;
  int64_t grid_blocks = 1;
  int num_params = 0;  // pointers and the size
  int64_t size = 0;    // the value of its `size` parameter
};

// "" when cuda_loop_kernel renders `p` (every instruction, store and its
// reduction); otherwise what it cannot render ("instruction 3 (pow of
// bf16) has no CUDA C form", "a reduction into f16").
std::string cuda_loop_problem(const LoopProgram& p);
inline bool cuda_renders(const LoopProgram& p) { return cuda_loop_problem(p).empty(); }

// Whether the kernels reduce (op) `dtype` values into `out_dtype`: sum, max
// or min of f32, bf16 or int32 values, into the reduced dtype or the dtype
// it accumulates in.
bool cuda_reduction_renders(ReduceOp op, DType dtype, DType out_dtype);

// The kernel of one fused loop (pax::Error when cuda_loop_problem names a
// problem).
CudaKernelSource cuda_loop_kernel(const LoopProgram& p, const std::string& name = "pax_loop");

// One loop of a row sweep: a fused loop over rows x row_len elements (that
// may end in a reduction of each row) or over one element per row, or
// (program == nullptr) a row reduction of input 0 (rows x row_len `dtype`
// values) into output 0 (rows `out_dtype` values).
struct CudaSweepLoop {
  const LoopProgram* program = nullptr;
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32, out_dtype = DType::f32;
};

// "" when cuda_sweep_kernel renders the sweep, else what it cannot render.
std::string cuda_sweep_problem(std::span<const CudaSweepLoop> loops, int64_t rows, int64_t row_len);

// The kernel of a row sweep over `rows` rows of `row_len` elements.
CudaKernelSource cuda_sweep_kernel(std::span<const CudaSweepLoop> loops, int64_t rows, int64_t row_len,
                                   const std::string& name = "pax_sweep");

// The loops of a schedule's row sweep, in order (its reshapes left out).
std::vector<CudaSweepLoop> cuda_sweep_loops(const Jaxpr& jaxpr, const StepSchedule& schedule, const RowSweep& sweep);

// Threads that reduce one row of n elements (32: a warp; 256 or 1024: a
// block), a function of n alone.
int cuda_row_group_threads(int64_t n);

}  // namespace pax::cuda

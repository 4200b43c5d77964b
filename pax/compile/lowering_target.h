// What the backend-neutral compiler asks of the backend it lowers a program
// for: which equations its kernels compute as typed, and which loops and
// reductions its fused-loop machinery can run. A backend's compile hook
// passes its own answers to lower() (the CPU's: backend/cpu/cpu_backend.cc);
// they are not part of the device table, since only that backend's compile
// hook asks them.
#pragma once

#include <cstdint>

#include "pax/core/dtype.h"
#include "pax/ir/elementwise_ops.h"
#include "pax/ir/jaxpr.h"

namespace pax {

struct LoopProgram;  // pax/compile/loop_program.h

struct LoweringTarget {
  // Whether the kernel of `eqn` (in `jaxpr`) computes it as typed; false
  // where the compiler should rewrite it (a 16-bit product the device cannot
  // multiply becomes converts around an f32 product: compile/passes/widen.cc).
  bool (*supports_op)(const Jaxpr& jaxpr, const Eqn& eqn);
  // Whether a fused loop may end in a reduction of the domain seen as
  // (outer, n, inner) of `dtype` values.
  bool (*fusable_reduction)(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner);
  // Whether a fused loop may run one tile of rows at a time inside a row
  // sweep (compile/row_sweep.h): each element's result may not depend on
  // where the loop's blocks start.
  bool (*tileable_loop)(const LoopProgram& program);
  // Whether a row sweep may reduce (op) rows of `n` `dtype` values into
  // `out_dtype`, one tile of rows at a time, with the bits of the unfused
  // reduction.
  bool (*row_reduction_in_sweep)(ReduceOp op, DType dtype, DType out_dtype, int64_t n);
  // Whether the kernel of dot_general `dot` (in `jaxpr`) adds a bias operand
  // inside its GEMM, so that the compiler folds a following bias add into
  // the product (compile/passes/bias.cc). Null: never.
  bool (*product_bias)(const Jaxpr& jaxpr, const Eqn& dot) = nullptr;
  // Whether that kernel multiplies the product by a same-shaped operand
  // inside its GEMM (compile/passes/multiplier.cc). Null: never.
  bool (*product_multiplier)(const Jaxpr& jaxpr, const Eqn& dot) = nullptr;
  // Whether that kernel applies a ReLU to its result itself, so that no loop
  // reads the product back (compile/passes/relu.cc). Null: never.
  bool (*product_relu)(const Jaxpr& jaxpr, const Eqn& dot) = nullptr;
};

}  // namespace pax

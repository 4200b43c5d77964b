// The CUDA backend's answers to the compiler (see cuda_lowering_target.h).
#include "pax/backend/cuda/cuda_lowering_target.h"

#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/gemm_plan.h"
#include "pax/compile/loop_program.h"
#include "pax/prims/dot_params.h"

namespace pax::cuda {
namespace {

// A 16-bit dot_general runs as typed where cuBLASLt has a kernel for it
// (bf16 and f16 operands into their own dtype or f32, accumulated in f32,
// rounded once): gemm_plan.h asks as the product's kernel asks. Where it has
// none, the compiler widens the operands to f32 in the program
// (compile/passes/widen.cc). Every other equation runs as typed.
bool cuda_supports_op(const Jaxpr& j, const Eqn& e) {
  if (e.prim != Prim::dot_general) return true;
  const AVal &lhs = j.aval(e.inputs[0]), &rhs = j.aval(e.inputs[1]), &out = j.aval(e.outputs[0]);
  if (lhs.dtype != DType::bf16 && lhs.dtype != DType::f16) return true;
  const GemmPlan plan = plan_gemm(dot_dims(e.params), lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, out.dtype);
  return plan.kind != GemmPlan::Kind::unsupported;
}

// Sums, maxima and minima of f32, bf16 and int32 values over leading or
// trailing axes (the kernels' row and column reductions).
bool cuda_fusable_reduction(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner) {
  if (n < 2 || outer < 1 || inner < 1 || (outer != 1 && inner != 1)) return false;
  return cuda_reduction_renders(op, dtype, dtype);
}

// A loop in a sweep is rendered into the sweep's kernel: one the kernels
// cannot render ends the sweep. Nothing in a kernel depends on where a tile
// of rows starts.
bool cuda_tileable_loop(const LoopProgram& p) { return cuda_renders(p); }

// A block (or a warp) reduces each row whole, in an order that depends on
// the row's length alone, and rounds the result once.
bool cuda_row_reduction_in_sweep(ReduceOp op, DType dtype, DType out_dtype, int64_t n) {
  return n >= 1 && cuda_reduction_renders(op, dtype, out_dtype);
}

}  // namespace

const LoweringTarget& cuda_lowering_target() {
  static const LoweringTarget target{
      .supports_op = cuda_supports_op,
      .fusable_reduction = cuda_fusable_reduction,
      .tileable_loop = cuda_tileable_loop,
      .row_reduction_in_sweep = cuda_row_reduction_in_sweep,
  };
  return target;
}

}  // namespace pax::cuda

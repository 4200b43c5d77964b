// dot_general on a CUDA device: the layout plan (gemm_plan.h) turned into
// cuBLASLt calls, with the operand or result transposes it asks for made by
// the device's transpose kernel in scratch memory. f32 products use TF32
// only when asked (matmul_precision.h).
#include <vector>

#include "pax/backend/cuda/cublaslt_gemm.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/gemm_plan.h"
#include "pax/backend/matmul_precision.h"
#include "pax/core/error.h"
#include "pax/prims/dot_params.h"

namespace pax::cuda {
namespace {

void dot_general_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const TensorView &a = in[0], &b = in[1], &o = out[0];
  // The compiler folds bias adds into products only for backends that ask
  // for it (LoweringTarget::product_bias), and multipliers likewise; this one
  // asks for neither yet.
  PAX_CHECK(!dot_has_bias(p), "dot_general on ", ctx.device, ": a bias operand is not supported here");
  PAX_CHECK(!dot_has_multiplier(p), "dot_general on ", ctx.device, ": a multiplier operand is not supported here");
  PAX_CHECK(!dot_has_relu(p), "dot_general on ", ctx.device, ": a ReLU epilogue is not supported here");
  GemmPlanOptions options;
  options.f32 = f32_products_in_tf32() ? F32Matmul::tf32 : F32Matmul::f32;
  const GemmPlan plan = plan_gemm(dot_dims(p), *a.shape, *b.shape, a.dtype, b.dtype, o.dtype, o.strides, options);
  if (plan.kind == GemmPlan::Kind::unsupported) PAX_FAIL("dot_general on ", ctx.device, ": ", plan.reason);
  KernelScratch scratch(ctx);
  const void* lhs = plan.lhs_perm.empty() ? a.data : scratch.transposed(a, plan.lhs_perm).data;
  const void* rhs = plan.rhs_perm.empty() ? b.data : scratch.transposed(b, plan.rhs_perm).data;
  TensorView result = o;
  if (!plan.out_perm.empty()) {
    std::vector<int64_t> dims;
    for (int64_t axis : plan.out_perm) dims.push_back(o.dim(axis));
    result = scratch.allocate(dims, o.dtype);
  }
  run_gemm_plan(plan, ctx.device.index, ctx.stream, lhs, rhs, result.data, context_workspace(ctx, scratch.buffers()));
  if (!plan.out_perm.empty()) {
    // The temporary transposed back: into the output, or where the output
    // is written with strides (a folded transpose), into a row-major
    // temporary copied through them.
    std::vector<int64_t> back(plan.out_perm.size());
    for (size_t i = 0; i < back.size(); ++i) back[size_t(plan.out_perm[i])] = int64_t(i);
    if (o.strides) {
      copy_into_strided(ctx, scratch.transposed(result, back), o.data, *o.strides);
    } else {
      transpose_into(ctx, result, o, back);
    }
  }
  // The scratch goes back to the stream-ordered allocator here:
  // only work queued after these calls can reuse it.
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({{Prim::dot_general, dot_general_kernel}});

}  // namespace
}  // namespace pax::cuda

// dot_general on a CUDA device: the layout plan (gemm_plan.h) turned into
// cuBLASLt calls, with the operand or result transposes it asks for made by
// the device's transpose kernel in scratch memory.
#include <memory>
#include <vector>

#include "pax/backend/cuda/cublaslt_gemm.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/gemm_plan.h"
#include "pax/core/error.h"
#include "pax/prims/dot_params.h"

namespace pax::cuda {
namespace {

// `x` transposed by `perm` into scratch: a contiguous array of shape x[perm].
void* transposed(const KernelContext& ctx, const TensorView& x, const std::vector<int64_t>& perm, Shape& shape,
                 std::vector<std::shared_ptr<Buffer>>& keep) {
  Ints dims;
  for (int64_t a : perm) dims.push_back(x.dim(a));
  shape = Shape(dims);
  keep.push_back(ctx.allocate_scratch(size_t(shape.numel()) * itemsize(x.dtype)));
  const TensorView in{x.data, x.shape, x.dtype};
  const TensorView out{keep.back()->data(), &shape, x.dtype};
  transpose_into(ctx, in, out, perm);
  return keep.back()->data();
}

void dot_general_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const TensorView &a = in[0], &b = in[1], &o = out[0];
  const GemmPlan plan = plan_gemm(dot_dims(p), *a.shape, *b.shape, a.dtype, b.dtype, o.dtype, o.strides);
  if (plan.kind == GemmPlan::Kind::unsupported) PAX_FAIL("dot_general on ", ctx.device, ": ", plan.reason);
  std::vector<std::shared_ptr<Buffer>> keep;
  Shape lhs_shape, rhs_shape, out_shape;
  const void* lhs = plan.lhs_perm.empty() ? a.data : transposed(ctx, a, plan.lhs_perm, lhs_shape, keep);
  const void* rhs = plan.rhs_perm.empty() ? b.data : transposed(ctx, b, plan.rhs_perm, rhs_shape, keep);
  void* result = o.data;
  if (!plan.out_perm.empty()) {
    // Only the compiler asks for outputs in another layout, and the CUDA
    // executable does not yet; a row-major output is the temporary's
    // transpose back.
    PAX_CHECK(!o.strides, "dot_general on ", ctx.device, ": a transposed result written through strides");
    Ints dims;
    for (int64_t axis : plan.out_perm) dims.push_back(o.dim(axis));
    out_shape = Shape(dims);
    keep.push_back(ctx.allocate_scratch(size_t(out_shape.numel()) * itemsize(o.dtype)));
    result = keep.back()->data();
  }
  run_gemm_plan(plan, ctx.device.index, ctx.stream, lhs, rhs, result, context_workspace(ctx, keep));
  if (!plan.out_perm.empty()) {
    std::vector<int64_t> back(plan.out_perm.size());
    for (size_t i = 0; i < back.size(); ++i) back[size_t(plan.out_perm[i])] = int64_t(i);
    transpose_into(ctx, TensorView{result, &out_shape, o.dtype}, o, back);
  }
  // The scratch in `keep` goes back to the stream-ordered allocator here:
  // only work queued after these calls can reuse it.
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({{Prim::dot_general, dot_general_kernel}});

}  // namespace
}  // namespace pax::cuda

// conv_general_dilated on a CUDA device: the plan of conv_plan.h run as the
// copies it asks for (conversions, transposes and the dilated, padded input
// made by the device's own kernels in scratch memory) around one cuDNN
// convolution. 16-bit operands cuDNN has no algorithm for are computed in
// f32 and rounded once, as the CPU's kernel does. f32 convolutions use TF32
// only when asked (matmul_precision.h).
#include <cuda_runtime_api.h>

#include "pax/backend/cuda/conv_plan.h"
#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cudnn_conv.h"
#include "pax/backend/matmul_precision.h"
#include "pax/core/error.h"
#include "pax/prims/conv_params.h"

namespace pax::cuda {
namespace {

// Runs `plan` with the operands `lhs`, `rhs` into `out`; false (nothing
// written) when cuDNN has no algorithm for its 16-bit compute dtype.
bool run_plan(const KernelContext& ctx, const ConvPlan& plan, const TensorView& lhs, const TensorView& rhs,
              const TensorView& out) {
  KernelScratch scratch(ctx);
  TensorView x = plan.converts_operands() ? scratch.converted(lhs, plan.compute_dtype) : lhs;
  TensorView w = plan.converts_operands() ? scratch.converted(rhs, plan.compute_dtype) : rhs;

  x = scratch.reshaped(x, plan.x_view_dims);
  if (!plan.x_perm.empty()) x = scratch.transposed(x, plan.x_perm);
  if (x.rank() == 5) x = scratch.reshaped(x, {x.dim(0), x.dim(1), x.dim(2), x.dim(3) * x.dim(4)});  // (n, H, W, G * C)
  if (!plan.x_pad.empty()) {
    const TensorView zero = scratch.allocate({}, plan.compute_dtype);
    PAX_CUDA_CHECK(cudaMemsetAsync(zero.data, 0, zero.nbytes(), static_cast<cudaStream_t>(ctx.stream)));
    const TensorView padded = scratch.allocate({plan.x_dims.begin(), plan.x_dims.end()}, plan.compute_dtype);
    run_cuda_kernel(Prim::pad, ctx, Params{{"padding_config", Ints(plan.x_pad.begin(), plan.x_pad.end())}}, {x, zero},
                    {padded});
    x = padded;
  }
  if (!plan.w_perm.empty()) w = scratch.transposed(w, plan.w_perm);

  const TensorView y =
      plan.result_in_temporary() ? scratch.allocate({plan.y_dims.begin(), plan.y_dims.end()}, plan.compute_dtype) : out;
  if (!run_cudnn_convolution(plan, ctx.device.index, ctx.stream, x.data, w.data, y.data,
                             context_workspace(ctx, scratch.buffers()))) {
    return false;
  }
  if (!plan.result_in_temporary()) return true;
  if (plan.converts_result()) {
    const TensorView laid_out = plan.y_perm.empty() ? y : scratch.transposed(y, plan.y_perm);
    run_cuda_kernel(Prim::convert_element_type, ctx, Params{{"new_dtype", plan.out_dtype}, {"weak_type", false}},
                    {laid_out}, {out});
  } else {
    transpose_into(ctx, y, out, plan.y_perm);
  }
  return true;
}

void conv_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                 std::span<const TensorView> out) {
  const TensorView &lhs = in[0], &rhs = in[1], &o = out[0];
  ConvPlan plan = plan_conv(conv_params(p), *lhs.shape, *rhs.shape, *o.shape, lhs.dtype, o.dtype,
                            f32_products_in_tf32() ? F32Matmul::tf32 : F32Matmul::f32);
  switch (plan.kind) {
    case ConvPlan::Kind::empty: return;
    case ConvPlan::Kind::zeros:
      PAX_CUDA_CHECK(cudaMemsetAsync(o.data, 0, o.nbytes(), static_cast<cudaStream_t>(ctx.stream)));
      return;
    case ConvPlan::Kind::conv: break;
  }
  if (run_plan(ctx, plan, lhs, rhs, o)) return;
  plan.compute_dtype = DType::f32;  // 16-bit operands cuDNN has no algorithm for
  PAX_CHECK(run_plan(ctx, plan, lhs, rhs, o), "conv_general_dilated on ", ctx.device, ": cuDNN cannot run ",
            plan.str());
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({{Prim::conv_general_dilated, conv_kernel}});

}  // namespace
}  // namespace pax::cuda

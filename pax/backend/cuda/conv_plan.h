// conv_general_dilated as a cuDNN convolution: the plan of copies that puts
// any convolution into the one form cuDNN's convolution takes (NHWC input,
// OHWI filter, NHWC output, symmetric zero padding, no input dilation,
// feature groups only), as a pure function of shapes and parameters so that
// it is tested on machines without a GPU (conv_plan_test.cc runs every plan
// through a host emulation of cuDNN).
//
// What cuDNN has no parameter for is rewritten into copies, in this order:
//   1. dtype: operands cuDNN cannot take as they are (integers, 16-bit
//      operands into an f32 result) are converted to the compute dtype;
//   2. the input into NHWC; batch groups become feature groups on the way
//      (lhs batch g * n + i becomes batch i, channels [g * C, (g + 1) * C));
//   3. input dilation, negative or asymmetric padding: the pad primitive's
//      kernel writes the dilated, padded input, and cuDNN pads nothing;
//   4. the filter into OHWI;
//   5. the result, computed in NHWC, into the output's layout and dtype.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_peak.h"
#include "pax/core/dtype.h"
#include "pax/core/shape.h"
#include "pax/prims/conv_params.h"

namespace pax::cuda {

struct ConvPlan {
  enum class Kind {
    conv,   // the copies and the cuDNN call below
    zeros,  // every sum is empty (no input features, an empty window or input): zeros
    empty,  // the output has no elements
  };
  Kind kind = Kind::empty;

  DType in_dtype = DType::f32, out_dtype = DType::f32;
  // The dtype cuDNN reads and writes: the operands' own where cuDNN takes it
  // and the output has it too, otherwise f32 (f64 for f64).
  DType compute_dtype = DType::f32;
  // f32 convolutions on tensor cores in TF32 (jax.default_matmul_precision
  // "tensorfloat32"); otherwise in f32 FMA.
  F32Matmul f32 = F32Matmul::f32;

  // Step 2. The input, read with dims `x_view_dims` (its own, with the
  // batch axis split into (groups, batch / groups) for batch groups),
  // transposed by `x_perm` into a contiguous NHWC array. Empty perm: the
  // input is NHWC already and is read in place.
  std::vector<int64_t> x_view_dims, x_perm;
  // Step 3. The pad primitive's padding_config ([lo, hi, interior] per NHWC
  // axis) applied to the NHWC input; empty: none.
  std::vector<int64_t> x_pad;
  // Step 4. The filter transposed by `w_perm` into contiguous OHWI; empty:
  // it is OHWI already.
  std::vector<int64_t> w_perm;

  // The cuDNN convolution (cross-correlation): input x_dims (N, H, W, C),
  // filter w_dims (K, R, S, C / groups), output y_dims (N, P, Q, K), all
  // contiguous; symmetric zero padding `pad`, `stride`, filter `dilation`.
  std::array<int64_t, 4> x_dims{}, w_dims{}, y_dims{};
  int64_t groups = 1;
  std::array<int64_t, 2> pad{0, 0}, stride{1, 1}, dilation{1, 1};

  // Step 5. The NHWC result transposed by `y_perm` into the output's layout;
  // empty: cuDNN writes the output itself (when its dtype is compute_dtype).
  std::vector<int64_t> y_perm;

  bool converts_operands() const { return in_dtype != compute_dtype; }
  bool converts_result() const { return out_dtype != compute_dtype; }
  // Whether cuDNN writes into a temporary rather than the output.
  bool result_in_temporary() const { return !y_perm.empty() || converts_result(); }
  // "conv bf16 -> f32 (compute f32) x[2,8,8,4] w[...] ..." for errors and logs.
  std::string str() const;
};

// The plan of conv_general_dilated(lhs, rhs) with parameters `c` giving an
// output of shape `out` and dtype `out_dtype`. The shapes must be ones the
// primitive's shape rule accepted.
ConvPlan plan_conv(const ConvParams& c, const Shape& lhs, const Shape& rhs, const Shape& out, DType in_dtype,
                   DType out_dtype, F32Matmul f32 = F32Matmul::f32);

}  // namespace pax::cuda

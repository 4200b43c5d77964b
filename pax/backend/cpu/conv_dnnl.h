// 2-D convolution and transposed convolution through oneDNN on strided views
// of the user's tensors (any axis order: NCHW, NHWC, OIHW, HWIO, ...). oneDNN
// picks its preferred layouts; the operands are reordered from and to the
// user's layouts only where those differ. Primitives and reorders are cached.
#pragma once

#include <array>
#include <cstdint>

#include "pax/backend/kernel.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

// A rank-4 view with its axes in logical order, (N, C, H, W) for activations
// and (O, I, KH, KW) for weights (I = input features per group); strides in
// elements, any order.
struct ConvTensor {
  void* data = nullptr;  // read-only for inputs
  DType dtype = DType::f32;
  std::array<int64_t, 4> dims{}, strides{};
};

struct ConvGeometry {
  int64_t groups = 1;
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> dilation{1, 1};              // kernel dilation, XLA's convention (1 = dense)
  std::array<int64_t, 2> pad_lo{0, 0}, pad_hi{0, 0};  // >= 0
  // Transposed convolution (oneDNN deconvolution): dst[o] += src[i] * w[k] for
  // o = i * stride - pad_lo + k * dilation; otherwise the forward convolution
  // dst[o] += src[o * stride - pad_lo + k * dilation] * w[k].
  bool transposed = false;
};

// dst = conv(src, weights). src and weights have one dtype (f32 or bf16,
// accumulated in f32); dst is f32 or that dtype. Reordered operands and
// oneDNN's scratchpad take their memory from ctx. All sizes must be > 0 and
// consistent with the geometry (dst's spatial sizes as oneDNN computes them).
// Returns false, writing nothing, when oneDNN has no optimised kernel for
// bf16 operands of these shapes on this CPU (asked once per shape, cached);
// pax::Error when it cannot create an f32 one.
bool conv2d_dnnl(const KernelContext& ctx, const ConvGeometry& geometry, const ConvTensor& src,
                 const ConvTensor& weights, const ConvTensor& dst);

// The same convolution y = conv(x, w) when it is the weight gradient of
// another one (the form a convolution's VJP gives it: a window as large as
// the other's output, the output as small as its kernel), computed by
// oneDNN's backward-by-weights primitive, which is made for that shape
// (the forward primitive runs it as a convolution with a huge kernel).
// Returns false, writing nothing, when oneDNN cannot express or has no
// optimised kernel for it; the caller then runs conv2d_dnnl.
bool conv2d_weight_gradient_dnnl(const KernelContext& ctx, const ConvGeometry& geometry, const ConvTensor& x,
                                 const ConvTensor& w, const ConvTensor& y);

}  // namespace pax::cpu

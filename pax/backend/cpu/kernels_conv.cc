// The CPU kernel of conv_general_dilated. It runs oneDNN's convolution
// (conv_dnnl.h) on strided views of the user's layouts; what oneDNN has no
// parameter for is rewritten first: negative padding crops the input view,
// lhs dilation becomes a transposed convolution (or an explicitly dilated
// input), batch groups become feature groups, and dtypes other than f32 /
// bf16 are computed in f32.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "pax/backend/cpu/conv_dnnl.h"
#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/buffer.h"
#include "pax/core/parallel.h"
#include "pax/core/error.h"
#include "pax/prims/conv_params.h"

namespace pax::cpu {
namespace {

// The view of a tensor with its axes in logical order given by `spec`.
cpu::ConvTensor logical_view(const TensorView& t, const Ints& spec) {
  const std::vector<int64_t> strides = t.shape->strides();
  cpu::ConvTensor c{t.data, t.dtype, {}, {}};
  for (size_t i = 0; i < 4; ++i) {
    c.dims[i] = t.dim(spec[i]);
    c.strides[i] = strides[size_t(spec[i])];
  }
  return c;
}

int64_t numel(const cpu::ConvTensor& t) { return t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3]; }

char* element(const cpu::ConvTensor& t, int64_t offset) {
  return static_cast<char*>(t.data) + offset * int64_t(itemsize(t.dtype));
}

using Scratch = KernelTemporaries;

// Same layout, another dtype: the operand's buffer is contiguous, so element
// positions do not move.
cpu::ConvTensor converted(const TensorView& raw, cpu::ConvTensor t, DType dtype, Scratch& scratch) {
  t.data = scratch.allocate(raw.numel(), dtype);
  cpu::convert_parallel(raw.dtype, raw.data, dtype, t.data, raw.numel());
  t.dtype = dtype;
  return t;
}

// Copies `t` into a contiguous buffer whose memory order is `order` (logical
// axes, outermost first).
cpu::ConvTensor relayout(const cpu::ConvTensor& t, std::array<int64_t, 4> order, Scratch& scratch) {
  cpu::ConvTensor out{scratch.allocate(numel(t), t.dtype), t.dtype, t.dims, {}};
  int64_t stride = 1;
  for (size_t i = 4; i-- > 0;) {
    out.strides[size_t(order[i])] = stride;
    stride *= t.dims[size_t(order[i])];
  }
  cpu::strided_copy(itemsize(t.dtype), t.dims, t.data, t.strides, out.data, out.strides);
  return out;
}

// Batch groups as feature groups: lhs batch b * (N / G) + n becomes batch n,
// feature b * C + c, in a (N / G, H, W, G * C) buffer.
cpu::ConvTensor batch_groups_to_features(const cpu::ConvTensor& x, int64_t groups, Scratch& scratch) {
  const int64_t n = x.dims[0] / groups, c = x.dims[1], h = x.dims[2], w = x.dims[3];
  cpu::ConvTensor out{scratch.allocate(numel(x), x.dtype),
                      x.dtype,
                      {n, groups * c, h, w},
                      {h * w * groups * c, 1, w * groups * c, groups * c}};
  const std::array<int64_t, 5> dims{n, groups, c, h, w};
  const std::array<int64_t, 5> src{x.strides[0], n * x.strides[0], x.strides[1], x.strides[2], x.strides[3]};
  const std::array<int64_t, 5> dst{out.strides[0], c, 1, out.strides[2], out.strides[3]};
  cpu::strided_copy(itemsize(x.dtype), dims, x.data, src, out.data, dst);
  return out;
}

// The input dilated by `dilation` and padded by (lo, hi) (negative crops), in a
// zero-filled (N, Hp, Wp, C) buffer; the convolution then needs no padding.
cpu::ConvTensor dilate_and_pad(const cpu::ConvTensor& x, const ConvParams& c, Scratch& scratch) {
  std::array<int64_t, 2> padded{}, first{}, last{};
  for (int64_t i = 0; i < kConvSpatial; ++i) {
    const int64_t size = x.dims[size_t(2 + i)], d = c.lhs_dilation[size_t(i)], lo = c.lo(i);
    padded[size_t(i)] = dilated_size(size, d) + lo + c.hi(i);
    // Input rows [first, last) land inside the padded extent at r * d + lo.
    first[size_t(i)] = lo >= 0 ? 0 : (-lo + d - 1) / d;
    last[size_t(i)] = std::min(size, floor_div(padded[size_t(i)] - 1 - lo, d) + 1);
  }
  const int64_t n = x.dims[0], ch = x.dims[1], hp = padded[0], wp = padded[1];
  cpu::ConvTensor out{nullptr, x.dtype, {n, ch, hp, wp}, {hp * wp * ch, 1, wp * ch, ch}};
  out.data = scratch.allocate(numel(out), x.dtype);
  const uint64_t zero = 0;
  cpu::fill(itemsize(x.dtype), &zero, out.data, numel(out));
  if (last[0] <= first[0] || last[1] <= first[1]) return out;
  const std::array<int64_t, 4> dims{n, ch, last[0] - first[0], last[1] - first[1]};
  const std::array<int64_t, 4> dst_strides{out.strides[0], 1, c.lhs_dilation[0] * out.strides[2],
                                           c.lhs_dilation[1] * out.strides[3]};
  const int64_t src_offset = first[0] * x.strides[2] + first[1] * x.strides[3];
  const int64_t dst_offset = (first[0] * c.lhs_dilation[0] + c.lo(0)) * out.strides[2] +
                             (first[1] * c.lhs_dilation[1] + c.lo(1)) * out.strides[3];
  cpu::strided_copy(itemsize(x.dtype), dims, element(x, src_offset), x.strides, element(out, dst_offset), dst_strides);
  return out;
}

// The kernel with both spatial axes reversed, contiguous (O, I, KH, KW).
cpu::ConvTensor flipped(const cpu::ConvTensor& w, Scratch& scratch) {
  cpu::ConvTensor src = w;
  src.data = element(w, (w.dims[2] - 1) * w.strides[2] + (w.dims[3] - 1) * w.strides[3]);
  src.strides[2] = -w.strides[2];
  src.strides[3] = -w.strides[3];
  return relayout(src, {0, 1, 2, 3}, scratch);
}

bool run_conv(const KernelContext& ctx, const ConvParams& c, cpu::ConvTensor x, cpu::ConvTensor w,
              const cpu::ConvTensor& y, std::span<const TensorView> in, const TensorView& o, DType cd);

// f64 operands: oneDNN has no f64 convolution, and rounding them to f32 would
// lose the digits an f64 program asks for, so the sums run here in f64, one
// (batch, output feature) plane per task. Views are logical NCHW / OIHW with
// element strides.
void conv_f64(const ConvParams& c, const cpu::ConvTensor& x, const cpu::ConvTensor& w, const cpu::ConvTensor& y) {
  const int64_t batch = y.dims[0], features = y.dims[1], oh_n = y.dims[2], ow_n = y.dims[3];
  const int64_t in_per_group = w.dims[1], kh_n = w.dims[2], kw_n = w.dims[3], h_n = x.dims[2], w_n = x.dims[3];
  const int64_t per_feature_group = features / c.feature_group_count;
  const int64_t per_batch_group = features / c.batch_group_count;
  const auto* xs = static_cast<const double*>(x.data);
  const auto* ws = static_cast<const double*>(w.data);
  auto* ys = static_cast<double*>(y.data);
  // The input position of output position `o` and kernel tap `k` on spatial
  // axis `a`, or -1 where it falls on padding or between dilated inputs.
  auto source = [&c](int a, int64_t o, int64_t k, int64_t size) -> int64_t {
    const int64_t at = o * c.window_strides[size_t(a)] - c.lo(a) + k * c.rhs_dilation[size_t(a)];
    const int64_t ld = c.lhs_dilation[size_t(a)];
    if (at < 0 || at % ld != 0 || at / ld >= size) return -1;
    return at / ld;
  };
  parallel_for(batch * features, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / features, f = t % features;
      const int64_t xn = (f / per_batch_group) * batch + n;
      const int64_t c0 = (f / per_feature_group) * in_per_group;
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          double sum = 0;
          for (int64_t kh = 0; kh < kh_n; ++kh) {
            const int64_t ih = source(0, oh, kh, h_n);
            if (ih < 0) continue;
            for (int64_t kw = 0; kw < kw_n; ++kw) {
              const int64_t iw = source(1, ow, kw, w_n);
              if (iw < 0) continue;
              for (int64_t i = 0; i < in_per_group; ++i) {
                sum += xs[xn * x.strides[0] + (c0 + i) * x.strides[1] + ih * x.strides[2] + iw * x.strides[3]] *
                       ws[f * w.strides[0] + i * w.strides[1] + kh * w.strides[2] + kw * w.strides[3]];
              }
            }
          }
          ys[n * y.strides[0] + f * y.strides[1] + oh * y.strides[2] + ow * y.strides[3]] = sum;
        }
      }
    }
  });
}

void conv_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                 std::span<const TensorView> out) {
  const TensorView& o = out[0];
  if (o.numel() == 0) return;
  const ConvParams c = conv_params(p);
  cpu::ConvTensor x = logical_view(in[0], c.lhs_spec), w = logical_view(in[1], c.rhs_spec);
  cpu::ConvTensor y = logical_view(o, c.out_spec);
  auto zero_output = [&] { std::memset(o.data, 0, o.nbytes()); };
  // Empty sums (no input features or an empty window) and inputs that are all
  // padding give zeros.
  if (w.dims[1] == 0 || w.dims[2] == 0 || w.dims[3] == 0 || x.dims[2] == 0 || x.dims[3] == 0) return zero_output();

  if (x.dtype == DType::f64) return conv_f64(c, x, w, y);
  // Computed in bf16 where oneDNN has a kernel for it on this CPU, otherwise
  // (f16, and bf16 below AVX-512) widened to f32, accumulated in f32 as the
  // native kernels accumulate, and rounded to the output dtype.
  const bool native_bf16 = x.dtype == DType::bf16;
  if (!run_conv(ctx, c, x, w, y, in, o, native_bf16 ? DType::bf16 : DType::f32)) {
    PAX_CHECK(native_bf16 && run_conv(ctx, c, x, w, y, in, o, DType::f32),
              "conv_general_dilated: oneDNN has no f32 convolution for input dims ", ints_str(x.dims));
  }
}

// The convolution computed in dtype cd; false when oneDNN has no optimised
// kernel for cd on this CPU (nothing is written then).
bool run_conv(const KernelContext& ctx, const ConvParams& c, cpu::ConvTensor x, cpu::ConvTensor w,
              const cpu::ConvTensor& y, std::span<const TensorView> in, const TensorView& o, DType cd) {
  auto zero_output = [&] {
    std::memset(o.data, 0, o.nbytes());
    return true;
  };
  Scratch scratch(ctx);
  if (x.dtype != cd) {
    x = converted(in[0], x, cd, scratch);
    w = converted(in[1], w, cd, scratch);
  }
  cpu::ConvTensor y_dnnl = y;  // oneDNN writes f32 or the compute dtype
  const bool direct_out = o.dtype == DType::f32 || o.dtype == cd;
  if (!direct_out) {
    y_dnnl.data = scratch.allocate(o.numel(), DType::f32);
    y_dnnl.dtype = DType::f32;
  }

  cpu::ConvGeometry g;
  g.groups = c.feature_group_count;
  if (c.batch_group_count > 1) {
    x = batch_groups_to_features(x, c.batch_group_count, scratch);
    g.groups = c.batch_group_count;
  }
  std::array<int64_t, 2> window{};
  bool lhs_dilated = false, unit_strides = true;
  for (size_t i = 0; i < 2; ++i) {
    g.strides[i] = c.window_strides[i];
    g.dilation[i] = c.rhs_dilation[i];
    g.pad_lo[i] = c.lo(int64_t(i));
    g.pad_hi[i] = c.hi(int64_t(i));
    window[i] = dilated_size(w.dims[2 + i], c.rhs_dilation[i]);
    lhs_dilated = lhs_dilated || c.lhs_dilation[i] > 1;
    unit_strides = unit_strides && c.window_strides[i] == 1;
  }

  if (!lhs_dilated) {
    // Negative padding crops the input view.
    for (size_t i = 0; i < 2; ++i) {
      const int64_t crop_lo = std::min(std::max<int64_t>(-g.pad_lo[i], 0), x.dims[2 + i]);
      x.data = element(x, crop_lo * x.strides[2 + i]);
      x.dims[2 + i] -= crop_lo;
      g.pad_lo[i] += crop_lo;
      const int64_t crop_hi = std::min(std::max<int64_t>(-g.pad_hi[i], 0), x.dims[2 + i]);
      x.dims[2 + i] -= crop_hi;
      g.pad_hi[i] += crop_hi;
      if (x.dims[2 + i] == 0) return zero_output();
    }
  } else {
    // out[o] = sum_k x[i] w[k] over o = i * lhs_dilation + lo - k * rhs_dilation
    // is a transposed convolution with the kernel reversed (when the window
    // stride is 1 and the equivalent padding is not negative).
    std::array<int64_t, 2> pad_l{}, pad_r{};
    for (size_t i = 0; i < 2; ++i) {
      pad_l[i] = window[i] - 1 - g.pad_lo[i];
      pad_r[i] = window[i] - 1 - g.pad_hi[i];
    }
    if (unit_strides && std::min({pad_l[0], pad_l[1], pad_r[0], pad_r[1]}) >= 0) {
      g.transposed = true;
      g.strides = {c.lhs_dilation[0], c.lhs_dilation[1]};
      g.pad_lo = pad_l;
      g.pad_hi = pad_r;
      w = flipped(w, scratch);
    } else {
      x = dilate_and_pad(x, c, scratch);
      g.pad_lo = g.pad_hi = {0, 0};
    }
  }

  // A window larger than the output in both axes: a weight gradient (the form
  // conv_ad.cc's rhs_cotangent builds), for oneDNN's backward-by-weights.
  const bool weight_gradient = w.dims[2] > y_dnnl.dims[2] && w.dims[3] > y_dnnl.dims[3];
  if (!(weight_gradient && cpu::conv2d_weight_gradient_dnnl(ctx, g, x, w, y_dnnl)) &&
      !cpu::conv2d_dnnl(ctx, g, x, w, y_dnnl)) {
    return false;
  }
  if (!direct_out) cpu::convert_parallel(DType::f32, y_dnnl.data, o.dtype, o.data, o.numel());
  return true;
}

}  // namespace

void register_conv_kernels(CpuKernelTable& t) { t[size_t(Prim::conv_general_dilated)] = conv_kernel; }

}  // namespace pax::cpu

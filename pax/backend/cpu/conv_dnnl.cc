// oneDNN (de)convolution on strided views, with cached primitives and reorders
// (see conv_dnnl.h).
#include "pax/backend/cpu/conv_dnnl.h"

#include <memory>

#include "pax/backend/cpu/dnnl_context.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"
#include "pax/core/shape.h"

namespace pax::cpu {
namespace {

constexpr int64_t kConvTag = 2;
constexpr int64_t kConvWeightGradientTag = 4;

// A primitive's view of one operand: the user's layout, the layout the
// primitive computes in, and the reorder between them when they differ.
struct Layout {
  dnnl::memory::desc user, internal;
  dnnl::reorder reorder;
  bool needs_reorder = false;
};

struct ConvEntry {
  bool supported = false;  // an optimised kernel exists for these dtypes and shapes
  dnnl::primitive prim;
  Layout src, weights, dst;
  size_t scratchpad_bytes = 0;
};

dnnl::memory::desc tensor_md(const ConvTensor& t) {
  return strided_md({t.dims.begin(), t.dims.end()}, {t.strides.begin(), t.strides.end()}, t.dtype);
}

// oneDNN's grouped weights are (G, O/G, I, KH, KW): the O axis split in two.
dnnl::memory::desc weights_md(const ConvTensor& w, int64_t groups) {
  if (groups == 1) return tensor_md(w);
  const auto& d = w.dims;
  const auto& s = w.strides;
  return strided_md({groups, d[0] / groups, d[1], d[2], d[3]}, {d[0] / groups * s[0], s[0], s[1], s[2], s[3]}, w.dtype);
}

dnnl::memory::desc any_md(const dnnl::memory::desc& md) {
  return dnnl::memory::desc(md.dims(), md.data_type(), dnnl::memory::format_tag::any);
}

// from -> to, or to -> from for outputs.
Layout make_layout(const dnnl::memory::desc& user, const dnnl::memory::desc& internal, bool is_output) {
  Layout l{user, internal, {}, !(user == internal)};
  if (l.needs_reorder) {
    dnnl::engine& e = dnnl_engine();
    l.reorder = is_output ? dnnl::reorder(dnnl::reorder::primitive_desc(e, internal, e, user))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, internal));
  }
  return l;
}

template <class PrimitiveDesc, class Primitive>
ConvEntry finish(const PrimitiveDesc& pd, const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                 const dnnl::memory::desc& dst) {
  ConvEntry e;
  // 16-bit operands are widened by the caller rather than run by oneDNN's
  // reference code (which is what it offers for them below AVX-512).
  if (src.data_type() != dnnl::memory::data_type::f32 && is_reference_impl(pd)) return e;
  e.supported = true;
  e.prim = Primitive(pd);
  e.src = make_layout(src, pd.src_desc(), false);
  e.weights = make_layout(weights, pd.weights_desc(), false);
  e.dst = make_layout(dst, pd.dst_desc(), true);
  e.scratchpad_bytes = pd.scratchpad_desc().get_size();
  return e;
}

ConvEntry make_conv(const ConvGeometry& g, const ConvTensor& src, const ConvTensor& weights, const ConvTensor& dst) {
  const dnnl::memory::desc src_md = tensor_md(src), weights_md_ = weights_md(weights, g.groups),
                           dst_md = tensor_md(dst);
  const dnnl::memory::dims strides{g.strides[0], g.strides[1]};
  const dnnl::memory::dims dilates{g.dilation[0] - 1, g.dilation[1] - 1};
  const dnnl::memory::dims pad_l{g.pad_lo[0], g.pad_lo[1]}, pad_r{g.pad_hi[0], g.pad_hi[1]};
  try {
    if (g.transposed) {
      dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                             any_md(src_md), any_md(weights_md_), any_md(dst_md), strides, dilates,
                                             pad_l, pad_r);
      dnnl::deconvolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine());
      return finish<decltype(pd), dnnl::deconvolution_forward>(pd, src_md, weights_md_, dst_md);
    }
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         any_md(src_md), any_md(weights_md_), any_md(dst_md), strides, dilates, pad_l,
                                         pad_r);
    dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), dnnl_engine());
    return finish<decltype(pd), dnnl::convolution_forward>(pd, src_md, weights_md_, dst_md);
  } catch (const dnnl::error& e) {
    if (src.dtype != DType::f32) return ConvEntry{};  // no kernel for 16-bit operands on this CPU
    PAX_FAIL("conv_general_dilated: oneDNN cannot create the ", g.transposed ? "deconvolution" : "convolution",
             " for input dims ", ints_str(src.dims), " weights ", ints_str(weights.dims), " output ",
             ints_str(dst.dims), ": ", e.what());
  }
}

// The operand's memory in the primitive's layout (reordered into scratch
// from the kernel's context, which `keep` holds, when the layouts differ).
dnnl::memory internal_input(const KernelContext& ctx, const Layout& l, const void* data,
                            std::shared_ptr<Buffer>& keep) {
  dnnl::memory user = user_memory(l.user, data);
  if (!l.needs_reorder) return user;
  keep = ctx.allocate_scratch(l.internal.get_size());
  dnnl::memory internal = user_memory(l.internal, keep->data());
  dnnl_execute(l.reorder, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, internal}});
  return internal;
}

void append(DnnlKey& key, const ConvTensor& t) {
  key.insert(key.end(), t.dims.begin(), t.dims.end());
  key.insert(key.end(), t.strides.begin(), t.strides.end());
  key.push_back(int64_t(t.dtype));
}

}  // namespace

bool conv2d_dnnl(const KernelContext& ctx, const ConvGeometry& g, const ConvTensor& src, const ConvTensor& weights,
                 const ConvTensor& dst) {
  DnnlKey key{kConvTag,    g.groups,    g.strides[0], g.strides[1], g.dilation[0],        g.dilation[1],
              g.pad_lo[0], g.pad_lo[1], g.pad_hi[0],  g.pad_hi[1],  int64_t(g.transposed)};
  append(key, src);
  append(key, weights);
  append(key, dst);
  auto e = dnnl_cached<ConvEntry>(key, [&] { return make_conv(g, src, weights, dst); });
  if (!e->supported) return false;

  std::shared_ptr<Buffer> src_tmp, weights_tmp, dst_tmp;
  dnnl::memory src_mem = internal_input(ctx, e->src, src.data, src_tmp);
  dnnl::memory weights_mem = internal_input(ctx, e->weights, weights.data, weights_tmp);
  dnnl::memory dst_user = user_memory(e->dst.user, dst.data);
  dnnl::memory dst_mem = dst_user;
  if (e->dst.needs_reorder) {
    dst_tmp = ctx.allocate_scratch(e->dst.internal.get_size());
    dst_mem = user_memory(e->dst.internal, dst_tmp->data());
  }
  dnnl_execute(ctx, e->prim, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, weights_mem}, {DNNL_ARG_DST, dst_mem}},
               e->scratchpad_bytes);
  if (e->dst.needs_reorder) dnnl_execute(e->dst.reorder, {{DNNL_ARG_FROM, dst_mem}, {DNNL_ARG_TO, dst_user}});
  return true;
}

namespace {

// A view with its two leading logical axes exchanged.
ConvTensor swap_leading(const ConvTensor& t) {
  ConvTensor s = t;
  std::swap(s.dims[0], s.dims[1]);
  std::swap(s.strides[0], s.strides[1]);
  return s;
}

struct WeightGradientEntry {
  bool supported = false;
  dnnl::primitive prim;
  Layout src, diff_dst, diff_weights;
  size_t scratchpad_bytes = 0;
};

WeightGradientEntry make_weight_gradient(const dnnl::memory::dims& strides, const dnnl::memory::dims& dilates,
                                         const dnnl::memory::dims& pad_l, const dnnl::memory::dims& pad_r,
                                         const ConvTensor& src, const ConvTensor& diff_dst,
                                         const ConvTensor& diff_weights) {
  WeightGradientEntry e;
  const dnnl::memory::desc src_md = tensor_md(src), dst_md = tensor_md(diff_dst), wei_md = tensor_md(diff_weights);
  try {
    dnnl::convolution_forward::desc fwd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        any_md(src_md), any_md(wei_md), any_md(dst_md), strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc hint(fwd, dnnl_engine());
    dnnl::convolution_backward_weights::desc bwd(dnnl::algorithm::convolution_direct, any_md(src_md), any_md(wei_md),
                                                 any_md(dst_md), strides, dilates, pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(bwd, user_scratchpad_attr(), dnnl_engine(), hint);
    if (is_reference_impl(pd)) return e;
    e.prim = dnnl::convolution_backward_weights(pd);
    e.src = make_layout(src_md, pd.src_desc(), false);
    e.diff_dst = make_layout(dst_md, pd.diff_dst_desc(), false);
    e.diff_weights = make_layout(wei_md, pd.diff_weights_desc(), true);
    e.scratchpad_bytes = pd.scratchpad_desc().get_size();
    e.supported = true;
  } catch (const dnnl::error&) {
    // Not expressible for oneDNN: the caller runs the forward form.
  }
  return e;
}

}  // namespace

bool conv2d_weight_gradient_dnnl(const KernelContext& ctx, const ConvGeometry& g, const ConvTensor& x,
                                 const ConvTensor& w, const ConvTensor& y) {
  if (g.transposed || g.groups != 1) return false;
  // The forward convolution y = x * w (x: (B, C, H, W), w: (O, C, KH, KW))
  // sums over C and the window. As the weight gradient of a convolution of
  // images (N, C', H, W) = x with its leading axes exchanged, by the
  // gradient (N, O', OH', OW') = w likewise: diff_weights (O', C', KH', KW')
  // is y likewise, with strides and dilations exchanged.
  const ConvTensor src = swap_leading(x), diff_dst = swap_leading(w), diff_weights = swap_leading(y);
  dnnl::memory::dims strides(2), dilates(2), pad_l(2), pad_r(2);
  for (size_t i = 0; i < 2; ++i) {
    strides[i] = g.dilation[i];
    dilates[i] = g.strides[i] - 1;
    pad_l[i] = g.pad_lo[i];
    // What makes the sizes consistent: (KH-1) s + (OH-1) d + 1 = H + lo + hi.
    pad_r[i] = (diff_dst.dims[2 + i] - 1) * g.dilation[i] + (diff_weights.dims[2 + i] - 1) * g.strides[i] + 1 -
               src.dims[2 + i] - g.pad_lo[i];
    if (pad_l[i] < 0 || pad_r[i] < 0) return false;
  }
  DnnlKey key{
      kConvWeightGradientTag, strides[0], strides[1], dilates[0], dilates[1], pad_l[0], pad_l[1], pad_r[0], pad_r[1]};
  append(key, src);
  append(key, diff_dst);
  append(key, diff_weights);
  auto e = dnnl_cached<WeightGradientEntry>(
      key, [&] { return make_weight_gradient(strides, dilates, pad_l, pad_r, src, diff_dst, diff_weights); });
  if (!e->supported) return false;
  std::shared_ptr<Buffer> src_tmp, dst_tmp, wei_tmp;
  dnnl::memory src_mem = internal_input(ctx, e->src, src.data, src_tmp);
  dnnl::memory dst_mem = internal_input(ctx, e->diff_dst, diff_dst.data, dst_tmp);
  dnnl::memory wei_user = user_memory(e->diff_weights.user, diff_weights.data);
  dnnl::memory wei_mem = wei_user;
  if (e->diff_weights.needs_reorder) {
    wei_tmp = ctx.allocate_scratch(e->diff_weights.internal.get_size());
    wei_mem = user_memory(e->diff_weights.internal, wei_tmp->data());
  }
  dnnl_execute(ctx, e->prim, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DIFF_DST, dst_mem}, {DNNL_ARG_DIFF_WEIGHTS, wei_mem}},
               e->scratchpad_bytes);
  if (e->diff_weights.needs_reorder) {
    dnnl_execute(e->diff_weights.reorder, {{DNNL_ARG_FROM, wei_mem}, {DNNL_ARG_TO, wei_user}});
  }
  return true;
}

}  // namespace pax::cpu

// conv_general_dilated (XLA's convolution, 2-D spatial): the shape/dtype
// rule. The CPU kernel is the backend's (kernels_conv.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/conv_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

struct RuleContext {
  const AVal& lhs;
  const AVal& rhs;
  std::string operands() const { return "lhs " + lhs.str() + " and rhs " + rhs.str(); }
};

void check_spec(const Ints& spec, const char* name, const RuleContext& ctx) {
  Ints sorted = spec;
  std::sort(sorted.begin(), sorted.end());
  bool ok = sorted.size() == 4;
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
  PAX_CHECK(ok, "conv_general_dilated: ", name, " ", ints_str(spec),
            " must be a permutation of the 4 axes (0, 1, 2, 3); operands ", ctx.operands());
}

void check_positive(const Ints& v, const char* name, const RuleContext& ctx) {
  PAX_CHECK(int64_t(v.size()) == kConvSpatial, "conv_general_dilated: ", name, " ", ints_str(v), " must have ",
            kConvSpatial, " entries (one per spatial dimension); operands ", ctx.operands());
  for (int64_t x : v) {
    PAX_CHECK(x >= 1, "conv_general_dilated: ", name, " ", ints_str(v), " must be positive; operands ", ctx.operands());
  }
}

std::vector<AVal> conv_rule(std::span<const AVal> in, const Params& p) {
  const RuleContext ctx{in[0], in[1]};
  const AVal& lhs = in[0];
  const AVal& rhs = in[1];
  const ConvParams c = conv_params(p);
  PAX_CHECK(lhs.dtype == rhs.dtype, "conv_general_dilated: operands ", ctx.operands(),
            " must have the same dtype (convert one of them first)");
  PAX_CHECK(is_floating(lhs.dtype), "conv_general_dilated: operands ", ctx.operands(), " have dtype ",
            dtype_name(lhs.dtype), "; a floating dtype (bf16, f16, f32, f64) is required");
  PAX_CHECK(lhs.shape.rank() == 4 && rhs.shape.rank() == 4, "conv_general_dilated: operands ", ctx.operands(),
            " must both have rank 4 (batch, feature and 2 spatial dimensions); only 2-D convolutions are supported");
  check_spec(c.lhs_spec, "lhs_spec", ctx);
  check_spec(c.rhs_spec, "rhs_spec", ctx);
  check_spec(c.out_spec, "out_spec", ctx);
  check_positive(c.window_strides, "window_strides", ctx);
  check_positive(c.lhs_dilation, "lhs_dilation", ctx);
  check_positive(c.rhs_dilation, "rhs_dilation", ctx);
  PAX_CHECK(int64_t(c.padding.size()) == 2 * kConvSpatial, "conv_general_dilated: padding ", ints_str(c.padding),
            " must have ", 2 * kConvSpatial, " entries (lo, hi per spatial dimension); operands ", ctx.operands());
  const int64_t fgc = c.feature_group_count, bgc = c.batch_group_count;
  PAX_CHECK(fgc >= 1 && bgc >= 1, "conv_general_dilated: feature_group_count (", fgc, ") and batch_group_count (", bgc,
            ") must be positive; operands ", ctx.operands());
  PAX_CHECK(fgc == 1 || bgc == 1, "conv_general_dilated: feature_group_count (", fgc, ") and batch_group_count (", bgc,
            ") cannot both be greater than 1; operands ", ctx.operands());

  const int64_t batch = lhs.shape[c.lhs_spec[0]], features = lhs.shape[c.lhs_spec[1]];
  const int64_t out_features = rhs.shape[c.rhs_spec[0]], in_features = rhs.shape[c.rhs_spec[1]];
  PAX_CHECK(features % fgc == 0, "conv_general_dilated: lhs feature dimension (", features,
            ") must be divisible by feature_group_count (", fgc, "); operands ", ctx.operands());
  PAX_CHECK(features / fgc == in_features, "conv_general_dilated: lhs features / feature_group_count (", features,
            " / ", fgc, " = ", features / fgc, ") must equal the rhs input feature dimension (", in_features,
            "); operands ", ctx.operands());
  PAX_CHECK(out_features % fgc == 0, "conv_general_dilated: rhs output feature dimension (", out_features,
            ") must be divisible by feature_group_count (", fgc, "); operands ", ctx.operands());
  PAX_CHECK(out_features % bgc == 0, "conv_general_dilated: rhs output feature dimension (", out_features,
            ") must be divisible by batch_group_count (", bgc, "); operands ", ctx.operands());
  PAX_CHECK(batch % bgc == 0, "conv_general_dilated: lhs batch dimension (", batch,
            ") must be divisible by batch_group_count (", bgc, "); operands ", ctx.operands());

  DType out_dtype = lhs.dtype;
  if (p.has("preferred_element_type")) {
    out_dtype = p.dtype("preferred_element_type");
    PAX_CHECK(is_floating(out_dtype) && itemsize(out_dtype) >= itemsize(lhs.dtype),
              "conv_general_dilated: preferred_element_type ", dtype_name(out_dtype), " is not valid for operands ",
              ctx.operands(), "; it must be a floating dtype at least as wide as the inputs");
  }

  std::vector<int64_t> out(4);
  out[size_t(c.out_spec[0])] = batch / bgc;
  out[size_t(c.out_spec[1])] = out_features;
  for (int64_t i = 0; i < kConvSpatial; ++i) {
    const int64_t in_size = lhs.shape[c.lhs_spec[size_t(2 + i)]], k = rhs.shape[c.rhs_spec[size_t(2 + i)]];
    const int64_t padded = dilated_size(in_size, c.lhs_dilation[size_t(i)]) + c.lo(i) + c.hi(i);
    const int64_t window = dilated_size(k, c.rhs_dilation[size_t(i)]);
    const int64_t size = floor_div(padded - window, c.window_strides[size_t(i)]) + 1;
    PAX_CHECK(size >= 0, "conv_general_dilated: spatial dimension ", i, " gives a negative output size: the padded ",
              "(and dilated) input has size ", padded, " but the dilated kernel window has size ", window,
              "; operands ", ctx.operands(), " with padding ", ints_str(c.padding));
    out[size_t(c.out_spec[size_t(2 + i)])] = size;
  }
  return {AVal{Shape(out), out_dtype, false}};
}

}  // namespace

void register_conv_prims(PrimTable& t) { t[size_t(Prim::conv_general_dilated)] = PrimDef{conv_rule}; }

}  // namespace pax

// The cuDNN convolution plan (see conv_plan.h).
#include "pax/backend/cuda/conv_plan.h"

#include <sstream>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

bool cudnn_takes(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f64; }

DType compute_dtype_for(DType in, DType out) {
  if (in == out && cudnn_takes(in)) return in;
  return in == DType::f64 || out == DType::f64 ? DType::f64 : DType::f32;
}

// An empty vector where `perm` leaves every axis in place.
std::vector<int64_t> unless_identity(std::vector<int64_t> perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != int64_t(i)) return perm;
  }
  return {};
}

std::string dims_str(const std::array<int64_t, 4>& d) {
  return "[" + std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]) + "," +
         std::to_string(d[3]) + "]";
}

}  // namespace

ConvPlan plan_conv(const ConvParams& c, const Shape& lhs, const Shape& rhs, const Shape& out, DType in_dtype,
                   DType out_dtype, F32Matmul f32) {
  ConvPlan plan;
  plan.in_dtype = in_dtype;
  plan.out_dtype = out_dtype;
  plan.compute_dtype = compute_dtype_for(in_dtype, out_dtype);
  plan.f32 = f32;
  if (out.numel() == 0) return plan;  // empty
  const int64_t a_n = c.lhs_spec[0], a_c = c.lhs_spec[1], a_h = c.lhs_spec[2], a_w = c.lhs_spec[3];
  const int64_t k = rhs[c.rhs_spec[0]], per_group = rhs[c.rhs_spec[1]];
  const int64_t kh = rhs[c.rhs_spec[2]], kw = rhs[c.rhs_spec[3]];
  if (per_group == 0 || kh == 0 || kw == 0 || lhs[a_h] == 0 || lhs[a_w] == 0) {
    plan.kind = ConvPlan::Kind::zeros;
    return plan;
  }
  plan.kind = ConvPlan::Kind::conv;

  // The input into NHWC, batch groups into feature groups.
  const int64_t batch_groups = c.batch_group_count;
  const int64_t n = lhs[a_n] / batch_groups, channels = lhs[a_c] * batch_groups;
  plan.groups = batch_groups > 1 ? batch_groups : c.feature_group_count;
  if (batch_groups == 1) {
    plan.x_view_dims = lhs.dims();
    plan.x_perm = unless_identity({a_n, a_h, a_w, a_c});
  } else {
    for (int64_t a = 0; a < lhs.rank(); ++a) {
      if (a == a_n) plan.x_view_dims.push_back(batch_groups);
      plan.x_view_dims.push_back(a == a_n ? n : lhs[a]);
    }
    auto view_axis = [a_n](int64_t a) { return a < a_n ? a : a + 1; };
    plan.x_perm = {a_n + 1, view_axis(a_h), view_axis(a_w), a_n, view_axis(a_c)};
  }

  // Padding cuDNN takes (symmetric, not negative, no input dilation) or the
  // pad kernel's dilated, padded copy.
  std::array<int64_t, 2> spatial{lhs[a_h], lhs[a_w]};
  bool explicit_pad = false;
  for (int64_t i = 0; i < kConvSpatial; ++i) {
    explicit_pad |= c.lhs_dilation[size_t(i)] != 1 || c.lo(i) != c.hi(i) || c.lo(i) < 0;
  }
  if (explicit_pad) {
    plan.x_pad = {0, 0, 0};
    for (int64_t i = 0; i < kConvSpatial; ++i) {
      const int64_t d = c.lhs_dilation[size_t(i)];
      plan.x_pad.insert(plan.x_pad.end(), {c.lo(i), c.hi(i), d - 1});
      spatial[size_t(i)] = dilated_size(spatial[size_t(i)], d) + c.lo(i) + c.hi(i);
    }
    plan.x_pad.insert(plan.x_pad.end(), {0, 0, 0});
  } else {
    plan.pad = {c.lo(0), c.lo(1)};
  }
  plan.x_dims = {n, spatial[0], spatial[1], channels};

  plan.w_perm = unless_identity({c.rhs_spec[0], c.rhs_spec[2], c.rhs_spec[3], c.rhs_spec[1]});
  plan.w_dims = {k, kh, kw, per_group};
  plan.stride = {c.window_strides[0], c.window_strides[1]};
  plan.dilation = {c.rhs_dilation[0], c.rhs_dilation[1]};
  plan.y_dims = {out[c.out_spec[0]], out[c.out_spec[2]], out[c.out_spec[3]], out[c.out_spec[1]]};
  for (size_t i = 0; i < 2; ++i) {
    const int64_t window = dilated_size(plan.w_dims[1 + i], plan.dilation[i]);
    const int64_t expected = (plan.x_dims[1 + i] + 2 * plan.pad[i] - window) / plan.stride[i] + 1;
    PAX_CHECK(plan.y_dims[1 + i] == expected, "conv_general_dilated on cuDNN: output ", dims_str(plan.y_dims),
              " does not match the plan's ", plan.str());
  }
  PAX_CHECK(plan.y_dims[0] == n && k % plan.groups == 0 && channels == plan.groups * per_group,
            "conv_general_dilated on cuDNN: inconsistent shapes for ", plan.str());

  // The output's axis j holds logical axis L (out_spec[L] == j), which the
  // NHWC result holds at position N:0, C:3, H:1, W:2.
  constexpr std::array<int64_t, 4> kNhwcPosition{0, 3, 1, 2};
  std::vector<int64_t> y_perm(4);
  for (size_t logical = 0; logical < 4; ++logical) y_perm[size_t(c.out_spec[logical])] = kNhwcPosition[logical];
  plan.y_perm = unless_identity(y_perm);
  return plan;
}

std::string ConvPlan::str() const {
  std::ostringstream s;
  s << (kind == Kind::conv    ? "conv "
        : kind == Kind::zeros ? "zeros "
                              : "empty ")
    << dtype_short_name(in_dtype) << " -> " << dtype_short_name(out_dtype) << " (compute "
    << dtype_short_name(compute_dtype) << (compute_dtype == DType::f32 && f32 == F32Matmul::tf32 ? ", tf32" : "")
    << ")";
  if (kind != Kind::conv) return s.str();
  s << ": x" << dims_str(x_dims) << " w" << dims_str(w_dims) << " y" << dims_str(y_dims) << " groups " << groups
    << " pad [" << pad[0] << "," << pad[1] << "] stride [" << stride[0] << "," << stride[1] << "] dilation ["
    << dilation[0] << "," << dilation[1] << "]";
  if (!x_perm.empty()) s << ", input copied";
  if (!x_pad.empty()) s << ", input padded";
  if (!w_perm.empty()) s << ", filter copied";
  if (!y_perm.empty()) s << ", result copied";
  return s.str();
}

}  // namespace pax::cuda

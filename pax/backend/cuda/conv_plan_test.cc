// The cuDNN convolution plan over random convolutions (layouts, strides,
// input and filter dilation, negative and asymmetric padding, feature and
// batch groups): each plan is run by a host emulation of its copies and of
// cuDNN's NHWC convolution, and compared exactly (small integers in f64)
// with the CPU's conv_general_dilated. Where a GPU is present, cuDNN runs
// the same convolutions.
#include "pax/backend/cuda/conv_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cudnn_conv.h"
#include "pax/core/device_put.h"
#include "pax/core/error.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

using Ints64 = std::vector<int64_t>;

struct HostArray {
  Ints64 dims;
  std::vector<double> values;
};

Ints64 row_major_strides(const Ints64& dims) {
  Ints64 s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// Calls f(index) for every index of `dims`, row-major.
void for_each_index(const Ints64& dims, const std::function<void(const Ints64&)>& f) {
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  Ints64 idx(dims.size(), 0);
  while (true) {
    f(idx);
    size_t d = dims.size();
    while (d > 0 && ++idx[d - 1] == dims[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

HostArray transposed(const HostArray& x, const Ints64& perm) {
  HostArray y;
  for (int64_t a : perm) y.dims.push_back(x.dims[size_t(a)]);
  const Ints64 xs = row_major_strides(x.dims);
  for_each_index(y.dims, [&](const Ints64& i) {
    int64_t at = 0;
    for (size_t j = 0; j < perm.size(); ++j) at += i[j] * xs[size_t(perm[j])];
    y.values.push_back(x.values[size_t(at)]);
  });
  return y;
}

// lax.pad with zeros: [lo, hi, interior] per axis, lo / hi may be negative.
HostArray padded(const HostArray& x, const Ints64& cfg) {
  HostArray y;
  for (size_t d = 0; d < x.dims.size(); ++d) {
    y.dims.push_back(x.dims[d] == 0 ? cfg[3 * d] + cfg[3 * d + 1]
                                    : (x.dims[d] - 1) * (cfg[3 * d + 2] + 1) + 1 + cfg[3 * d] + cfg[3 * d + 1]);
  }
  const Ints64 xs = row_major_strides(x.dims);
  for_each_index(y.dims, [&](const Ints64& i) {
    int64_t at = 0;
    bool inside = true;
    for (size_t d = 0; d < i.size(); ++d) {
      const int64_t rel = i[d] - cfg[3 * d], step = cfg[3 * d + 2] + 1;
      if (rel < 0 || rel % step != 0 || rel / step >= x.dims[d]) inside = false;
      at += (rel / step) * xs[d];
    }
    y.values.push_back(inside ? x.values[size_t(at)] : 0.0);
  });
  return y;
}

// cuDNN's grouped cross-correlation: x (N, H, W, C), w (K, R, S, C / G),
// y (N, P, Q, K), symmetric zero padding.
HostArray cudnn_convolution(const ConvPlan& p, const HostArray& x, const HostArray& w) {
  EXPECT_EQ(x.dims, Ints64(p.x_dims.begin(), p.x_dims.end()));
  EXPECT_EQ(w.dims, Ints64(p.w_dims.begin(), p.w_dims.end()));
  HostArray y{Ints64(p.y_dims.begin(), p.y_dims.end()), {}};
  const int64_t per_group = p.w_dims[3], k_per_group = p.w_dims[0] / p.groups;
  for_each_index(y.dims, [&](const Ints64& o) {
    const int64_t g = o[3] / k_per_group;
    double sum = 0;
    for (int64_t r = 0; r < p.w_dims[1]; ++r) {
      const int64_t h = o[1] * p.stride[0] - p.pad[0] + r * p.dilation[0];
      if (h < 0 || h >= p.x_dims[1]) continue;
      for (int64_t s = 0; s < p.w_dims[2]; ++s) {
        const int64_t wi = o[2] * p.stride[1] - p.pad[1] + s * p.dilation[1];
        if (wi < 0 || wi >= p.x_dims[2]) continue;
        for (int64_t c = 0; c < per_group; ++c) {
          const double xv =
              x.values[size_t(((o[0] * p.x_dims[1] + h) * p.x_dims[2] + wi) * p.x_dims[3] + g * per_group + c)];
          const double wv = w.values[size_t(((o[3] * p.w_dims[1] + r) * p.w_dims[2] + s) * per_group + c)];
          sum += xv * wv;
        }
      }
    }
    y.values.push_back(sum);
  });
  return y;
}

// The output of the plan's copies and convolution, in the output's layout.
std::vector<double> run_plan(const ConvPlan& p, const HostArray& lhs, const HostArray& rhs, int64_t out_numel) {
  if (p.kind != ConvPlan::Kind::conv) return std::vector<double>(size_t(out_numel), 0.0);
  HostArray x{p.x_view_dims, lhs.values};
  if (!p.x_perm.empty()) x = transposed(x, p.x_perm);
  if (x.dims.size() == 5) x.dims = {x.dims[0], x.dims[1], x.dims[2], x.dims[3] * x.dims[4]};  // (n, H, W, G * C)
  if (!p.x_pad.empty()) x = padded(x, p.x_pad);
  HostArray w = rhs;
  if (!p.w_perm.empty()) w = transposed(w, p.w_perm);
  HostArray y = cudnn_convolution(p, x, w);
  if (!p.y_perm.empty()) y = transposed(y, p.y_perm);
  return y.values;
}

HostArray small_integers(const Ints64& dims, std::mt19937& gen) {
  HostArray a{dims, {}};
  std::uniform_int_distribution<int> value(-3, 3);
  const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t(1), std::multiplies<>());
  for (int64_t i = 0; i < n; ++i) a.values.push_back(value(gen));
  return a;
}

// The dims of an array whose axes hold the logical sizes `logical` (in the
// order of `layout`'s letters `letters`), laid out as `layout` says.
Ints64 dims_in_layout(const std::string& layout, const std::string& letters, const Ints64& logical) {
  Ints64 dims;
  for (char ch : layout) dims.push_back(logical[letters.find(ch)]);
  return dims;
}

// A random convolution the primitive accepts, and the CPU's result.
struct ConvCase {
  std::string layouts;  // "lhs NCHW rhs OIHW out NHWC"
  HostArray lhs, rhs;
  Ints strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
  lax::ConvDimensionNumbers dn;
  int64_t feature_groups = 1, batch_groups = 1;
  Array expected;  // f64, on the CPU

  Array run(const Array& x, const Array& k) const {
    return lax::conv_general_dilated(x, k, strides, padding, lhs_dilation, rhs_dilation, dn, feature_groups,
                                     batch_groups);
  }
  ConvParams params() const {
    return ConvParams{strides,      {padding[0].first, padding[0].second, padding[1].first, padding[1].second},
                      lhs_dilation, rhs_dilation,
                      dn.lhs_spec,  dn.rhs_spec,
                      dn.out_spec,  feature_groups,
                      batch_groups};
  }
};

std::vector<ConvCase> random_cases(int trials, uint32_t seed) {
  std::mt19937 gen(seed);
  auto pick = [&gen](int lo, int hi) { return int64_t(std::uniform_int_distribution<int>(lo, hi)(gen)); };
  const std::vector<std::string> lhs_layouts{"NCHW", "NHWC", "HWCN", "CNWH"};
  const std::vector<std::string> rhs_layouts{"OIHW", "HWIO", "IOHW", "OHWI", "WHOI"};
  std::vector<ConvCase> cases;
  for (int trial = 0; trial < trials; ++trial) {
    ConvCase c;
    const std::string lhs_layout = lhs_layouts[size_t(pick(0, 3))];
    const std::string rhs_layout = rhs_layouts[size_t(pick(0, 4))];
    const std::string out_layout = lhs_layouts[size_t(pick(0, 3))];
    c.layouts = "lhs " + lhs_layout + " rhs " + rhs_layout + " out " + out_layout;
    c.batch_groups = pick(0, 2) == 0 ? pick(2, 3) : 1;
    c.feature_groups = c.batch_groups == 1 && pick(0, 2) == 0 ? pick(2, 3) : 1;
    const int64_t n = c.batch_groups * pick(1, 2), ch = c.feature_groups * pick(1, 3);
    const int64_t o = c.batch_groups * c.feature_groups * pick(1, 2);
    const int64_t h = pick(1, 6), w = pick(1, 6), kh = pick(1, 3), kw = pick(1, 3);
    c.strides = {pick(1, 3), pick(1, 2)};
    c.rhs_dilation = {pick(1, 2), pick(1, 2)};
    c.lhs_dilation = pick(0, 3) == 0 ? Ints{pick(1, 3), pick(1, 2)} : Ints{1, 1};
    const bool symmetric = pick(0, 1) == 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t lo = pick(symmetric ? 0 : -1, 2);
      c.padding.emplace_back(lo, symmetric ? lo : pick(-1, 2));
    }
    c.lhs = small_integers(dims_in_layout(lhs_layout, "NCHW", {n, ch, h, w}), gen);
    c.rhs = small_integers(dims_in_layout(rhs_layout, "OIHW", {o, ch / c.feature_groups, kh, kw}), gen);
    c.dn = lax::conv_dimension_numbers(lhs_layout, rhs_layout, out_layout);
    try {
      c.expected = c.run(array(c.lhs.values, Shape(c.lhs.dims)), array(c.rhs.values, Shape(c.rhs.dims)));
    } catch (const Error&) {
      continue;  // a configuration the primitive rejects (an empty window after padding)
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(ConvPlan, EveryPlanGivesTheCpuConvolution) {
  int padded_count = 0, batch_grouped = 0, feature_grouped = 0, direct = 0;
  const std::vector<ConvCase> cases = random_cases(600, 7);
  for (const ConvCase& c : cases) {
    const ConvPlan plan =
        plan_conv(c.params(), Shape(c.lhs.dims), Shape(c.rhs.dims), c.expected.shape(), DType::f64, DType::f64);
    SCOPED_TRACE(plan.str() + " " + c.layouts);
    EXPECT_EQ(run_plan(plan, c.lhs, c.rhs, c.expected.shape().numel()), c.expected.to_vector<double>());
    padded_count += !plan.x_pad.empty();
    batch_grouped += c.batch_groups > 1;
    feature_grouped += c.feature_groups > 1;
    direct += plan.kind == ConvPlan::Kind::conv && plan.x_pad.empty() && (plan.pad[0] > 0 || plan.pad[1] > 0);
  }
  // Every kind of rewrite was exercised.
  EXPECT_GT(cases.size(), 300u);
  EXPECT_GT(padded_count, 50);
  EXPECT_GT(batch_grouped, 50);
  EXPECT_GT(feature_grouped, 50);
  EXPECT_GT(direct, 30);
}

// The same convolutions run by cuDNN, in f32, bf16 and f64: small integers
// make every sum exact, so the results equal the CPU's.
TEST(ConvPlan, CudnnConvolutionsEqualTheCpusOnDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device cuda{DeviceKind::cuda, 0};
  for (const ConvCase& c : random_cases(200, 11)) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      SCOPED_TRACE(c.layouts + " " + dtype_short_name(dtype));
      const Array x = device_put(lax::convert_element_type(array(c.lhs.values, Shape(c.lhs.dims)), dtype), cuda);
      const Array k = device_put(lax::convert_element_type(array(c.rhs.values, Shape(c.rhs.dims)), dtype), cuda);
      Array got = c.run(x, k);
      EXPECT_EQ(got.device(), cuda);
      got = lax::convert_element_type(device_get(got), DType::f64);
      EXPECT_EQ(got.to_vector<double>(), c.expected.to_vector<double>());
    }
  }
}

TEST(ConvPlan, CudnnLoadsWithEveryFunction) {
  const CudnnLibrary& lib = cudnn_library();
  EXPECT_NE(lib.path.find("libcudnn.so.9"), std::string::npos) << lib.path;
  EXPECT_EQ(lib.version / 10000, 9u) << lib.version;
  for (const char* name : {"cudnnCreate", "cudnnConvolutionForward", "cudnnGetConvolutionForwardAlgorithm_v7"}) {
    EXPECT_NE(std::find(lib.symbols.begin(), lib.symbols.end(), name), lib.symbols.end()) << name;
  }
}

TEST(ConvPlan, FlaxLayoutsCopyOnlyTheFilterAndCudnnPadsSymmetricPadding) {
  const ConvParams c{{1, 1}, {1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2}, 1, 1};
  const ConvPlan p =
      plan_conv(c, Shape({8, 32, 32, 16}), Shape({3, 3, 16, 64}), Shape({8, 32, 32, 64}), DType::bf16, DType::bf16);
  EXPECT_EQ(p.kind, ConvPlan::Kind::conv);
  EXPECT_TRUE(p.x_perm.empty());
  EXPECT_TRUE(p.x_pad.empty());
  EXPECT_TRUE(p.y_perm.empty());
  EXPECT_EQ(p.w_perm, Ints64({3, 0, 1, 2}));
  EXPECT_EQ(p.pad, (std::array<int64_t, 2>{1, 1}));
  EXPECT_EQ(p.compute_dtype, DType::bf16);
  EXPECT_FALSE(p.result_in_temporary());
}

TEST(ConvPlan, ComputeDtypes) {
  const ConvParams c{{1, 1}, {0, 0, 0, 0}, {1, 1}, {1, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, 1, 1};
  auto compute = [&](DType in, DType out) {
    return plan_conv(c, Shape({1, 2, 4, 4}), Shape({3, 2, 2, 2}), Shape({1, 3, 3, 3}), in, out).compute_dtype;
  };
  EXPECT_EQ(compute(DType::f32, DType::f32), DType::f32);
  EXPECT_EQ(compute(DType::bf16, DType::bf16), DType::bf16);
  EXPECT_EQ(compute(DType::f16, DType::f16), DType::f16);
  EXPECT_EQ(compute(DType::f64, DType::f64), DType::f64);
  EXPECT_EQ(compute(DType::bf16, DType::f32), DType::f32);  // preferred_element_type=f32
  EXPECT_EQ(compute(DType::i32, DType::i32), DType::f32);
  const ConvPlan p =
      plan_conv(c, Shape({1, 2, 4, 4}), Shape({3, 2, 2, 2}), Shape({1, 3, 3, 3}), DType::bf16, DType::f32);
  EXPECT_TRUE(p.converts_operands());
  EXPECT_FALSE(p.converts_result());
}

TEST(ConvPlan, EmptySumsAreZerosAndEmptyOutputsAreNothing) {
  const ConvParams c{{1, 1}, {1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, 1, 1};
  EXPECT_EQ(plan_conv(c, Shape({1, 0, 4, 4}), Shape({3, 0, 1, 1}), Shape({1, 3, 6, 6}), DType::f32, DType::f32).kind,
            ConvPlan::Kind::zeros);
  EXPECT_EQ(plan_conv(c, Shape({0, 2, 4, 4}), Shape({3, 2, 1, 1}), Shape({0, 3, 6, 6}), DType::f32, DType::f32).kind,
            ConvPlan::Kind::empty);
}

}  // namespace
}  // namespace pax::cuda

// VJP / JVP rules of conv_general_dilated against central finite differences,
// second order, jit of the function and of its VJP against eager, bf16
// gradient dtypes, and the gradient of a small CNN against a reference loop.
//
// The CPU kernel computes f64 convolutions in f32, so the finite-difference
// checks cannot reach f64 accuracy. The convolution is bilinear, so central
// differences have no truncation error at any step: a large step (0.1) keeps
// f32 rounding in the differences near 1e-6, and a tolerance of 1e-4 still
// rejects any wrong rule (a misplaced window, a wrong padding or group
// mapping changes the result by O(1)).
#include <gtest/gtest.h>

#include "pax/ops/nn.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;

constexpr double kEps = 0.1;
constexpr double kTol = 1e-4;

struct Case {
  const char* name;
  ArrayFn f;
  std::vector<Array> args;
};

Array rnd(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f64, seed); }

struct Conv {
  std::string lhs = "NCHW", rhs = "OIHW", out = "NCHW";
  Ints strides = {1, 1};
  std::vector<std::pair<int64_t, int64_t>> padding = {{0, 0}, {0, 0}};
  Ints lhs_dilation = {1, 1}, rhs_dilation = {1, 1};
  int64_t feature_groups = 1, batch_groups = 1;

  Array operator()(const Array& x, const Array& w) const {
    return lax::conv_general_dilated(x, w, strides, padding, lhs_dilation, rhs_dilation,
                                     lax::conv_dimension_numbers(lhs, rhs, out), feature_groups, batch_groups);
  }
};

Case conv_case(const char* name, const Conv& c, const Shape& lhs, const Shape& rhs, uint32_t seed) {
  return {name, [c](const std::vector<Array>& a) { return c(a[0], a[1]); }, {rnd(lhs, seed), rnd(rhs, seed + 1)}};
}

std::vector<Case> cases() {
  const Conv nchw;
  Conv nhwc{.lhs = "NHWC", .rhs = "HWIO", .out = "NHWC"};
  return {
      conv_case("nchw", Conv{.padding = {{1, 1}, {0, 0}}}, {2, 3, 5, 6}, {4, 3, 3, 2}, 1),
      conv_case("nhwc", Conv{.lhs = "NHWC", .rhs = "HWIO", .out = "NHWC", .padding = {{1, 1}, {1, 0}}}, {2, 5, 6, 3},
                {3, 2, 3, 4}, 3),
      conv_case("mixed_layouts", Conv{.lhs = "NHWC", .rhs = "OIHW", .out = "CHWN", .padding = {{0, 1}, {1, 1}}},
                {2, 5, 4, 2}, {3, 2, 2, 3}, 5),
      conv_case("stride2", Conv{.strides = {2, 2}, .padding = {{1, 1}, {1, 1}}}, {1, 2, 7, 6}, {3, 2, 3, 3}, 7),
      conv_case("stride_uneven", Conv{.strides = {3, 2}}, {1, 2, 8, 7}, {2, 2, 2, 3}, 9),
      conv_case("asym_negative_padding", Conv{.strides = {1, 2}, .padding = {{2, -1}, {-1, 1}}}, {1, 2, 6, 6},
                {2, 2, 3, 3}, 11),
      conv_case("rhs_dilation", Conv{.padding = {{1, 0}, {0, 2}}, .rhs_dilation = {2, 3}}, {1, 2, 7, 6}, {2, 2, 3, 2},
                13),
      conv_case("lhs_dilation", Conv{.padding = {{2, 2}, {1, 2}}, .lhs_dilation = {2, 2}}, {1, 2, 4, 3}, {2, 2, 3, 3},
                15),
      conv_case("lhs_dilation_strided", Conv{.strides = {2, 1}, .padding = {{1, 0}, {-1, 1}}, .lhs_dilation = {2, 3}},
                {1, 2, 4, 3}, {2, 2, 2, 2}, 17),
      conv_case("feature_groups", Conv{.padding = {{1, 1}, {1, 1}}, .feature_groups = 2}, {2, 4, 5, 5}, {6, 2, 3, 3},
                19),
      conv_case("depthwise", Conv{.strides = {2, 2}, .padding = {{1, 1}, {1, 1}}, .feature_groups = 3}, {1, 3, 5, 5},
                {6, 1, 3, 3}, 21),
      conv_case("depthwise_nhwc",
                Conv{.lhs = "NHWC", .rhs = "HWIO", .out = "NHWC", .padding = {{1, 1}, {1, 1}}, .feature_groups = 3},
                {2, 4, 4, 3}, {3, 3, 1, 3}, 23),
      conv_case("batch_groups", Conv{.batch_groups = 2}, {4, 2, 5, 5}, {4, 2, 3, 3}, 25),
      conv_case("batch_groups_nhwc",
                Conv{.lhs = "NHWC", .rhs = "HWIO", .out = "NHWC", .strides = {2, 1}, .batch_groups = 2}, {4, 4, 4, 2},
                {2, 2, 2, 6}, 27),
      conv_case("1x1", nchw, {2, 3, 4, 4}, {5, 3, 1, 1}, 29),
      conv_case("1x1_nhwc", nhwc, {2, 3, 3, 4}, {1, 1, 4, 2}, 31),
  };
}

TEST(ConvAD, VjpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp(c.f, c.args, kEps, kTol)) << c.name;
}

TEST(ConvAD, JvpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_jvp(c.f, c.args, kEps, kTol)) << c.name;
}

// The VJP is linear in (lhs, rhs) jointly, so this differentiates the
// transposed convolutions themselves, again without truncation error.
TEST(ConvAD, SecondOrder) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp_order2(c.f, c.args, kEps, kTol)) << c.name;
}

TEST(ConvAD, JitMatchesEager) {
  for (const Case& c : cases()) {
    EXPECT_TRUE(testing::check_jit(c.f, c.args)) << c.name;
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(c.f, c.args), c.args)) << c.name << " (vjp)";
  }
}

TEST(ConvAD, Bf16GradientsKeepOperandDtype) {
  const Array x = testing::random_array({2, 3, 5, 5}, DType::bf16, 40);
  const Array w = testing::random_array({4, 3, 3, 3}, DType::bf16, 41);
  const Array c = testing::random_array({2, 4, 5, 5}, DType::f32, 42);
  const auto dn = lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW");
  auto loss = [&](std::optional<DType> preferred) {
    return [dn, c, preferred](const Array& a, const Array& b) {
      Array y = lax::conv_general_dilated(a, b, {1, 1}, {{1, 1}, {1, 1}}, {}, {}, dn, 1, 1, preferred);
      return sum(y.astype(DType::f32) * c);
    };
  };
  // The same values in f32 (bf16 values are exact in f32).
  auto [want_x, want_w] = grad<0, 1>(loss(std::nullopt))(x.astype(DType::f32), w.astype(DType::f32));
  for (std::optional<DType> preferred : {std::optional<DType>(), std::optional<DType>(DType::f32)}) {
    auto [gx, gw] = grad<0, 1>(loss(preferred))(x, w);
    EXPECT_EQ(gx.dtype(), DType::bf16);
    EXPECT_EQ(gw.dtype(), DType::bf16);
    // bf16 rounding of the cotangent and of the result (8 mantissa bits).
    EXPECT_TRUE(testing::all_close(gx, want_x, 2e-2, 2e-2));
    EXPECT_TRUE(testing::all_close(gw, want_w, 2e-2, 2e-2));
  }
}

// grad of mean(relu(conv(x, w))), NCHW, stride 1, padding 1, against f64
// reference loops.
TEST(ConvAD, SmallCnnGrad) {
  const int64_t n = 2, c = 3, h = 6, wd = 6, o = 4, k = 3;
  const Array x = rnd({n, c, h, wd}, 50), w = rnd({o, c, k, k}, 51);
  auto loss = [](const Array& a, const Array& b) {
    Array y = lax::conv_general_dilated(a, b, {1, 1}, {{1, 1}, {1, 1}}, {}, {},
                                        lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"));
    return mean(nn::relu(y));
  };
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  auto xi = [&](int64_t b, int64_t ch, int64_t i, int64_t j) { return ((b * c + ch) * h + i) * wd + j; };
  auto wi = [&](int64_t oc, int64_t ch, int64_t i, int64_t j) { return ((oc * c + ch) * k + i) * k + j; };
  std::vector<double> gx(xv.size(), 0.0), gw(wv.size(), 0.0);
  const double scale = 1.0 / double(n * o * h * wd);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < wd; ++j) {
          // Taps (ch, di, dj) that read an input element inside the image.
          auto each_tap = [&](auto f) {
            for (int64_t ch = 0; ch < c; ++ch) {
              for (int64_t di = 0; di < k; ++di) {
                for (int64_t dj = 0; dj < k; ++dj) {
                  const int64_t y = i + di - 1, z = j + dj - 1;
                  if (y >= 0 && y < h && z >= 0 && z < wd) f(xi(b, ch, y, z), wi(oc, ch, di, dj));
                }
              }
            }
          };
          double out = 0;
          each_tap([&](int64_t p, int64_t q) { out += xv[size_t(p)] * wv[size_t(q)]; });
          if (out <= 0) continue;
          each_tap([&](int64_t p, int64_t q) {
            gx[size_t(p)] += scale * wv[size_t(q)];
            gw[size_t(q)] += scale * xv[size_t(p)];
          });
        }
      }
    }
  }
  auto [got_x, got_w] = grad<0, 1>(loss)(x, w);
  EXPECT_TRUE(testing::all_close(got_x, gx, 1e-5, 1e-7));
  EXPECT_TRUE(testing::all_close(got_w, gw, 1e-5, 1e-7));
  auto [jit_x, jit_w] = jit(grad<0, 1>(loss))(x, w);
  EXPECT_TRUE(testing::all_close(jit_x, got_x, 0, 0));
  EXPECT_TRUE(testing::all_close(jit_w, got_w, 0, 0));
}

TEST(ConvAD, EmptyOutputGivesZeroGradients) {
  // A batch of 0: every gradient is an empty sum.
  const auto dn = lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW");
  auto [gx, gw] = grad<0, 1>([&](const Array& a, const Array& b) {
    return sum(lax::conv_general_dilated(a, b, {1, 1}, {{0, 0}, {0, 0}}, {}, {}, dn));
  })(zeros({0, 2, 4, 4}, DType::f64), rnd({3, 2, 2, 2}, 60));
  EXPECT_EQ(gx.shape(), (Shape{0, 2, 4, 4}));
  EXPECT_TRUE(testing::all_close(gw, std::vector<double>(24, 0.0), 0, 0));
}

}  // namespace
}  // namespace pax

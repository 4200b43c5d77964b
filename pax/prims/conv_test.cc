// conv_general_dilated against a slow f64 loop written from XLA's definition:
// layouts, strides, padding (asymmetric and negative), dilations, feature and
// batch groups, dtypes, zero sizes and every error of the shape rule.
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;
using Padding = std::vector<std::pair<int64_t, int64_t>>;

struct ConvCase {
  std::string lhs_layout = "NCHW", rhs_layout = "OIHW", out_layout = "NCHW";
  Shape lhs_shape, rhs_shape;  // in their layouts
  Ints strides{1, 1};
  Padding padding{{0, 0}, {0, 0}};
  Ints lhs_dilation{1, 1}, rhs_dilation{1, 1};
  int64_t feature_group_count = 1, batch_group_count = 1;
};

int64_t offset(const Shape& shape, const Ints& spec, const std::array<int64_t, 4>& logical) {
  std::vector<int64_t> idx(4);
  for (size_t i = 0; i < 4; ++i) idx[size_t(spec[i])] = logical[i];
  int64_t flat = 0;
  for (int64_t d = 0; d < 4; ++d) flat = flat * shape[d] + idx[size_t(d)];
  return flat;
}

// out[n, o, y, x] = sum_{i, ky, kx} lhs[n + gb * N', gf * I + i, py / ld, px / ld] * rhs[o, i, ky, kx]
// over py = y * stride + ky * rd - lo landing on a (dilated) input element.
std::vector<double> reference_conv(const Array& lhs, const Array& rhs, const ConvCase& c, const Shape& out_shape) {
  const lax::ConvDimensionNumbers dn = lax::conv_dimension_numbers(c.lhs_layout, c.rhs_layout, c.out_layout);
  const std::vector<double> x = lhs.to_vector<double>(), w = rhs.to_vector<double>();
  auto dim = [](const Shape& s, const Ints& spec, size_t i) { return s[spec[i]]; };
  const int64_t n_in = dim(lhs.shape(), dn.lhs_spec, 0), h_in = dim(lhs.shape(), dn.lhs_spec, 2),
                w_in = dim(lhs.shape(), dn.lhs_spec, 3);
  const int64_t o_n = dim(rhs.shape(), dn.rhs_spec, 0), i_n = dim(rhs.shape(), dn.rhs_spec, 1),
                kh = dim(rhs.shape(), dn.rhs_spec, 2), kw = dim(rhs.shape(), dn.rhs_spec, 3);
  const int64_t n_out = dim(out_shape, dn.out_spec, 0), h_out = dim(out_shape, dn.out_spec, 2),
                w_out = dim(out_shape, dn.out_spec, 3);
  const int64_t of_group = o_n / c.feature_group_count, ob_group = o_n / c.batch_group_count;
  std::vector<double> out(size_t(out_shape.numel()), 0.0);
  auto source = [](int64_t pos, int64_t ld, int64_t size) -> int64_t {
    if (pos < 0 || pos % ld != 0 || pos / ld >= size) return -1;
    return pos / ld;
  };
  for (int64_t n = 0; n < n_out; ++n)
    for (int64_t o = 0; o < o_n; ++o)
      for (int64_t y = 0; y < h_out; ++y)
        for (int64_t xo = 0; xo < w_out; ++xo) {
          const int64_t nb = n + (o / ob_group) * (n_in / c.batch_group_count);
          double acc = 0.0;
          for (int64_t i = 0; i < i_n; ++i)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy =
                    source(y * c.strides[0] + ky * c.rhs_dilation[0] - c.padding[0].first, c.lhs_dilation[0], h_in);
                const int64_t ix =
                    source(xo * c.strides[1] + kx * c.rhs_dilation[1] - c.padding[1].first, c.lhs_dilation[1], w_in);
                if (iy < 0 || ix < 0) continue;
                const int64_t ci = (o / of_group) * i_n + i;
                acc += x[size_t(offset(lhs.shape(), dn.lhs_spec, {nb, ci, iy, ix}))] *
                       w[size_t(offset(rhs.shape(), dn.rhs_spec, {o, i, ky, kx}))];
              }
          out[size_t(offset(out_shape, dn.out_spec, {n, o, y, xo}))] = acc;
        }
  return out;
}

Array run_conv(const Array& lhs, const Array& rhs, const ConvCase& c, std::optional<DType> preferred = std::nullopt) {
  return lax::conv_general_dilated(lhs, rhs, c.strides, c.padding, c.lhs_dilation, c.rhs_dilation,
                                   lax::conv_dimension_numbers(c.lhs_layout, c.rhs_layout, c.out_layout),
                                   c.feature_group_count, c.batch_group_count, preferred);
}

void check_conv(const ConvCase& c, const Shape& want_shape, DType dtype = DType::f32, double tol = 1e-5) {
  Array lhs = random_array(c.lhs_shape, dtype, 1), rhs = random_array(c.rhs_shape, dtype, 2);
  Array out = run_conv(lhs, rhs, c);
  ASSERT_EQ(out.shape(), want_shape);
  EXPECT_EQ(out.dtype(), dtype);
  EXPECT_TRUE(all_close(out, reference_conv(lhs, rhs, c, out.shape()), tol, tol))
      << c.lhs_layout << " " << c.lhs_shape << " * " << c.rhs_layout << " " << c.rhs_shape;
}

ConvCase basic(Shape lhs, Shape rhs) {
  ConvCase c;
  c.lhs_shape = std::move(lhs);
  c.rhs_shape = std::move(rhs);
  return c;
}

TEST(ConvGeneralDilated, HandComputed) {
  // 1x1x3x3 input, 1x1x2x2 kernel of ones: sums of 2x2 windows.
  Array x = array<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Array k = array<float>({1, 1, 1, 1}, {1, 1, 2, 2});
  Array y = lax::conv_general_dilated(x, k, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1},
                                      lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"));
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_TRUE(all_close(y, {12, 16, 24, 28}));
}

TEST(ConvGeneralDilated, NchwOihw) {
  ConvCase c = basic({2, 3, 7, 6}, {4, 3, 3, 2});
  check_conv(c, {2, 4, 5, 5});
  c.padding = {{1, 1}, {0, 1}};
  check_conv(c, {2, 4, 7, 6});
}

TEST(ConvGeneralDilated, NhwcHwio) {
  ConvCase c = basic({2, 7, 6, 3}, {3, 2, 3, 4});
  c.lhs_layout = "NHWC", c.rhs_layout = "HWIO", c.out_layout = "NHWC";
  c.padding = {{1, 1}, {1, 0}};
  check_conv(c, {2, 7, 6, 4});
  // Enough channels for oneDNN's blocked layouts.
  ConvCase big = basic({2, 12, 10, 32}, {3, 3, 32, 48});
  big.lhs_layout = "NHWC", big.rhs_layout = "HWIO", big.out_layout = "NHWC";
  big.padding = {{1, 1}, {1, 1}};
  check_conv(big, {2, 12, 10, 48}, DType::f32, 1e-4);
}

TEST(ConvGeneralDilated, MixedLayouts) {
  ConvCase c = basic({2, 7, 6, 3}, {4, 3, 3, 2});
  c.lhs_layout = "NHWC", c.rhs_layout = "OIHW", c.out_layout = "NCHW";
  check_conv(c, {2, 4, 5, 5});
  ConvCase d = basic({3, 2, 6, 7}, {3, 2, 3, 4});
  d.lhs_layout = "CNHW", d.rhs_layout = "IHWO", d.out_layout = "HWNC";
  check_conv(d, {5, 5, 2, 4});
}

TEST(ConvGeneralDilated, StridesAndAsymmetricPadding) {
  ConvCase c = basic({2, 3, 9, 8}, {4, 3, 3, 3});
  c.strides = {2, 2};
  c.padding = {{1, 2}, {0, 1}};
  check_conv(c, {2, 4, 5, 4});
  c.strides = {3, 1};
  c.padding = {{2, 0}, {3, 3}};
  check_conv(c, {2, 4, 3, 12});
}

TEST(ConvGeneralDilated, NegativePadding) {
  ConvCase c = basic({2, 3, 9, 8}, {4, 3, 3, 3});
  c.padding = {{-1, 2}, {-2, -1}};
  check_conv(c, {2, 4, 8, 3});
  c.strides = {2, 1};
  c.padding = {{2, -3}, {-1, 1}};
  check_conv(c, {2, 4, 3, 6});
  // Cropping more than the input leaves only (zero) padding.
  c.strides = {1, 1};
  c.padding = {{-9, 3}, {0, 0}};
  check_conv(c, {2, 4, 1, 6});
}

TEST(ConvGeneralDilated, RhsDilation) {
  ConvCase c = basic({2, 3, 11, 10}, {4, 3, 3, 2});
  c.rhs_dilation = {2, 3};
  check_conv(c, {2, 4, 7, 7});
  c.padding = {{2, 2}, {1, 2}};
  c.strides = {2, 2};
  check_conv(c, {2, 4, 6, 5});
}

TEST(ConvGeneralDilated, LhsDilation) {
  ConvCase c = basic({2, 3, 5, 4}, {4, 3, 3, 3});
  c.lhs_dilation = {2, 2};
  c.padding = {{2, 2}, {2, 1}};  // the input gradient of a stride-2 convolution
  check_conv(c, {2, 4, 11, 8});
  c.lhs_dilation = {2, 3};
  c.rhs_dilation = {2, 1};
  c.padding = {{1, 3}, {0, -1}};
  check_conv(c, {2, 4, 9, 7});
  // Window strides > 1 and padding wider than the window take the dilated-input path.
  c.strides = {2, 1};
  check_conv(c, {2, 4, 5, 7});
  c.strides = {1, 1};
  c.rhs_dilation = {1, 1};
  c.padding = {{4, 0}, {1, 5}};
  check_conv(c, {2, 4, 11, 14});
  c.padding = {{-3, 1}, {-2, -2}};
  check_conv(c, {2, 4, 5, 4});
  ConvCase nhwc = basic({2, 5, 4, 16}, {3, 3, 16, 8});
  nhwc.lhs_layout = "NHWC", nhwc.rhs_layout = "HWIO", nhwc.out_layout = "NHWC";
  nhwc.lhs_dilation = {2, 2};
  nhwc.padding = {{1, 2}, {1, 2}};
  check_conv(nhwc, {2, 10, 8, 8}, DType::f32, 1e-4);
}

TEST(ConvGeneralDilated, FeatureGroups) {
  ConvCase c = basic({2, 4, 6, 6}, {6, 2, 3, 3});
  c.feature_group_count = 2;
  check_conv(c, {2, 6, 4, 4});
  // Depthwise with a channel multiplier of 2, NHWC.
  ConvCase dw = basic({2, 8, 8, 16}, {3, 3, 1, 32});
  dw.lhs_layout = "NHWC", dw.rhs_layout = "HWIO", dw.out_layout = "NHWC";
  dw.feature_group_count = 16;
  dw.padding = {{1, 1}, {1, 1}};
  check_conv(dw, {2, 8, 8, 32});
  // Grouped and transposed at once.
  c.lhs_dilation = {2, 2};
  c.padding = {{2, 2}, {2, 2}};
  check_conv(c, {2, 6, 13, 13});
}

TEST(ConvGeneralDilated, BatchGroups) {
  // The weight gradient's form: lhs batch split in 2 groups matching halves of
  // the output features.
  ConvCase c = basic({4, 3, 6, 5}, {6, 3, 3, 2});
  c.batch_group_count = 2;
  check_conv(c, {2, 6, 4, 4});
  c.batch_group_count = 4;
  c.rhs_shape = {8, 3, 3, 2};
  c.padding = {{1, 1}, {-1, 0}};
  c.rhs_dilation = {1, 2};
  check_conv(c, {1, 8, 6, 2});
  ConvCase t = basic({3, 4, 6, 5}, {3, 4, 2, 2});
  t.lhs_layout = "CNHW", t.rhs_layout = "IOHW", t.out_layout = "CNHW";
  t.batch_group_count = 2;
  t.lhs_dilation = {2, 1};
  t.padding = {{1, 1}, {0, 0}};
  check_conv(t, {4, 2, 12, 4});
}

TEST(ConvGeneralDilated, OneByOne) {
  ConvCase c = basic({2, 16, 5, 7}, {24, 16, 1, 1});
  check_conv(c, {2, 24, 5, 7});
  c.strides = {2, 2};
  check_conv(c, {2, 24, 3, 4});
}

TEST(ConvGeneralDilated, BFloat16) {
  ConvCase c = basic({2, 9, 8, 16}, {3, 3, 16, 8});
  c.lhs_layout = "NHWC", c.rhs_layout = "HWIO", c.out_layout = "NHWC";
  c.padding = {{1, 1}, {1, 1}};
  Array lhs = random_array(c.lhs_shape, DType::bf16, 1), rhs = random_array(c.rhs_shape, DType::bf16, 2);
  Array out = run_conv(lhs, rhs, c);
  const std::vector<double> want = reference_conv(lhs, rhs, c, out.shape());
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(out, want, 1e-2, 1e-2));
  Array f = run_conv(lhs, rhs, c, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_TRUE(all_close(f, want, 1e-5, 1e-5));  // f32 accumulation of exact products
  ConvCase g = basic({2, 4, 6, 6}, {6, 2, 3, 3});
  g.feature_group_count = 2;
  g.lhs_dilation = {2, 2};
  g.padding = {{1, 1}, {1, 1}};
  check_conv(g, {2, 6, 11, 11}, DType::bf16, 2e-2);
}

TEST(ConvGeneralDilated, OtherFloatDtypes) {
  ConvCase c = basic({2, 3, 7, 6}, {4, 3, 3, 2});
  c.padding = {{1, 0}, {0, 1}};
  check_conv(c, {2, 4, 6, 6}, DType::f16, 3e-3);
  check_conv(c, {2, 4, 6, 6}, DType::f64, 1e-5);  // computed in f32
  Array lhs = random_array(c.lhs_shape, DType::f16, 1), rhs = random_array(c.rhs_shape, DType::f16, 2);
  Array f = run_conv(lhs, rhs, c, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_TRUE(all_close(f, reference_conv(lhs, rhs, c, f.shape()), 1e-5, 1e-5));
  Array x = random_array(c.lhs_shape, DType::f32, 1), w = random_array(c.rhs_shape, DType::f32, 2);
  Array d = run_conv(x, w, c, DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_TRUE(all_close(d, reference_conv(x, w, c, d.shape()), 1e-5, 1e-5));
}

TEST(ConvGeneralDilated, ZeroSizes) {
  ConvCase c = basic({0, 3, 5, 5}, {4, 3, 3, 3});
  check_conv(c, {0, 4, 3, 3});
  check_conv(basic({2, 3, 2, 5}, {4, 3, 3, 3}), {2, 4, 0, 3});
  check_conv(basic({2, 0, 5, 5}, {4, 0, 3, 3}), {2, 4, 3, 3});  // no input features: zeros
  check_conv(basic({2, 3, 5, 5}, {0, 3, 3, 3}), {2, 0, 3, 3});
  ConvCase pad_only = basic({2, 3, 0, 4}, {4, 3, 1, 3});
  pad_only.padding = {{1, 1}, {0, 0}};
  check_conv(pad_only, {2, 4, 2, 2});
}

TEST(ConvGeneralDilated, Errors) {
  const auto nchw = lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW");
  Array x = random_array({2, 4, 6, 6}, DType::f32, 1), w = random_array({6, 4, 3, 3}, DType::f32, 2);
  auto conv = [&](const Array& lhs, const Array& rhs, Ints strides = {1, 1}, Padding pad = {{0, 0}, {0, 0}},
                  Ints ld = {1, 1}, Ints rd = {1, 1}, int64_t fgc = 1, int64_t bgc = 1,
                  std::optional<DType> preferred = std::nullopt, lax::ConvDimensionNumbers dn = {}) {
    if (dn.lhs_spec.empty()) dn = lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW");
    return lax::conv_general_dilated(lhs, rhs, strides, pad, ld, rd, dn, fgc, bgc, preferred);
  };
  EXPECT_PAX_ERROR(conv(x, lax::convert_element_type(w, DType::bf16)), "must have the same dtype");
  EXPECT_PAX_ERROR(conv(lax::convert_element_type(x, DType::i32), lax::convert_element_type(w, DType::i32)),
                   "a floating dtype");
  Array x3 = random_array({2, 4, 6}, DType::f32, 3), w3 = random_array({6, 4, 3}, DType::f32, 4);
  EXPECT_PAX_ERROR(
      lax::conv_general_dilated(x3, w3, {1}, {{0, 0}}, {1}, {1}, lax::conv_dimension_numbers("NCH", "OIH", "NCH")),
      "only 2-D convolutions");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 1, std::nullopt,
                        lax::ConvDimensionNumbers{{0, 1, 2, 2}, nchw.rhs_spec, nchw.out_spec}),
                   "lhs_spec (0, 1, 2, 2) must be a permutation");
  EXPECT_PAX_ERROR(conv(x, w, {1}), "window_strides (1,) must have 2 entries");
  EXPECT_PAX_ERROR(conv(x, w, {1, 0}), "window_strides (1, 0) must be positive");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}}), "padding (0, 0) must have 4 entries");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {0, 1}), "lhs_dilation (0, 1) must be positive");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1, 1}), "rhs_dilation (1, 1, 1) must have 2");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 3), "divisible by feature_group_count (3)");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 2),
                   "must equal the rhs input feature dimension (4)");
  Array wg = random_array({5, 2, 3, 3}, DType::f32, 5);
  EXPECT_PAX_ERROR(conv(x, wg, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 2),
                   "rhs output feature dimension (5) must be divisible by feature_group_count (2)");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 4),
                   "rhs output feature dimension (6) must be divisible by batch_group_count (4)");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 3),
                   "lhs batch dimension (2) must be divisible by batch_group_count (3)");
  Array w2 = random_array({6, 2, 3, 3}, DType::f32, 6);
  EXPECT_PAX_ERROR(conv(x, w2, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 2, 2), "cannot both be greater than 1");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 0), "must be positive");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{-3, -3}, {0, 0}}), "negative output size");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {4, 1}), "negative output size");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 1, DType::bf16),
                   "preferred_element_type bfloat16 is not valid");
  EXPECT_PAX_ERROR(conv(x, w, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 1, DType::i32),
                   "preferred_element_type int32 is not valid");
}

}  // namespace
}  // namespace pax

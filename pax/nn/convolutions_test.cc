// Conv2D against a direct convolution loop (strides, dilations, SAME / VALID
// / EXPLICIT padding, groups, bias, leading batch axes), gradients, weight
// initialisation statistics, errors, vmap and jit.
#include "pax/nn/convolutions.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

struct ConvCase {
  Ints filter;  // (kh, kw, in, out)
  Ints stride, dilation;
  std::string padding;
  Ints explicit_padding;
  int64_t groups;
  bool bias;
};

// The expected (lo, hi) pads, written out from the spec of each padding.
std::pair<Ints, Ints> expected_pads(const ConvCase& c, int64_t h, int64_t w) {
  Ints lo{0, 0}, hi{0, 0};
  const int64_t sizes[2] = {h, w};
  for (size_t i = 0; i < 2; ++i) {
    if (c.padding == "EXPLICIT") {
      lo[i] = c.explicit_padding[2 * i];
      hi[i] = c.explicit_padding[2 * i + 1];
    } else if (c.padding == "SAME") {
      const int64_t out = (sizes[i] + c.stride[i] - 1) / c.stride[i];  // ceil(size / stride)
      const int64_t span = (c.filter[i] - 1) * c.dilation[i] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * c.stride[i] + span - sizes[i]);
      lo[i] = total / 2;
      hi[i] = total - lo[i];
    }
  }
  return {lo, hi};
}

// y[b, oh, ow, o] = sum_{i, j, ci} x[b, oh*sh - lo + i*dh, ow*sw - lo + j*dw, g*cin + ci] w[i, j, ci, o] (+ bias[o]).
std::vector<double> reference_conv(const ConvCase& c, const Array& x, const Array& w, const Array& bias, Shape* shape) {
  const int64_t n = x.dim(0), h = x.dim(1), wd = x.dim(2), cin = c.filter[2] / c.groups, out = c.filter[3];
  const int64_t out_per_group = out / c.groups;
  auto [lo, hi] = expected_pads(c, h, wd);
  const int64_t oh = (h + lo[0] + hi[0] - ((c.filter[0] - 1) * c.dilation[0] + 1)) / c.stride[0] + 1;
  const int64_t ow = (wd + lo[1] + hi[1] - ((c.filter[1] - 1) * c.dilation[1] + 1)) / c.stride[1] + 1;
  *shape = Shape{n, oh, ow, out};
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), y(size_t(n * oh * ow * out));
  std::vector<double> bv = c.bias ? bias.to_vector<double>() : std::vector<double>(size_t(out), 0.0);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t p = 0; p < oh; ++p) {
      for (int64_t q = 0; q < ow; ++q) {
        for (int64_t o = 0; o < out; ++o) {
          const int64_t g = o / out_per_group;
          double acc = bv[size_t(o)];
          for (int64_t i = 0; i < c.filter[0]; ++i) {
            for (int64_t j = 0; j < c.filter[1]; ++j) {
              const int64_t ih = p * c.stride[0] - lo[0] + i * c.dilation[0];
              const int64_t iw = q * c.stride[1] - lo[1] + j * c.dilation[1];
              if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
              for (int64_t ci = 0; ci < cin; ++ci) {
                acc += xv[size_t(((b * h + ih) * wd + iw) * c.filter[2] + g * cin + ci)] *
                       wv[size_t(((i * c.filter[1] + j) * cin + ci) * out + o)];
              }
            }
          }
          y[size_t(((b * oh + p) * ow + q) * out + o)] = acc;
        }
      }
    }
  }
  return y;
}

Conv2D::HParams conv_hparams(const ConvCase& c, DType dtype = DType::f64) {
  Conv2D::HParams hp;
  hp.filter_shape = c.filter;
  hp.filter_stride = c.stride;
  hp.dilations = c.dilation;
  hp.padding = c.padding;
  hp.explicit_padding = c.explicit_padding;
  hp.feature_group_count = c.groups;
  hp.bias = c.bias;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

const std::vector<ConvCase> kCases = {
    {{3, 3, 4, 5}, {1, 1}, {1, 1}, "SAME", {}, 1, false},
    {{3, 2, 4, 6}, {2, 2}, {1, 1}, "SAME", {}, 2, true},
    {{2, 3, 3, 4}, {1, 2}, {2, 1}, "VALID", {}, 1, true},
    {{3, 3, 4, 4}, {2, 1}, {1, 2}, "SAME", {}, 4, false},  // depthwise
    {{1, 1, 4, 2}, {1, 1}, {1, 1}, "VALID", {}, 1, true},
    {{3, 3, 2, 3}, {2, 2}, {1, 1}, "EXPLICIT", {0, 2, 1, 1}, 1, true},
    {{4, 4, 2, 2}, {3, 3}, {1, 1}, "SAME", {}, 1, false},  // window larger than the stride
};

TEST(Conv2D, MatchesDirectConvolution) {
  for (size_t k = 0; k < kCases.size(); ++k) {
    const ConvCase& c = kCases[k];
    auto conv = build<Conv2D>(conv_hparams(c));
    Tree vars = init(*conv, random::key(uint32_t(k)));
    if (c.bias) vars["params"]["b"] = testing::random_array({c.filter[3]}, DType::f64, 40 + uint32_t(k));
    for (const Shape& in : {Shape{2, 7, 6, c.filter[2]}, Shape{1, 5, 9, c.filter[2]}}) {
      Array x = testing::random_array(in, DType::f64, uint32_t(k) + 1);
      Shape want_shape;
      std::vector<double> want =
          reference_conv(c, x, vars["params"]["w"].leaf(), c.bias ? vars["params"]["b"].leaf() : Array(), &want_shape);
      Array y = apply(*conv, vars, x).output;
      ASSERT_EQ(y.shape(), want_shape) << "case " << k;
      // conv_general_dilated computes f64 in f32 (oneDNN has no f64 convolution).
      EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5)) << "case " << k << " input " << in;
      if (c.padding == "SAME") {
        EXPECT_EQ(y.dim(1), (in[1] + c.stride[0] - 1) / c.stride[0]);
        EXPECT_EQ(y.dim(2), (in[2] + c.stride[1] - 1) / c.stride[1]);
      }
    }
  }
}

TEST(Conv2D, LeadingBatchAxesSingleImagesVmapAndZeroBatch) {
  const ConvCase& c = kCases[1];
  auto conv = build<Conv2D>(conv_hparams(c));
  Tree vars = init(*conv, random::key(1));
  Array x = testing::random_array({2, 3, 5, 4, 4}, DType::f64, 2);  // (2, 3) images of (5, 4, 4)
  Array flat = apply(*conv, vars, reshape(x, {6, 5, 4, 4})).output;
  Array y = apply(*conv, vars, x).output;
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3, 2, 6}));
  EXPECT_TRUE(all_close(reshape(y, {6, 3, 2, 6}), flat, 0, 0));
  Array one = apply(*conv, vars, reshape(slice_along(x, 0, 0, 1), {3, 5, 4, 4})).output;
  EXPECT_TRUE(all_close(one, slice_along(flat, 0, 0, 3), 0, 0));
  Array image = reshape(slice_along(reshape(x, {6, 5, 4, 4}), 0, 4, 5), {5, 4, 4});
  EXPECT_TRUE(all_close(apply(*conv, vars, image).output, reshape(slice_along(flat, 0, 4, 5), {3, 2, 6}), 0, 0));
  auto per_image = [&](const Array& xi) { return apply(*conv, vars, xi).output; };
  EXPECT_TRUE(all_close(vmap(per_image)(reshape(x, {6, 5, 4, 4})), flat, 1e-6, 1e-6));
  EXPECT_EQ(apply(*conv, vars, zeros({0, 5, 4, 4}, DType::f64)).output.shape(), (Shape{0, 3, 2, 6}));
}

TEST(Conv2D, Gradients) {
  // The layer is bilinear in (params, x), so central differences are exact
  // for any step: a large one keeps the f32 rounding of the f64 convolution
  // (see above) far below the tolerance.
  for (size_t k : {1, 2, 3, 5}) {
    const ConvCase& c = kCases[k];
    auto conv = build<Conv2D>(conv_hparams(c));
    Tree vars = init(*conv, random::key(7));
    Array x = testing::random_array({2, 5, 6, c.filter[2]}, DType::f64, 8);
    EXPECT_TRUE(testing::check_layer_vjp(
        *conv, vars, {x}, [](const Conv2D& l, const std::vector<Array>& in) { return l.fprop(in[0]); }, 0.5, 1e-5))
        << "case " << k;
  }
}

// Sample variance of a weight.
double variance(const Array& w) {
  std::vector<double> v = w.to_vector<double>();
  double m = 0, s = 0;
  for (double e : v) m += e / double(v.size());
  for (double e : v) s += (e - m) * (e - m) / double(v.size());
  return s;
}

TEST(Conv2D, WeightInitialisationUsesTheGroupFanIn) {
  Conv2D::HParams hp;
  hp.filter_shape = {3, 3, 32, 64};
  hp.params_init = WeightInit::gaussian_sqrt_fan_in(1.0);
  Tree vars = init(*build<Conv2D>(hp), random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/w"}));
  EXPECT_NEAR(variance(vars.at_path("params/w").leaf()) * (3 * 3 * 32), 1.0, 0.05);
  // Depthwise: w is (5, 5, 1, 256) and fan_in = 5 * 5 * 256 / 256.
  hp.filter_shape = {5, 5, 256, 256};
  hp.feature_group_count = 256;
  hp.bias = true;
  vars = init(*build<Conv2D>(hp), random::key(1));
  EXPECT_EQ(vars.at_path("params/w").leaf().shape(), (Shape{5, 5, 1, 256}));
  EXPECT_NEAR(variance(vars.at_path("params/w").leaf()) * 25, 1.0, 0.06);
  EXPECT_TRUE(all_close(vars.at_path("params/b").leaf(), std::vector<double>(256, 0.0), 0, 0));
  // The default (xavier): U(-l, l), l = sqrt(6 / (fan_in + fan_out)), fans kh*kw*in/G and kh*kw*out.
  hp = Conv2D::HParams();
  hp.filter_shape = {3, 3, 16, 32};
  hp.feature_group_count = 2;
  Array w = init(*build<Conv2D>(hp), random::key(2)).at_path("params/w").leaf();
  const double l = std::sqrt(6.0 / (9 * 8 + 9 * 32));
  EXPECT_LE(max(abs(w)).item<double>(), l);
  EXPECT_NEAR(variance(w) / (l * l / 3), 1.0, 0.06);
}

TEST(Conv2D, MixedPrecisionAndJit) {
  const ConvCase& c = kCases[1];
  auto conv = build<Conv2D>(conv_hparams(c, DType::f32));
  Tree vars = init(*conv, random::key(3));
  Array x = testing::random_array({2, 6, 6, 4}, DType::f32, 4);
  Array y = apply(*conv, vars, x).output;
  auto f = [&](const Tree& v, const Array& xs) { return apply(*conv, v, xs).output; };
  EXPECT_TRUE(all_close(jit(f)(vars, x), y, 1e-6, 1e-6));
  Conv2D::HParams hp = conv_hparams(c, DType::f32);
  hp.fprop_dtype = DType::bf16;
  Array y16 = apply(*build<Conv2D>(hp), vars, x).output;
  EXPECT_EQ(y16.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y16, y, 3e-2, 3e-2));
}

TEST(Conv2D, BuildsFromConfig) {
  auto cfg = Config::make("Conv2D");
  cfg.apply_overrides({"filter_shape=[3, 3, 2, 4]", "filter_stride=[2, 1]", "padding=EXPLICIT",
                       "explicit_padding=[1, 1, 0, 2]", "bias=true"});
  auto conv = build<Conv2D>(cfg);
  Tree vars = init(*conv, random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/w", "params/b"}));
  EXPECT_EQ(apply(*conv, vars, ones({1, 5, 5, 2})).output.shape(), (Shape{1, 3, 5, 4}));
  auto loaded = build<Conv2D>(Config::from_json(cfg.to_json()));
  EXPECT_EQ(loaded->hparams<Conv2D::HParams>().explicit_padding, (Ints{1, 1, 0, 2}));
}

TEST(Conv2D, Errors) {
  Conv2D::HParams hp;
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "Conv2D '': filter_shape () must be 4 positive sizes (kh, kw, in, out)");
  hp.filter_shape = {3, 3, 4, 0};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "filter_shape (3, 3, 4, 0) must be 4 positive sizes");
  hp.filter_shape = {3, 3, 4, 6};
  hp.filter_stride = {1};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "filter_stride (1,) must be 2 positive integers");
  hp.filter_stride = {1, 1};
  hp.dilations = {0, 1};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "dilations (0, 1) must be 2 positive integers");
  hp.dilations = {1, 1};
  hp.feature_group_count = 4;
  EXPECT_PAX_ERROR(build<Conv2D>(hp),
                   "feature_group_count = 4 must be positive and divide the input depth 4 and the "
                   "output depth 6");
  hp.feature_group_count = 2;
  hp.padding = "same";
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "Conv2D '': padding 'same' must be \"SAME\", \"VALID\" or \"EXPLICIT\"");
  hp.padding = "EXPLICIT";
  hp.explicit_padding = {1, 1};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "explicit_padding (1, 1) must have 4 entries");
  hp.explicit_padding = {1, 1, -1, 0};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "must be non-negative");
  hp.padding = "SAME";
  hp.explicit_padding = {1, 1, 1, 1};
  EXPECT_PAX_ERROR(build<Conv2D>(hp), "is only used with padding = EXPLICIT (got padding = SAME)");
  hp.explicit_padding = {};
  hp.padding = "VALID";
  auto conv = build<Conv2D>(hp);
  Tree vars = init(*conv, random::key(0));
  EXPECT_PAX_ERROR(apply(*conv, vars, ones({2, 5, 5, 3})), "Conv2D '': input f32[2,5,5,3] must be (..., H, W, in = 4)");
  EXPECT_PAX_ERROR(apply(*conv, vars, ones({5, 4})), "must be (..., H, W, in = 4)");
  EXPECT_PAX_ERROR(apply(*conv, vars, ones({2, 5, 5, 4}, DType::i32)), "must be floating");
  EXPECT_PAX_ERROR(apply(*conv, vars, ones({2, 2, 5, 4})),
                   "Conv2D '': spatial size 2 (axis 0, padded to 2) is smaller than the window of size 3");
  hp.dilations = {1, 3};
  EXPECT_PAX_ERROR(apply(*build<Conv2D>(hp), vars, ones({2, 5, 5, 4})),
                   "spatial size 5 (axis 1, padded to 5) is smaller than the dilated window of size 7");
}

}  // namespace
}  // namespace pax::nn

// MaxPool and AvgPool against a direct window loop (SAME / VALID / EXPLICIT,
// overlapping and non-overlapping windows, both AvgPool counts), NaN and
// infinities, gradients, bf16, leading axes, vmap, jit and errors.
#include "pax/nn/poolings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

struct PoolCase {
  Ints window, strides;
  std::string padding;
  Ints explicit_padding;
};

const std::vector<PoolCase> kCases = {
    {{2, 2}, {2, 2}, "VALID", {}},  // non-overlapping (reshape path), odd sizes cropped
    {{3, 3}, {1, 1}, "SAME", {}},  {{3, 2}, {2, 1}, "SAME", {}},
    {{2, 3}, {1, 2}, "VALID", {}}, {{3, 3}, {2, 2}, "EXPLICIT", {1, 0, 2, 1}},
    {{2, 2}, {2, 2}, "SAME", {}},  // non-overlapping with padding
    {{1, 1}, {1, 1}, "VALID", {}},
};

enum class Kind { max, avg_exclude_pad, avg_include_pad };

// The expected pooling of x (N, H, W, C) by a direct loop over each window.
std::vector<double> reference_pool(const PoolCase& c, Kind kind, const Array& x, Shape* shape) {
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), ch = x.dim(3);
  const int64_t sizes[2] = {h, w};
  int64_t lo[2] = {0, 0}, hi[2] = {0, 0}, out[2];
  for (int i = 0; i < 2; ++i) {
    if (c.padding == "EXPLICIT") {
      lo[i] = c.explicit_padding[size_t(2 * i)];
      hi[i] = c.explicit_padding[size_t(2 * i + 1)];
    } else if (c.padding == "SAME") {
      const int64_t o = (sizes[i] + c.strides[size_t(i)] - 1) / c.strides[size_t(i)];
      const int64_t total = std::max<int64_t>(0, (o - 1) * c.strides[size_t(i)] + c.window[size_t(i)] - sizes[i]);
      lo[i] = total / 2;
      hi[i] = total - lo[i];
    }
    out[i] = (sizes[i] + lo[i] + hi[i] - c.window[size_t(i)]) / c.strides[size_t(i)] + 1;
  }
  *shape = Shape{n, out[0], out[1], ch};
  std::vector<double> xv = x.to_vector<double>(), y;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t p = 0; p < out[0]; ++p) {
      for (int64_t q = 0; q < out[1]; ++q) {
        for (int64_t k = 0; k < ch; ++k) {
          double acc = kind == Kind::max ? -std::numeric_limits<double>::infinity() : 0.0;
          double count = 0;
          bool nan = false;
          for (int64_t i = 0; i < c.window[0]; ++i) {
            for (int64_t j = 0; j < c.window[1]; ++j) {
              const int64_t ih = p * c.strides[0] - lo[0] + i, iw = q * c.strides[1] - lo[1] + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              const double v = xv[size_t(((b * h + ih) * w + iw) * ch + k)];
              nan = nan || std::isnan(v);
              acc = kind == Kind::max ? std::max(acc, v) : acc + v;
              count += 1;
            }
          }
          if (kind == Kind::avg_exclude_pad) acc /= count;
          if (kind == Kind::avg_include_pad) acc /= double(c.window[0] * c.window[1]);
          y.push_back(nan ? std::nan("") : acc);
        }
      }
    }
  }
  return y;
}

template <class H>
H pool_hparams(const PoolCase& c) {
  H hp;
  hp.window_shape = c.window;
  hp.strides = c.strides;
  hp.padding = c.padding;
  hp.explicit_padding = c.explicit_padding;
  hp.dtype = hp.fprop_dtype = DType::f64;
  return hp;
}

// Runs the pooling layer of kind on x.
Array run(const PoolCase& c, Kind kind, const Array& x) {
  if (kind == Kind::max) {
    auto l = build<MaxPool>(pool_hparams<MaxPool::HParams>(c));
    return apply(*l, init(*l, random::key(0)), x).output;
  }
  auto hp = pool_hparams<AvgPool::HParams>(c);
  hp.count_include_pad = kind == Kind::avg_include_pad;
  auto l = build<AvgPool>(hp);
  return apply(*l, init(*l, random::key(0)), x).output;
}

TEST(Pooling, MatchesDirectWindowLoop) {
  for (size_t k = 0; k < kCases.size(); ++k) {
    for (const Shape& in : {Shape{2, 7, 6, 3}, Shape{1, 5, 5, 2}, Shape{3, 4, 9, 1}}) {
      Array x = testing::random_array(in, DType::f64, uint32_t(k) + 1, -3, 3);
      for (Kind kind : {Kind::max, Kind::avg_exclude_pad, Kind::avg_include_pad}) {
        Shape want_shape;
        std::vector<double> want = reference_pool(kCases[k], kind, x, &want_shape);
        Array y = run(kCases[k], kind, x);
        ASSERT_EQ(y.shape(), want_shape) << "case " << k << " input " << in;
        EXPECT_TRUE(all_close(y, want, 1e-12, 1e-12)) << "case " << k << " kind " << int(kind) << " input " << in;
      }
    }
  }
}

TEST(Pooling, NanAndInfinities) {
  Array x = testing::random_array({1, 4, 4, 1}, DType::f64, 3);
  std::vector<double> v = x.to_vector<double>();
  v[0] = std::nan("");
  v[5] = std::numeric_limits<double>::infinity();
  v[15] = -std::numeric_limits<double>::infinity();
  x = array(v, Shape{1, 4, 4, 1});
  for (const PoolCase& c : {kCases[0], kCases[1]}) {
    for (Kind kind : {Kind::max, Kind::avg_exclude_pad}) {
      Shape s;
      EXPECT_TRUE(all_close(run(c, kind, x), reference_pool(c, kind, x, &s), 1e-12, 1e-12));
    }
  }
}

TEST(Pooling, Gradients) {
  for (size_t k : {0, 1, 2, 4, 5}) {
    Array x = testing::random_array({2, 5, 6, 2}, DType::f64, 9 + uint32_t(k), -2, 2);
    for (Kind kind : {Kind::max, Kind::avg_exclude_pad, Kind::avg_include_pad}) {
      testing::ArrayFn f = [&](const std::vector<Array>& a) { return run(kCases[k], kind, a[0]); };
      EXPECT_TRUE(testing::check_vjp(f, {x})) << "case " << k << " kind " << int(kind);
    }
  }
}

TEST(Pooling, Bf16LeadingAxesVmapJitAndZeroBatch) {
  const PoolCase& c = kCases[2];
  Array x = testing::random_array({2, 3, 6, 5, 4}, DType::f32, 5, 100, 101);  // (2, 3) images
  Array flat = reshape(x, {6, 6, 5, 4});
  for (Kind kind : {Kind::max, Kind::avg_exclude_pad}) {
    Shape s;
    std::vector<double> want = reference_pool(c, kind, flat.astype(DType::bf16).astype(DType::f64), &s);
    if (kind == Kind::max) {
      MaxPool::HParams hp = pool_hparams<MaxPool::HParams>(c);
      hp.dtype = hp.fprop_dtype = DType::bf16;
      auto l = build<MaxPool>(hp);
      Array y = apply(*l, Tree::dict(), x.astype(DType::bf16)).output;
      EXPECT_EQ(y.dtype(), DType::bf16);
      EXPECT_TRUE(all_close(reshape(y, s.dims()), want, 0, 0));
      continue;
    }
    AvgPool::HParams hp = pool_hparams<AvgPool::HParams>(c);
    hp.dtype = hp.fprop_dtype = DType::bf16;
    auto l = build<AvgPool>(hp);
    // Summed in f32: within one bf16 rounding of the exact mean.
    Array y = apply(*l, Tree::dict(), x.astype(DType::bf16)).output;
    EXPECT_EQ(y.dtype(), DType::bf16);
    EXPECT_TRUE(all_close(reshape(y, s.dims()), want, 4e-3, 0));
    // Leading axes, a single image, vmap and jit agree with the flat batch.
    hp.dtype = hp.fprop_dtype = DType::f32;
    auto l32 = build<AvgPool>(hp);
    auto f = [&](const Array& xs) { return apply(*l32, Tree::dict(), xs).output; };
    Array y32 = f(flat);
    EXPECT_TRUE(all_close(reshape(f(x), y32.shape().dims()), y32, 0, 0));
    EXPECT_TRUE(all_close(f(reshape(slice_along(flat, 0, 1, 2), {6, 5, 4})),
                          reshape(slice_along(y32, 0, 1, 2), {y32.dim(1), y32.dim(2), 4}), 0, 0));
    EXPECT_TRUE(all_close(vmap(f)(flat), y32, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(jit(f)(flat), y32, 1e-6, 1e-6));
    EXPECT_EQ(f(zeros({0, 6, 5, 4})).shape(), (Shape{0, y32.dim(1), y32.dim(2), 4}));
  }
}

TEST(Pooling, BuildsFromConfig) {
  auto cfg = Config::make("MaxPool");
  cfg.apply_overrides({"window_shape=[3, 3]", "strides=[2, 2]", "padding=SAME"});
  auto l = build_layer(cfg);
  Array x = testing::random_array({1, 5, 5, 2}, DType::f32, 1);
  Array y =
      apply_with(static_cast<const MaxPool&>(*l), Tree::dict(), [&](const MaxPool& p) { return p.fprop(x); }).output;
  Shape s;
  EXPECT_TRUE(all_close(y, reference_pool({{3, 3}, {2, 2}, "SAME", {}}, Kind::max, x, &s), 0, 0));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 3, 2}));
  auto avg = Config::make("AvgPool");
  avg.apply_overrides({"count_include_pad=true"});
  EXPECT_TRUE(build<AvgPool>(avg)->hparams<AvgPool::HParams>().count_include_pad);
}

TEST(Pooling, Errors) {
  MaxPool::HParams hp;
  hp.window_shape = {2};
  EXPECT_PAX_ERROR(build<MaxPool>(hp), "MaxPool '': window_shape (2,) must be 2 positive integers");
  hp.window_shape = {2, 2};
  hp.strides = {0, 1};
  EXPECT_PAX_ERROR(build<MaxPool>(hp), "strides (0, 1) must be 2 positive integers");
  hp.strides = {1, 1};
  hp.padding = "FULL";
  EXPECT_PAX_ERROR(build<MaxPool>(hp), "MaxPool '': padding 'FULL' must be \"SAME\", \"VALID\" or \"EXPLICIT\"");
  hp.padding = "EXPLICIT";
  hp.explicit_padding = {0, 2, 0, 0};
  EXPECT_PAX_ERROR(build<MaxPool>(hp), "explicit_padding (0, 2, 0, 0) must be smaller than window_shape (2, 2)");
  hp.explicit_padding = {0, 1};
  EXPECT_PAX_ERROR(build<MaxPool>(hp), "explicit_padding (0, 1) must have 4 entries");
  AvgPool::HParams avg;
  avg.window_shape = {3, 3};
  avg.padding = "VALID";
  auto l = build<AvgPool>(avg);
  EXPECT_PAX_ERROR(apply(*l, Tree::dict(), ones({4, 4})), "AvgPool '': input f32[4,4] must be (..., H, W, C)");
  EXPECT_PAX_ERROR(apply(*l, Tree::dict(), ones({1, 4, 4, 1}, DType::i32)), "must be floating");
  EXPECT_PAX_ERROR(apply(*l, Tree::dict(), ones({1, 4, 2, 1})),
                   "AvgPool '': spatial size 2 (axis 1, padded to 2) is smaller than the window of size 3");
}

}  // namespace
}  // namespace pax::nn

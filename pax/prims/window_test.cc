// Windowed reductions against reference loops: reduce_window_max (strided and
// overlapping windows, padding, all-padding windows, NaN, bf16),
// select_and_scatter_add (ties go to the first maximum, overlapping windows
// accumulate) and select_and_gather_add; their VJPs and JVPs against finite
// differences, vmap against a loop, jit against eager, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

struct Ref {
  std::vector<double> max;      // per output
  std::vector<int64_t> argmax;  // flat input index per output, -1 for all padding
  Shape out;
};

// The windows of x (any rank) by brute force.
Ref reference(const Array& x, const lax::Window& w) {
  const Shape& s = x.shape();
  const int64_t r = s.rank();
  Ints out;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t padded = s[d] + w.padding[size_t(2 * d)] + w.padding[size_t(2 * d + 1)];
    out.push_back(padded < w.dimensions[size_t(d)] ? 0 : (padded - w.dimensions[size_t(d)]) / w.strides[size_t(d)] + 1);
  }
  Ref ref{{}, {}, Shape(out)};
  const std::vector<double> v = x.astype(DType::f64).to_vector<double>();
  for (int64_t o = 0; o < ref.out.numel(); ++o) {
    const std::vector<int64_t> oi = testing::unravel(o, ref.out);
    double best = -std::numeric_limits<double>::infinity();
    int64_t at = -1;
    const Shape window(w.dimensions);
    for (int64_t k = 0; k < window.numel(); ++k) {
      const std::vector<int64_t> wi = testing::unravel(k, window);
      std::vector<int64_t> ii(static_cast<size_t>(r));
      bool inside = true;
      for (int64_t d = 0; d < r; ++d) {
        ii[size_t(d)] = oi[size_t(d)] * w.strides[size_t(d)] + wi[size_t(d)] - w.padding[size_t(2 * d)];
        inside = inside && ii[size_t(d)] >= 0 && ii[size_t(d)] < s[d];
      }
      if (!inside) continue;
      const int64_t flat = testing::ravel(ii, s);
      const double e = v[size_t(flat)];
      if (at < 0 || (!std::isnan(best) && (std::isnan(e) || e > best))) {
        best = e;
        at = flat;
      }
    }
    ref.max.push_back(best);
    ref.argmax.push_back(at);
  }
  return ref;
}

const lax::Window kPool2{{1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0, 0, 0, 0, 0}};
const lax::Window kOverlap{{1, 3, 3, 1}, {1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 0, 0}};
const lax::Window kStrided{{2, 3, 2}, {1, 2, 3}, {1, 0, 2, 1, 0, 1}};

TEST(ReduceWindowMax, MatchesReference) {
  for (const auto& [shape, w] : std::vector<std::pair<Shape, lax::Window>>{
           {{2, 6, 8, 3}, kPool2}, {{2, 7, 6, 5}, kOverlap}, {{4, 9, 7}, kStrided}, {{3, 5, 4, 2}, kPool2}}) {
    Array x = random_array(shape, DType::f32, 1);
    const Ref ref = reference(x, w);
    Array y = lax::reduce_window_max(x, w);
    EXPECT_EQ(y.shape(), ref.out);
    EXPECT_TRUE(all_close(y, ref.max, 0, 0)) << shape;
  }
}

TEST(ReduceWindowMax, PaddingNaNAndBf16) {
  // A window made only of padding is -inf; NaN wins its window.
  Array x = lax::reshape(arange(12).astype(DType::f32), {3, 4});
  std::vector<float> v = x.to_vector<float>();
  v[5] = std::numeric_limits<float>::quiet_NaN();
  x = array<float>(v, {3, 4});
  const lax::Window w{{2, 2}, {2, 2}, {0, 3, 0, 0}};  // rows 3..4 are padding only
  const Ref ref = reference(x, w);
  Array y = lax::reduce_window_max(x, w);
  EXPECT_TRUE(all_close(y, ref.max, 0, 0));
  EXPECT_TRUE(std::isnan(y.to_vector<double>()[0]));
  EXPECT_EQ(y.to_vector<double>().back(), -std::numeric_limits<double>::infinity());
  Array h = random_array({2, 6, 8, 3}, DType::bf16, 4);
  Array yh = lax::reduce_window_max(h, kPool2);
  EXPECT_EQ(yh.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(yh, reference(h, kPool2).max, 0, 0));  // a max of bf16 values is one of them
}

TEST(SelectAndScatterAdd, FirstMaximumTakesTheSourceAndOverlapsAdd) {
  for (const auto& [shape, w] : std::vector<std::pair<Shape, lax::Window>>{
           {{2, 6, 8, 3}, kPool2}, {{2, 7, 6, 5}, kOverlap}, {{4, 9, 7}, kStrided}}) {
    // Values on a coarse grid, so that windows hold ties.
    Array x = (random_array(shape, DType::f32, 2) * 3.0).astype(DType::i32).astype(DType::f32);
    const Ref ref = reference(x, w);
    Array src = random_array(ref.out, DType::f32, 3);
    std::vector<double> want(size_t(shape.numel()), 0.0);
    const std::vector<double> s = src.to_vector<double>();
    for (size_t o = 0; o < ref.argmax.size(); ++o) {
      if (ref.argmax[o] >= 0) want[size_t(ref.argmax[o])] += s[o];
    }
    EXPECT_TRUE(all_close(lax::select_and_scatter_add(src, x, w), want, 1e-6, 1e-6)) << shape;
    Array t = random_array(shape, DType::f32, 5);
    const std::vector<double> tv = t.to_vector<double>();
    std::vector<double> gathered;
    for (int64_t at : ref.argmax) gathered.push_back(at >= 0 ? tv[size_t(at)] : 0.0);
    EXPECT_TRUE(all_close(lax::select_and_gather_add(t, x, w), gathered, 0, 0)) << shape;
  }
}

TEST(WindowTransforms, VjpJvpVmapJit) {
  // f64 and distinct values: the maxima do not move under the differences.
  for (const lax::Window& w : {kPool2, kOverlap}) {
    Array x = random_array({2, 6, 6, 3}, DType::f64, 7);
    auto f = [w](const std::vector<Array>& a) { return lax::reduce_window_max(a[0], w); };
    EXPECT_TRUE(testing::check_vjp(f, {x}));
    EXPECT_TRUE(testing::check_jvp(f, {x}));
    EXPECT_TRUE(testing::check_vjp_order2(f, {x}));
    EXPECT_TRUE(testing::check_vmap(f, {x}, {2}, 3, 0));
    EXPECT_TRUE(testing::check_jit(f, {x}));
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(f, {x}), {x}));
    const Shape out = lax::reduce_window_max(x, w).shape();
    auto scatter = [w](const std::vector<Array>& a) { return lax::select_and_scatter_add(a[0], a[1], w); };
    auto gather = [w](const std::vector<Array>& a) { return lax::select_and_gather_add(a[0], a[1], w); };
    Array src = random_array(out, DType::f64, 8);
    EXPECT_TRUE(testing::check_vjp(scatter, {src, x}));
    EXPECT_TRUE(testing::check_jvp(gather, {x, x}));
    EXPECT_TRUE(testing::check_vmap(scatter, {src, x}, {0, std::nullopt}, 2, 0));
    EXPECT_TRUE(testing::check_vmap(gather, {x, x}, {1, 3}, 2, 0));
  }
}

// A window larger than the array: no output, and a gradient of zeros.
TEST(WindowEdges, NoWindowFits) {
  Array x = random_array({2, 3}, DType::f32, 1);
  const lax::Window w{{3, 3}, {1, 1}, {0, 0, 0, 0}};
  Array y = lax::reduce_window_max(x, w);
  EXPECT_EQ(y.shape(), Shape({0, 1}));
  Array g = lax::select_and_scatter_add(zeros({0, 1}), x, w);
  EXPECT_TRUE(all_close(g, std::vector<double>(6, 0.0), 0, 0));
  EXPECT_EQ(lax::select_and_gather_add(x, x, w).shape(), Shape({0, 1}));
}

TEST(WindowErrors, NameTheProblem) {
  Array x = random_array({2, 4, 4, 3}, DType::f32, 1);
  EXPECT_PAX_ERROR(lax::reduce_window_max(x, {{2, 2}, {2, 2}, {0, 0, 0, 0}}), "one per axis");
  EXPECT_PAX_ERROR(lax::reduce_window_max(x, {{1, 0, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0, 0, 0, 0, 0}}), ">= 1");
  EXPECT_PAX_ERROR(lax::reduce_window_max(x.astype(DType::i32), kPool2), "floating");
  EXPECT_PAX_ERROR(lax::select_and_scatter_add(x, x, kPool2), "source");
}

}  // namespace
}  // namespace pax

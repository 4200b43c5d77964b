// Batching rules of the reductions against a loop over the batch (batch axis
// before, between and after the reduced axes; negative axes; 0-d and empty
// examples; bf16, integers and bool), and the collectives over a vmap axis:
// BatchNorm-style normalisation with pmean, psum of shared values, pmax /
// pmin, all_gather, axis_index, gradients through pmean, stop_gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;
using testing::check_vmap;

Array f32(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f32, seed); }

ArrayFn reduce(Array (*op)(const Array&, const Ints&), Ints axes) {
  return [op, axes](const std::vector<Array>& a) { return op(a[0], axes); };
}

TEST(ReduceBatch, ReductionsAroundTheBatchAxis) {
  Array (*const ops[])(const Array&, const Ints&) = {lax::reduce_sum, lax::reduce_max, lax::reduce_min,
                                                     lax::reduce_prod};
  const std::vector<Ints> axes_list = {{}, {0}, {2}, {-1}, {0, 2}, {2, 0}, {0, 1, 2}, {1}};
  for (auto op : ops) {
    for (const Ints& axes : axes_list) {
      for (int64_t bdim : {0, 1, 2, 3}) {
        EXPECT_TRUE(check_vmap(reduce(op, axes), {f32({2, 3, 4}, 1)}, {bdim}, 3, 1e-6))
            << "axes " << ints_str(axes) << " batch axis " << bdim;
      }
    }
    EXPECT_TRUE(check_vmap(reduce(op, {}), {f32({}, 2)}, {0}, 4)) << "0-d";
  }
  // Empty reduced axes give the identity.
  EXPECT_TRUE(check_vmap(reduce(lax::reduce_sum, {0}), {f32({0, 3}, 3)}, {1}));
  EXPECT_TRUE(check_vmap(reduce(lax::reduce_prod, {0}), {f32({0, 3}, 3)}, {2}));
}

TEST(ReduceBatch, DtypesAndLogicalReductions) {
  auto as_bool = [](const Array& x) { return lax::gt(x, zeros_like(x)); };
  auto all_of = [as_bool](const std::vector<Array>& a) { return lax::reduce_and(as_bool(a[0]), {1}); };
  auto any_of = [as_bool](const std::vector<Array>& a) { return lax::reduce_or(as_bool(a[0]), {0, 1}); };
  auto int_sum = [](const std::vector<Array>& a) {
    return lax::reduce_sum(floor(a[0] * 100.0).astype(DType::i32), {0});
  };
  auto int_max = [](const std::vector<Array>& a) {
    return lax::reduce_max(floor(a[0] * 100.0).astype(DType::i64), {1});
  };
  auto bf16_sum = [](const std::vector<Array>& a) { return lax::reduce_sum(a[0], {1}); };
  for (int64_t bdim : {0, 1, 2}) {
    EXPECT_TRUE(check_vmap(all_of, {f32({2, 2}, 4)}, {bdim}, 6)) << bdim;
    EXPECT_TRUE(check_vmap(any_of, {f32({2, 2}, 5)}, {bdim}, 6)) << bdim;
    EXPECT_TRUE(check_vmap(int_sum, {f32({3, 4}, 6)}, {bdim}, 3, 0)) << bdim;
    EXPECT_TRUE(check_vmap(int_max, {f32({3, 4}, 7)}, {bdim}, 3, 0)) << bdim;
    // Layouts may change the summation order: one bf16 ulp.
    EXPECT_TRUE(check_vmap(bf16_sum, {testing::random_array({3, 4}, DType::bf16, 8)}, {bdim}, 3, 8e-3)) << bdim;
  }
}

TEST(ReduceBatch, ArgReductionsAndCumsum) {
  for (int64_t axis : {0, 1, 2, -1, -3}) {
    for (int64_t bdim : {0, 1, 2, 3}) {
      auto amax = [axis](const std::vector<Array>& a) { return lax::argmax(a[0], axis); };
      auto amin = [axis](const std::vector<Array>& a) { return lax::argmin(a[0], axis, DType::i64); };
      auto csum = [axis](const std::vector<Array>& a) { return lax::cumsum(a[0], axis); };
      auto crev = [axis](const std::vector<Array>& a) { return lax::cumsum(a[0], axis, true); };
      const std::vector<Array> args{f32({2, 3, 4}, 9)};
      EXPECT_TRUE(check_vmap(amax, args, {bdim}, 3, 0)) << axis << " " << bdim;
      EXPECT_TRUE(check_vmap(amin, args, {bdim}, 3, 0)) << axis << " " << bdim;
      EXPECT_TRUE(check_vmap(csum, args, {bdim}, 3, 1e-6)) << axis << " " << bdim;
      EXPECT_TRUE(check_vmap(crev, args, {bdim}, 3, 1e-6)) << axis << " " << bdim;
    }
  }
  // The index dtype survives batching.
  Array idx = vmap([](const Array& x) { return lax::argmax(x, 0, DType::i64); })(f32({4, 5}, 10));
  EXPECT_EQ(idx.aval().str(), "i64[4]");
  auto int_cumsum = [](const std::vector<Array>& a) { return lax::cumsum(floor(a[0] * 9.0).astype(DType::i32), 0); };
  EXPECT_TRUE(check_vmap(int_cumsum, {f32({5}, 11)}, {1}, 3, 0));
}

TEST(ReduceBatch, NestedVmapOfReductions) {
  auto inner = [](const std::vector<Array>& a) {
    FlatFn flat = [](std::span<const Array> xs) {
      return std::vector<Array>{lax::reduce_max(lax::cumsum(xs[0], 1), {0})};
    };
    std::vector<std::optional<int64_t>> in_axes{2};
    std::vector<int64_t> out_axes{1};
    return vmap_flat(flat, a, in_axes, out_axes, "")[0];
  };
  for (int64_t bdim : {0, 1, 3}) EXPECT_TRUE(check_vmap(inner, {f32({2, 3, 4}, 12)}, {bdim}, 3, 1e-6)) << bdim;
}

TEST(ReduceBatch, ErrorsNameTheExample) {
  auto f = [](const Array& x) { return lax::reduce_sum(x, {2}); };
  EXPECT_PAX_ERROR(vmap(f)(zeros({4, 2, 3})), "reduce_sum of f32[2,3]");
  auto g = [](const Array& x) { return lax::argmax(x, 0); };
  EXPECT_PAX_ERROR(vmap(g)(zeros({4})), "argmax: operand f32[] is a scalar");
  EXPECT_PAX_ERROR(vmap(g, {.in_axes = {1}})(zeros({0, 4})), "axis 0 has size 0");
}

// ---------------------------------------------------------------------------
// collectives over the vmap axis

// x - mean over the batch, divided by the batch standard deviation.
Array batch_norm(const Array& x) {
  Array centered = x - lax::pmean(x, "batch");
  Array var = lax::pmean(centered * centered, "batch");
  return centered * rsqrt(var + 1e-5);
}

TEST(ReduceBatch, BatchNormWithPmean) {
  const int64_t n = 6, c = 3;
  Array x = testing::random_array({n, c}, DType::f64, 13, -2.0, 3.0);
  for (int64_t in_axis : {0, 1}) {
    Array xin = in_axis == 0 ? x : transpose(x);
    Array y = vmap(batch_norm, {.in_axes = {in_axis}, .axis_name = "batch"})(xin);
    ASSERT_EQ(y.shape(), Shape({n, c}));
    std::vector<double> v = x.to_vector<double>(), got = y.to_vector<double>();
    for (int64_t j = 0; j < c; ++j) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += v[size_t(i * c + j)] / double(n);
      for (int64_t i = 0; i < n; ++i) var += std::pow(v[size_t(i * c + j)] - mean, 2) / double(n);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(got[size_t(i * c + j)], (v[size_t(i * c + j)] - mean) / std::sqrt(var + 1e-5), 1e-12);
      }
    }
  }
  // 0-d examples: normalising a vector across its elements.
  Array s = vmap([](const Array& e) { return e - lax::pmean(e, "batch"); },
                 {.axis_name = "batch"})(array<double>({1.0, 2.0, 6.0}));
  EXPECT_TRUE(testing::all_close(s, {-2.0, -1.0, 3.0}, 0, 1e-15));
}

TEST(ReduceBatch, CollectivesOverTheBatch) {
  Array x = array<float>({3, 1, 4, 1, 5, 9, 2, 6}, {4, 2});
  auto run = [&](auto f) { return vmap(f, {.axis_name = "i"})(x); };
  EXPECT_TRUE(testing::all_close(run([](const Array& e) { return lax::psum(e, "i"); }),
                                 {14, 17, 14, 17, 14, 17, 14, 17}, 0, 0));
  EXPECT_TRUE(
      testing::all_close(run([](const Array& e) { return lax::pmax(e, "i"); }), {5, 9, 5, 9, 5, 9, 5, 9}, 0, 0));
  EXPECT_TRUE(
      testing::all_close(run([](const Array& e) { return lax::pmin(e, "i"); }), {2, 1, 2, 1, 2, 1, 2, 1}, 0, 0));
  // A value shared by every example sums to size times itself.
  Array shared = array<float>({1, 2});
  Array ps = vmap([&](const Array& e) { return e + lax::psum(shared, "i"); }, {.axis_name = "i"})(x);
  EXPECT_TRUE(testing::all_close(ps, {7, 9, 8, 9, 9, 17, 6, 14}, 0, 0));
  // axis_index and all_gather feed ordinary batched arithmetic.
  Array idx = run([](const Array& e) { return e * lax::axis_index("i").astype(DType::f32); });
  EXPECT_TRUE(testing::all_close(idx, {0, 0, 4, 1, 10, 18, 6, 18}, 0, 0));
  Array gathered = run([](const Array& e) { return lax::reduce_sum(lax::all_gather(e, "i"), {0}) - e; });
  EXPECT_TRUE(testing::all_close(gathered, {11, 16, 10, 16, 9, 8, 12, 11}, 0, 0));
  // Nested names: the collective reduces only its own axis.
  Array x3 = testing::random_array({2, 3, 4}, DType::f64, 14);
  Array inner_sum =
      vmap(vmap([](const Array& e) { return lax::psum(e, "i"); }, {.axis_name = "j"}), {.axis_name = "i"})(x3);
  EXPECT_TRUE(testing::all_close(inner_sum, broadcast_to(sum(x3, 0, true), {2, 3, 4}), 1e-14, 1e-14));
  Array outer_sum =
      vmap(vmap([](const Array& e) { return lax::pmax(e, "j"); }, {.axis_name = "j"}), {.axis_name = "i"})(x3);
  EXPECT_TRUE(testing::all_close(outer_sum, broadcast_to(max(x3, 1, true), {2, 3, 4}), 0, 0));
}

// Through pmean the gradient of example i collects every example's
// dependence on x_i: d/dx_i sum_j <x_j, mean(x)> = 2 mean(x).
TEST(ReduceBatch, GradientThroughPmean) {
  auto f = [](const Array& e) { return sum(e * lax::pmean(e, "b")); };
  Array x = testing::random_array({5, 3}, DType::f64, 15);
  Array g = vmap(grad(f), {.axis_name = "b"})(x);
  EXPECT_TRUE(testing::all_close(g, broadcast_to(mean(x, 0, true) * 2.0, {5, 3}), 1e-12, 1e-12));
}

TEST(ReduceBatch, StopGradientUnderVmap) {
  auto f = [](const Array& w) { return sum(w * stop_gradient(w) * w); };  // d/dw = 2 w * w
  Array ws = testing::random_array({4, 3}, DType::f64, 16);
  Array g = vmap(grad(f), {.in_axes = {1}, .out_axes = {1}})(ws);
  EXPECT_TRUE(testing::all_close(g, ws * ws * 2.0, 1e-14, 1e-14));
  Array y = vmap([](const Array& w) { return stop_gradient(w) + w; }, {.in_axes = {1}})(ws);
  EXPECT_TRUE(testing::all_close(y, transpose(ws) * 2.0, 0, 0));
}

}  // namespace
}  // namespace pax

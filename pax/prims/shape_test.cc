// Shape primitives against hand-computed values and slow reference loops.
#include <gtest/gtest.h>

#include <numeric>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;

Array arange_f32(const Shape& s) {
  std::vector<float> v(size_t(s.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  return array(v, s);
}

TEST(ShapePrims, ReshapeSharesBuffer) {
  Array x = arange_f32({2, 3});
  Array y = lax::reshape(x, {3, 2});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(testing::memory_address(y), testing::memory_address(x));
  EXPECT_PAX_ERROR(lax::reshape(x, {4, 2}), "cannot reshape f32[2,3]");
}

TEST(ShapePrims, Transpose2DAndND) {
  Array x = arange_f32({2, 3});
  EXPECT_TRUE(all_close(lax::transpose(x, {1, 0}), {0, 3, 1, 4, 2, 5}));
  // Large 2-D transpose exercises the tiled path; compare with a loop.
  const int64_t m = 67, n = 45;
  Array big = arange_f32({m, n});
  Array t = lax::transpose(big, {1, 0});
  std::vector<double> want(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[size_t(j * m + i)] = double(i * n + j);
  EXPECT_TRUE(all_close(t, want));
  Array x3 = arange_f32({2, 3, 4});
  Array y3 = lax::transpose(x3, {2, 0, 1});
  EXPECT_EQ(y3.shape(), (Shape{4, 2, 3}));
  std::vector<double> want3;
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) want3.push_back(double(i * 12 + j * 4 + k));
  EXPECT_TRUE(all_close(y3, want3));
  EXPECT_PAX_ERROR(lax::transpose(x3, {0, 0, 1}), "not a permutation");
}

TEST(ShapePrims, BroadcastInDim) {
  Array x = array<float>({1, 2, 3});
  EXPECT_TRUE(all_close(lax::broadcast_in_dim(x, {2, 3}, {1}), {1, 2, 3, 1, 2, 3}));
  EXPECT_TRUE(all_close(lax::broadcast_in_dim(x, {3, 2}, {0}), {1, 1, 2, 2, 3, 3}));
  EXPECT_TRUE(all_close(lax::broadcast_in_dim(scalar(7.0f), {2, 2}, {}), {7, 7, 7, 7}));
  EXPECT_PAX_ERROR(lax::broadcast_in_dim(x, {2, 4}, {1}), "cannot broadcast");
}

TEST(ShapePrims, RevSliceStrides) {
  Array x = arange_f32({2, 3});
  EXPECT_TRUE(all_close(lax::rev(x, {1}), {2, 1, 0, 5, 4, 3}));
  EXPECT_TRUE(all_close(lax::rev(x, {0, 1}), {5, 4, 3, 2, 1, 0}));
  Array v = arange_f32({10});
  EXPECT_TRUE(all_close(lax::slice(v, {1}, {8}, {3}), {1, 4, 7}));
  EXPECT_TRUE(all_close(lax::slice(x, {0, 1}, {2, 3}), {1, 2, 4, 5}));
  EXPECT_PAX_ERROR(lax::slice(x, {0, 2}, {2, 4}), "need 0 <= start <= limit <= 3");
}

TEST(ShapePrims, DynamicSliceClamps) {
  Array v = arange_f32({10});
  EXPECT_TRUE(all_close(lax::dynamic_slice(v, {scalar<int32_t>(2)}, {3}), {2, 3, 4}));
  EXPECT_TRUE(all_close(lax::dynamic_slice(v, {scalar<int32_t>(9)}, {3}), {7, 8, 9}));
  EXPECT_TRUE(all_close(lax::dynamic_slice(v, {scalar<int32_t>(-5)}, {3}), {0, 1, 2}));
  Array u = lax::dynamic_update_slice(v, array<float>({-1, -2}), {scalar<int64_t>(9)});
  EXPECT_TRUE(all_close(u, {0, 1, 2, 3, 4, 5, 6, 7, -1, -2}));
}

TEST(ShapePrims, ConcatenateAndPad) {
  Array a = arange_f32({2, 2});
  Array b = arange_f32({2, 1});
  EXPECT_TRUE(all_close(lax::concatenate({a, b}, 1), {0, 1, 0, 2, 3, 1}));
  EXPECT_PAX_ERROR(lax::concatenate({a, b}, 0), "may differ only in dimension 0");
  Array v = array<float>({1, 2, 3});
  EXPECT_TRUE(all_close(lax::pad(v, scalar(0.0f), {{1, 2, 1}}), {0, 1, 0, 2, 0, 3, 0, 0}));
  EXPECT_TRUE(all_close(lax::pad(v, scalar(9.0f), {{-1, 0, 1}}), {9, 2, 9, 3}));
  EXPECT_EQ(lax::pad(v, scalar(9.0f), {{-2, -1, 0}}).size(), 0);
}

TEST(ShapePrims, IotaAndZeroSize) {
  EXPECT_TRUE(all_close(lax::iota(DType::i32, {2, 3}, 1), {0, 1, 2, 0, 1, 2}));
  Array z = lax::iota(DType::f32, {0, 3}, 1);
  EXPECT_EQ(z.size(), 0);
  EXPECT_EQ(lax::transpose(z, {1, 0}).shape(), (Shape{3, 0}));
}

}  // namespace
}  // namespace pax

// vmap of sort and top_k against a loop over the batch: the batch axis
// first, in the middle and last, every sorted dimension, two operands batched
// alike, differently or only one of them, and bad inputs reported unbatched.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using namespace testing;  // ArrayFn, Axis, check_vmap, random_array

ArrayFn sort_output(int64_t dimension, size_t which, int64_t num_keys = 1) {
  return [=](const std::vector<Array>& a) { return lax::sort(a, dimension, true, num_keys)[which]; };
}

TEST(SortBatch, OneOperandEveryAxis) {
  const Array x = random_array({4, 5, 3}, DType::f32, 1);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (int64_t axis = 0; axis <= 3; ++axis) {
      EXPECT_TRUE(check_vmap(sort_output(dim, 0), {x}, {axis})) << "dimension " << dim << " batch axis " << axis;
    }
  }
}

TEST(SortBatch, TwoOperands) {
  const Array keys = random_array({6, 4}, DType::f64, 2);
  const Array vals = random_array({6, 4}, DType::f32, 3);
  const std::vector<std::pair<Axis, Axis>> placements{
      {0, 0}, {2, 2}, {1, 0}, {0, 2}, {std::nullopt, 1}, {2, std::nullopt}, {1, std::nullopt}};
  for (int64_t dim = 0; dim < 2; ++dim) {
    for (auto [ka, va] : placements) {
      for (size_t which = 0; which < 2; ++which) {
        EXPECT_TRUE(check_vmap(sort_output(dim, which), {keys, vals}, {ka, va}))
            << "dimension " << dim << " axes (" << ka.value_or(-1) << ", " << va.value_or(-1) << ") output " << which;
      }
    }
  }
}

TEST(SortBatch, TiedKeysKeepOrderAndSecondKeyBreaksTies) {
  // Integer keys with many ties: stability and the second key decide the order.
  const Array keys = array(std::vector<int32_t>{2, 1, 2, 1, 0, 2, 1, 0}, {8});
  const Array vals = random_array({8}, DType::f32, 4);
  for (int64_t num_keys = 1; num_keys <= 2; ++num_keys) {
    EXPECT_TRUE(check_vmap(sort_output(0, 1, num_keys), {keys, vals}, {std::nullopt, 0}));
    EXPECT_TRUE(check_vmap(sort_output(0, 0, num_keys), {vals, keys}, {1, std::nullopt}));
  }
}

TEST(SortBatch, SpecialValuesAndBf16) {
  const double nan = std::nan(""), inf = INFINITY;
  const Array x = array(std::vector<double>{nan, 1, -inf, -0.0, inf, 0.0, -2}, {7});
  EXPECT_TRUE(check_vmap(sort_output(0, 0), {x}, {0}));
  EXPECT_TRUE(check_vmap(sort_output(0, 0), {random_array({4, 7}, DType::f64, 12)}, {1}));
  EXPECT_TRUE(check_vmap(sort_output(1, 0), {random_array({3, 9}, DType::bf16, 5)}, {1}));
}

TEST(SortBatch, ZeroSizedDimensions) {
  EXPECT_TRUE(check_vmap(sort_output(1, 0), {random_array({2, 0}, DType::f32, 6)}, {0}));
  EXPECT_TRUE(check_vmap(sort_output(0, 0), {random_array({0, 3}, DType::f32, 7)}, {2}));
}

ArrayFn top_k_output(int64_t k, bool indices) {
  return [=](const std::vector<Array>& a) {
    auto [v, i] = lax::top_k(a[0], k);
    return indices ? i : v;
  };
}

TEST(TopKBatch, EveryBatchAxis) {
  const Array x = random_array({3, 4, 6}, DType::f32, 8);
  for (int64_t axis = 0; axis <= 3; ++axis) {
    for (int64_t k : {0, 2, 6}) {
      for (bool indices : {false, true}) {
        EXPECT_TRUE(check_vmap(top_k_output(k, indices), {x}, {axis}))
            << "batch axis " << axis << " k " << k << (indices ? " indices" : " values");
      }
    }
  }
}

TEST(TopKBatch, VectorsTiesAndBf16) {
  // A batched vector: its batch axis is the last axis before moving.
  const Array x = random_array({5}, DType::f64, 9);
  EXPECT_TRUE(check_vmap(top_k_output(3, true), {x}, {1}));
  EXPECT_TRUE(check_vmap(top_k_output(3, false), {x}, {0}));
  const Array ties = array(std::vector<double>{1, 3, 3, 1, 2, 3}, {6});
  EXPECT_TRUE(check_vmap(top_k_output(4, true), {ties}, {1}));
  EXPECT_TRUE(check_vmap(top_k_output(2, false), {random_array({2, 8}, DType::bf16, 10)}, {2}));
}

TEST(SortBatch, ErrorsNameTheUnbatchedOperands) {
  const Array x = random_array({3}, DType::f32, 11);
  auto sort0 = [](const Array& a) { return lax::sort({a}, 0)[0]; };
  EXPECT_PAX_ERROR(vmap(sort0)(x), "sort: operands (f32[])");
  auto top = [](const Array& a) { return lax::top_k(a, 1).first; };
  EXPECT_PAX_ERROR(vmap(top)(x), "top_k: operand f32[] is 0-d");
  auto too_many = [](const Array& a) { return lax::top_k(a, 5).first; };
  EXPECT_PAX_ERROR(vmap(too_many)(random_array({3, 4}, DType::f32, 13)), "k must lie in [0, 4]");
}

}  // namespace
}  // namespace pax

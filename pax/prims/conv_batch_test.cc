// vmap of conv_general_dilated against a loop over the batch: NCHW and NHWC
// layouts, strides, padding (also negative), dilations, feature and batch
// groups, with lhs only / rhs only / both batched at every axis position,
// bf16, and an empty batch.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using namespace testing;  // ArrayFn, Axis, check_vmap, random_array

struct ConvCase {
  const char* name;
  Shape lhs, rhs;
  std::string lhs_spec, rhs_spec, out_spec;
  Ints strides;
  std::vector<std::pair<int64_t, int64_t>> padding;
  Ints lhs_dilation, rhs_dilation;
  int64_t feature_groups = 1, batch_groups = 1;
};

std::vector<ConvCase> conv_cases() {
  return {
      // clang-format off
      {"nchw_same", {2, 4, 5, 6}, {3, 4, 3, 3}, "NCHW", "OIHW", "NCHW", {1, 1}, {{1, 1}, {1, 1}}, {}, {}},
      {"nhwc_strided_dilated", {2, 7, 6, 3}, {3, 2, 3, 4}, "NHWC", "HWIO", "NHWC", {2, 1}, {{0, 1}, {2, 0}}, {},
       {2, 1}},
      {"lhs_dilated", {1, 2, 4, 3}, {3, 2, 2, 2}, "NCHW", "OIHW", "NCHW", {1, 1}, {{1, 1}, {0, 1}}, {2, 2}, {}},
      {"negative_padding", {2, 3, 6, 6}, {2, 3, 3, 2}, "NCHW", "OIHW", "NCHW", {1, 2}, {{-1, 0}, {1, -1}}, {}, {}},
      {"mixed_layouts", {2, 5, 4, 3}, {4, 3, 2, 2}, "NHWC", "OIHW", "NCHW", {1, 1}, {{0, 0}, {0, 0}}, {}, {}},
      {"feature_groups", {2, 4, 5, 5}, {6, 2, 3, 3}, "NCHW", "OIHW", "NCHW", {1, 1}, {{1, 1}, {1, 1}}, {}, {}, 2},
      {"depthwise_nhwc", {2, 5, 5, 4}, {3, 3, 1, 8}, "NHWC", "HWIO", "NHWC", {2, 2}, {{1, 1}, {1, 1}}, {}, {}, 4},
      {"batch_groups", {4, 3, 5, 4}, {6, 3, 2, 2}, "NCHW", "OIHW", "NCHW", {1, 1}, {{0, 0}, {1, 0}}, {}, {}, 1, 2},
      {"batch_groups_nhwc", {6, 4, 4, 2}, {2, 2, 2, 9}, "NHWC", "HWIO", "NHWC", {1, 2}, {{0, 1}, {0, 0}}, {},
       {1, 2}, 1, 3},
      // clang-format on
  };
}

ArrayFn conv_fn(const ConvCase& c) {
  const lax::ConvDimensionNumbers dims = lax::conv_dimension_numbers(c.lhs_spec, c.rhs_spec, c.out_spec);
  return [c, dims](const std::vector<Array>& a) {
    return lax::conv_general_dilated(a[0], a[1], c.strides, c.padding, c.lhs_dilation, c.rhs_dilation, dims,
                                     c.feature_groups, c.batch_groups);
  };
}

TEST(ConvBatch, EveryBatchAxisPlacement) {
  const std::vector<Axis> axes{std::nullopt, 0, 2, 4};
  for (const ConvCase& c : conv_cases()) {
    const Array lhs = random_array(c.lhs, DType::f32, 1), rhs = random_array(c.rhs, DType::f32, 2);
    for (Axis la : axes) {
      for (Axis ra : axes) {
        if (!la && !ra) continue;
        EXPECT_TRUE(check_vmap(conv_fn(c), {lhs, rhs}, {la, ra}, 3, 1e-5))
            << c.name << " lhs axis " << la.value_or(-1) << " rhs axis " << ra.value_or(-1);
      }
    }
  }
}

TEST(ConvBatch, F64AndBf16) {
  const ConvCase grouped = conv_cases()[5];
  const Array lhs = random_array(grouped.lhs, DType::f64, 3), rhs = random_array(grouped.rhs, DType::f64, 4);
  EXPECT_TRUE(check_vmap(conv_fn(grouped), {lhs, rhs}, {1, 3}, 2, 1e-5));
  const ConvCase nhwc = conv_cases()[1];
  const Array lb = random_array(nhwc.lhs, DType::bf16, 5), rb = random_array(nhwc.rhs, DType::bf16, 6);
  EXPECT_TRUE(check_vmap(conv_fn(nhwc), {lb, rb}, {3, std::nullopt}, 3, 2e-2));
  EXPECT_TRUE(check_vmap(conv_fn(nhwc), {lb, rb}, {std::nullopt, 1}, 3, 2e-2));
  EXPECT_TRUE(check_vmap(conv_fn(nhwc), {lb, rb}, {0, 4}, 3, 2e-2));
}

TEST(ConvBatch, EmptyBatchAndEmptyDimensions) {
  const ConvCase c = conv_cases()[0];
  FlatFn f = [c](std::span<const Array> xs) { return std::vector<Array>{conv_fn(c)({xs[0], xs[1]})}; };
  const std::vector<int64_t> out_axes{0};
  for (std::vector<Axis> in_axes : std::vector<std::vector<Axis>>{{0, 0}, {1, std::nullopt}, {std::nullopt, 4}}) {
    std::vector<Array> args{random_array(c.lhs, DType::f32, 7), random_array(c.rhs, DType::f32, 8)};
    for (size_t i = 0; i < 2; ++i) {
      if (!in_axes[i]) continue;
      Ints shape = args[i].shape().dims();
      shape.insert(shape.begin() + *in_axes[i], 0);
      args[i] = zeros(Shape(shape), DType::f32);
    }
    Array out = vmap_flat(f, args, in_axes, out_axes, "")[0];
    EXPECT_EQ(out.shape(), Shape({0, 2, 3, 5, 6}));
  }
  // An empty lhs batch, with the vmapped batch folded into it.
  EXPECT_TRUE(check_vmap(conv_fn(c), {random_array({0, 4, 5, 6}, DType::f32, 9), random_array(c.rhs, DType::f32, 10)},
                         {0, std::nullopt}, 2));
}

TEST(ConvBatch, UnderJit) {
  // A grouped kernel batched alone: the batch goes into each group's part of
  // the output features (reshapes and a transpose around the convolution).
  const ConvCase c = conv_cases()[6];
  const ArrayFn f = conv_fn(c);
  const ArrayFn batched = [f](const std::vector<Array>& a) {
    FlatFn flat = [f](std::span<const Array> xs) { return std::vector<Array>{f({xs[0], xs[1]})}; };
    return vmap_flat(flat, a, std::vector<Axis>{std::nullopt, 2}, std::vector<int64_t>{3}, "")[0];
  };
  const std::vector<Array> args{random_array(c.lhs, DType::f32, 13), random_array({3, 3, 2, 1, 8}, DType::f32, 14)};
  EXPECT_TRUE(testing::check_jit(batched, args, 1e-6));
}

TEST(ConvBatch, ErrorsNameTheUnbatchedOperands) {
  const ConvCase c = conv_cases()[5];  // feature_group_count 2 needs lhs features 2 * 2
  auto f = [c](const Array& l, const Array& r) { return conv_fn(c)({l, r}); };
  EXPECT_PAX_ERROR(vmap(f, {.in_axes = {0, std::nullopt}})(random_array({3, 2, 3, 5, 5}, DType::f32, 11),
                                                           random_array(c.rhs, DType::f32, 12)),
                   "lhs f32[2,3,5,5] and rhs f32[6,2,3,3]");
}

}  // namespace
}  // namespace pax

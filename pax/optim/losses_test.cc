// optax's squared_error and l2_loss against hand values, their dtypes, the
// derivative of l2_loss, and the checks optax makes on their inputs.
#include "pax/optim/losses.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::optim {
namespace {

using pax::testing::all_close;

TEST(Losses, L2LossAndSquaredErrorHandValues) {
  const Array p = array<float>({1.0f, 2.0f, 3.0f, -1.5f});
  const Array t = array<float>({0.5f, 2.0f, 5.0f, 0.5f});
  // (p - t) = 0.5, 0, -2, -2.
  EXPECT_TRUE(all_close(squared_error(p, t), {0.25, 0, 4, 4}));
  EXPECT_TRUE(all_close(l2_loss(p, t), {0.125, 0, 2, 2}));
  // Without targets, the predictions are the errors.
  EXPECT_TRUE(all_close(l2_loss(p), {0.5, 2, 4.5, 1.125}));
  EXPECT_TRUE(all_close(squared_error(p), {1, 4, 9, 2.25}));
  // As the seed's TrainState example uses it: l2_loss(predictions, targets).mean().
  EXPECT_TRUE(all_close(mean(l2_loss(p, t)), {1.03125}));
  EXPECT_EQ(l2_loss(p, t).dtype(), DType::f32);
  EXPECT_EQ(l2_loss(p.astype(DType::bf16)).dtype(), DType::bf16);
}

TEST(Losses, L2LossDerivativeIsTheError) {
  const Array p = array<double>({1.0, 2.0, -3.0});
  const Array t = array<double>({0.5, 4.0, -3.0});
  auto loss = [&](const Array& x) { return sum(l2_loss(x, t)); };
  EXPECT_TRUE(all_close(grad(loss)(p), {0.5, -2.0, 0.0}));
}

TEST(Losses, OptaxChecks) {
  EXPECT_PAX_ERROR(l2_loss(array<float>({1, 2, 3}), array<float>({1})),
                   "squared_error: predictions f32[3] and targets f32[1] must have the same shape");
  EXPECT_PAX_ERROR(l2_loss(array<int32_t>({1, 2})), "predictions must have a floating dtype, got i32[2]");
}

}  // namespace
}  // namespace pax::optim

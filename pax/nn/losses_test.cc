// softmax_cross_entropy_with_integer_labels: values and gradients against
// autodiff of the plain formula -log_softmax(x)[label] (f64, f32, bf16 logits,
// eager and under jit), and the shape / dtype errors.
#include "pax/nn/losses.h"

#include <gtest/gtest.h>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax::nn {
namespace {

using testing::all_close;

// The reference: autodiff sees only ordinary ops.
Array reference_xent(const Array& logits, const Array& labels) {
  const Array x = logits.astype(logits.dtype() == DType::f64 ? DType::f64 : DType::f32);
  return -squeeze(take_along_axis(log_softmax(x), expand_dims(labels, {-1}), -1), {-1});
}

struct Case {
  DType dtype;
  double tol;
};

TEST(Losses, CrossEntropyMatchesLogSoftmaxInValueAndGradient) {
  for (const Case c : {Case{DType::f64, 1e-12}, Case{DType::f32, 2e-6}, Case{DType::bf16, 1e-2}}) {
    const Array logits = (testing::random_array({3, 5, 7}, DType::f32, 1) * 4.0).astype(c.dtype);  // (B, T, C)
    const Array labels = random::randint(random::key(2), {3, 5}, 0, 7);
    const Array weights = testing::random_array({3, 5}, DType::f32, 3);
    EXPECT_TRUE(all_close(softmax_cross_entropy_with_integer_labels(logits, labels),
                          reference_xent(logits, labels).astype(DType::f64).to_vector<double>(), c.tol, c.tol))
        << dtype_name(c.dtype);
    auto loss = [&](auto xent) {
      return [&, xent](const Array& x) { return sum(xent(x, labels) * weights.astype(xent(x, labels).dtype())); };
    };
    auto mine = [](const Array& x, const Array& y) { return softmax_cross_entropy_with_integer_labels(x, y); };
    const Array got = grad(loss(mine))(logits);
    const Array want = grad(loss(reference_xent))(logits);
    EXPECT_EQ(got.dtype(), c.dtype);
    EXPECT_TRUE(all_close(got.astype(DType::f64), want.astype(DType::f64).to_vector<double>(), c.tol, c.tol))
        << dtype_name(c.dtype);
    EXPECT_TRUE(all_close(jit(grad(loss(mine)))(logits), got, 1e-6, 1e-6)) << dtype_name(c.dtype);
  }
}

TEST(Losses, CrossEntropyOfAConfidentCorrectPredictionIsSmall) {
  const Array logits = array<float>({20, 0, 0, 0, 20, 0}, {2, 3});
  const Array labels = array<int32_t>({0, 2});
  // -log(e^20 / (e^20 + 2)) ~ 4e-9; -log(1 / (2 + e^20)) ~ 20.
  EXPECT_TRUE(all_close(softmax_cross_entropy_with_integer_labels(logits, labels), {0.0, 20.0}, 1e-6, 1e-6));
}

TEST(Losses, CrossEntropyRejectsBadShapesAndDtypes) {
  const Array logits = zeros({2, 3});
  EXPECT_PAX_ERROR(softmax_cross_entropy_with_integer_labels(logits, zeros({2})), "labels must be integers");
  EXPECT_PAX_ERROR(softmax_cross_entropy_with_integer_labels(logits, array<int32_t>({0, 1, 2})),
                   "labels must be integers of shape (2,)");
  EXPECT_PAX_ERROR(softmax_cross_entropy_with_integer_labels(array<int32_t>({1, 2}, {1, 2}), array<int32_t>({0})),
                   "logits must be floating");
}

}  // namespace
}  // namespace pax::nn

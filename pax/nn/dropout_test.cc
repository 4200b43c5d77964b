// Dropout: identity outside training, the keep rate and scaling in training,
// determinism per key, shared mask along broadcast axes.
#include "pax/nn/dropout.h"

#include <gtest/gtest.h>

#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax::nn {
namespace {

using testing::all_close;

TEST(Dropout, TrainingOnlyScaledAndDeterministicPerKey) {
  Dropout::HParams hp;
  hp.keep_prob = 0.8;
  auto drop = build<Dropout>(hp);
  Tree vars = init(*drop, random::key(0));
  Array x = ones({200, 500});
  EXPECT_TRUE(all_close(apply(*drop, vars, x).output, x, 0, 0));  // eval: identity
  ApplyOptions train{.rngs = {{"dropout", random::key(1)}}, .train = true};
  Array y = apply(*drop, vars, train, x).output;
  std::vector<float> v = y.to_vector<float>();
  size_t kept = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || std::fabs(e - 1.25f) < 1e-6f);
    kept += e != 0.0f;
  }
  EXPECT_NEAR(double(kept) / double(v.size()), 0.8, 0.01);
  EXPECT_TRUE(all_close(apply(*drop, vars, train, x).output, y, 0, 0));  // same key, same mask
  ApplyOptions other{.rngs = {{"dropout", random::key(2)}}, .train = true};
  EXPECT_FALSE(all_close(apply(*drop, vars, other, x).output, y, 0, 0));
  EXPECT_PAX_ERROR(apply(*drop, vars, ApplyOptions{.train = true}, x), "needs a random key for stream 'dropout'");
  hp.deterministic = true;
  EXPECT_TRUE(all_close(apply(*build<Dropout>(hp), vars, train, x).output, x, 0, 0));
}

TEST(Dropout, BroadcastDimsShareTheMask) {
  Dropout::HParams hp;
  hp.keep_prob = 0.5;
  hp.noise_shape_broadcast_dims = {1};
  auto drop = build<Dropout>(hp);
  Array y = apply(*drop, init(*drop, random::key(0)),
                  ApplyOptions{.rngs = {{"dropout", random::key(3)}}, .train = true}, ones({64, 7}))
                .output;
  std::vector<float> v = y.to_vector<float>();
  for (int r = 0; r < 64; ++r) {
    for (int c = 1; c < 7; ++c) EXPECT_EQ(v[size_t(r * 7 + c)], v[size_t(r * 7)]);
  }
  hp.keep_prob = 0;
  EXPECT_PAX_ERROR(build<Dropout>(hp), "keep_prob must be in (0, 1]");
}

}  // namespace
}  // namespace pax::nn

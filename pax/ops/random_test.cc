// pax::random: keys and splits reproduce jax.random's values; distributions
// have the right support and moments; everything is deterministic.
#include "pax/ops/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "pax/backend/backend.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;

TEST(Random, KeysMatchJax) {
  EXPECT_EQ(random::key(0).to_vector<uint32_t>(), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(random::key(42).to_vector<uint32_t>(), (std::vector<uint32_t>{0, 42}));
  EXPECT_EQ(random::key(-1).to_vector<uint32_t>(), (std::vector<uint32_t>{0xffffffffu, 0xffffffffu}));
  // jax.random.split(jax.random.PRNGKey(0))
  EXPECT_EQ(random::split(random::key(0)).to_vector<uint32_t>(),
            (std::vector<uint32_t>{4146024105u, 967050713u, 2718843009u, 1272950319u}));
  auto keys = random::split_keys(random::key(0), 2);
  EXPECT_EQ(keys[1].to_vector<uint32_t>(), (std::vector<uint32_t>{2718843009u, 1272950319u}));
  EXPECT_PAX_ERROR(random::split(array<int32_t>({0, 0})), "key must be u32[2]");
}

TEST(Random, NormalMatchesJaxKnownValues) {
  // jax.random.normal(PRNGKey(0), (1,)) and normal of the second half of split(PRNGKey(0)).
  EXPECT_TRUE(all_close(random::normal(random::key(0), {1}), {-0.20584226}, 2e-6));
  EXPECT_TRUE(all_close(random::normal(random::split_keys(random::key(0))[1], {1}), {-1.2515389}, 2e-6));
}

TEST(Random, FoldInIsThreefryOfData) {
  Array k = random::key(0);
  Array a = random::fold_in(k, 7), b = random::fold_in(k, 8);
  EXPECT_EQ(a.shape(), (Shape{2}));
  EXPECT_NE(a.to_vector<uint32_t>(), b.to_vector<uint32_t>());
  EXPECT_EQ(a.to_vector<uint32_t>(), random::fold_in(k, 7).to_vector<uint32_t>());
}

TEST(Random, UniformSupportAndMoments) {
  Array u = random::uniform(random::key(1), {100000});
  std::vector<double> v = u.to_vector<double>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  EXPECT_NEAR(mean(u).item<double>(), 0.5, 0.005);
  EXPECT_NEAR(var(u).item<double>(), 1.0 / 12, 0.002);
  Array r = random::uniform(random::key(1), {1000}, DType::f32, -3, 5);
  EXPECT_GE(min(r).item<double>(), -3);
  EXPECT_LT(max(r).item<double>(), 5);
  Array d = random::uniform(random::key(2), {10000}, DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_NEAR(mean(d).item<double>(), 0.5, 0.02);
  EXPECT_EQ(random::uniform(random::key(2), {4}, DType::bf16).dtype(), DType::bf16);
  EXPECT_PAX_ERROR(random::uniform(random::key(0), {2}, DType::i32), "dtype must be floating");
}

TEST(Random, NormalAndTruncatedNormal) {
  Array n = random::normal(random::key(3), {200000});
  EXPECT_NEAR(mean(n).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(std(n).item<double>(), 1.0, 0.01);
  Array t = random::truncated_normal(random::key(4), -2, 2, {100000});
  EXPECT_GT(min(t).item<double>(), -2);
  EXPECT_LT(max(t).item<double>(), 2);
  // Variance of a standard normal truncated to [-2, 2].
  double phi = std::exp(-2.0) / std::sqrt(2 * M_PI), z = std::erf(2 / std::sqrt(2.0));
  EXPECT_NEAR(var(t).item<double>(), 1 - 4 * phi / z, 0.01);
  EXPECT_PAX_ERROR(random::truncated_normal(random::key(0), 1, -1), "need lower < upper");
}

TEST(Random, DiscreteDistributions) {
  Array b = random::bernoulli(random::key(5), 0.3, {100000});
  EXPECT_EQ(b.dtype(), DType::bool_);
  EXPECT_NEAR(mean(b).item<double>(), 0.3, 0.01);
  Array r = random::randint(random::key(6), {100000}, -3, 7);
  EXPECT_EQ(r.dtype(), DType::i32);
  EXPECT_EQ(min(r).item<int32_t>(), -3);
  EXPECT_EQ(max(r).item<int32_t>(), 6);
  EXPECT_NEAR(mean(r).item<double>(), 1.5, 0.05);
  // Categorical follows the softmax of the logits.
  Array logits = log(array<float>({0.1f, 0.6f, 0.3f}));
  Array c = random::categorical(random::key(7), broadcast_to(logits, {50000, 3}));
  EXPECT_EQ(c.shape(), (Shape{50000}));
  EXPECT_NEAR(mean(equal(c, 1)).item<double>(), 0.6, 0.01);
  EXPECT_NEAR(mean(equal(c, 0)).item<double>(), 0.1, 0.01);
}

TEST(Random, IdenticalForAnyThreadCount) {
  const int before = num_threads();
  set_num_threads(1);
  std::vector<float> one = random::normal(random::key(11), {1 << 20}).to_vector<float>();
  std::vector<uint32_t> bits_one = random::bits(random::key(12), {(1 << 20) + 1}).to_vector<uint32_t>();
  set_num_threads(2);
  std::vector<float> two = random::normal(random::key(11), {1 << 20}).to_vector<float>();
  std::vector<uint32_t> bits_two = random::bits(random::key(12), {(1 << 20) + 1}).to_vector<uint32_t>();
  set_num_threads(before);
  EXPECT_EQ(one, two);
  EXPECT_EQ(bits_one, bits_two);
}

TEST(Random, PermutationIsAPermutation) {
  Array p = random::permutation(random::key(8), 1000);
  std::vector<int64_t> v = p.to_vector<int64_t>();
  std::set<int64_t> seen(v.begin(), v.end());
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
  EXPECT_NE(v, random::permutation(random::key(9), 1000).to_vector<int64_t>());
  EXPECT_EQ(v, random::permutation(random::key(8), 1000).to_vector<int64_t>());
  Array rows = reshape(arange(12), {4, 3});
  Array shuffled = random::permutation(random::key(8), rows);
  EXPECT_EQ(shuffled.shape(), (Shape{4, 3}));
  EXPECT_TRUE(all_close(sum(shuffled, 0), sum(rows, 0)));
}

}  // namespace
}  // namespace pax

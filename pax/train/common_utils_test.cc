// Tests for the flax.training.common_utils helpers: shard / unshard values and
// errors, shard_prng_key, stack_forest, get_metrics and onehot against hand
// values.
#include "pax/train/common_utils.h"

#include <gtest/gtest.h>

#include <vector>

#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

using pax::testing::all_close;

std::vector<double> iota(int64_t n, double start = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(start + double(i));
  return v;
}

TEST(CommonUtils, ShardAndUnshard) {
  Tree batch = Tree::dict({{"x", reshape(arange<float>(0.0f, 24.0f), {6, 4})},
                           {"y", arange<int32_t>(0, 6)},
                           {"nested", Tree::list({reshape(arange<float>(0.0f, 12.0f), {6, 2, 1})})}});
  Tree sharded = shard(batch, 3);
  EXPECT_EQ(sharded.str(), "{'x': f32[3,2,4], 'y': i32[3,2], 'nested': [f32[3,2,2,1]]}");
  // Shard i holds batch rows 2i and 2i + 1, in order.
  EXPECT_TRUE(all_close(sharded["x"].leaf(), iota(24)));
  EXPECT_EQ(sharded["y"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  Tree back = unshard(sharded);
  EXPECT_EQ(back.str(), batch.str());
  EXPECT_TRUE(all_close(back["x"].leaf(), batch["x"].leaf()));
  EXPECT_TRUE(all_close(back["nested"][0].leaf(), batch["nested"][0].leaf()));
  // One shard, and a zero-size batch.
  EXPECT_EQ(shard(batch, 1).str(), "{'x': f32[1,6,4], 'y': i32[1,6], 'nested': [f32[1,6,2,1]]}");
  EXPECT_EQ(shard(Tree(zeros({0, 5})), 2).str(), "f32[2,0,5]");
  EXPECT_TRUE(shard(Tree(), 4).is_none());
}

TEST(CommonUtils, ShardErrors) {
  Tree odd = Tree::dict({{"params", Tree::dict({{"x", zeros({5, 4})}})}});
  EXPECT_PAX_ERROR(shard(odd, 2),
                   "shard: leaf 'params/x' is f32[5,4]; its leading (batch) axis must be divisible by the 2 shards");
  EXPECT_PAX_ERROR(shard(Tree::dict({{"s", scalar<float>(1)}}), 2), "shard: leaf 's' is f32[]");
  EXPECT_PAX_ERROR(shard(odd, 0), "shard: the number of shards must be > 0, got 0");
  EXPECT_PAX_ERROR(unshard(Tree::dict({{"v", zeros({4})}})),
                   "unshard: leaf 'v' is f32[4]; expected [shards, per_shard_batch, ...]");
}

TEST(CommonUtils, ShardPrngKey) {
  Array key = random::key(42);
  Array keys = shard_prng_key(key, 4);
  EXPECT_EQ(keys.aval().str(), "u32[4,2]");
  EXPECT_EQ(keys.to_vector<uint32_t>(), random::split(key, 4).to_vector<uint32_t>());
  std::vector<uint32_t> k = keys.to_vector<uint32_t>();
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j) EXPECT_FALSE(k[2 * i] == k[2 * j] && k[2 * i + 1] == k[2 * j + 1]);
  EXPECT_PAX_ERROR(shard_prng_key(key, 0), "shard_prng_key: the number of shards must be > 0");
}

Tree metrics(double loss, double acc) {
  return Tree::dict({{"loss", scalar<float>(float(loss))}, {"acc", scalar<float>(float(acc))}});
}

TEST(CommonUtils, StackForest) {
  std::vector<Tree> forest;
  for (int i = 0; i < 3; ++i) {
    forest.push_back(
        Tree::dict({{"a", scalar<float>(float(i))}, {"b", Tree::list({array<float>({float(i), float(10 * i)})})}}));
  }
  Tree stacked = stack_forest(forest);
  EXPECT_EQ(stacked.str(), "{'a': f32[3], 'b': [f32[3,2]]}");
  EXPECT_TRUE(all_close(stacked["a"].leaf(), std::vector<double>{0, 1, 2}));
  EXPECT_TRUE(all_close(stacked["b"][0].leaf(), std::vector<double>{0, 0, 1, 10, 2, 20}));
  EXPECT_EQ(stack_forest({forest[1]}).str(), "{'a': f32[1], 'b': [f32[1,2]]}");
}

TEST(CommonUtils, StackForestErrors) {
  EXPECT_PAX_ERROR(stack_forest({}), "stack_forest: needs at least one tree");
  std::vector<Tree> renamed{metrics(1, 0.5), Tree::dict({{"loss", scalar<float>(1)}, {"accuracy", scalar<float>(1)}})};
  EXPECT_PAX_ERROR(stack_forest(renamed), "stack_forest: tree 1 vs tree 0: tree structures differ");
  EXPECT_PAX_ERROR(stack_forest(renamed), "missing 'acc'");
  std::vector<Tree> shapes{Tree::dict({{"b", zeros({2})}}), Tree::dict({{"b", zeros({2})}}),
                           Tree::dict({{"b", zeros({3})}})};
  EXPECT_PAX_ERROR(stack_forest(shapes), "stack_forest: leaf 'b' is f32[2] in tree 0 but f32[3] in tree 2");
  std::vector<Tree> dtypes{Tree(zeros({2})), Tree(zeros({2}, DType::i32))};
  EXPECT_PAX_ERROR(stack_forest(dtypes), "is f32[2] in tree 0 but i32[2] in tree 1");
}

TEST(CommonUtils, GetMetrics) {
  std::vector<Tree> steps{metrics(2.0, 0.25), metrics(1.5, 0.5), metrics(1.0, 0.75), metrics(0.5, 1.0)};
  Tree m = get_metrics(steps);
  EXPECT_EQ(m.str(), "{'loss': f32[4], 'acc': f32[4]}");
  EXPECT_TRUE(all_close(m["loss"].leaf(), std::vector<double>{2.0, 1.5, 1.0, 0.5}));
  EXPECT_TRUE(all_close(m["acc"].leaf(), std::vector<double>{0.25, 0.5, 0.75, 1.0}));
  EXPECT_TRUE(m["loss"].leaf().is_concrete());
  // Replicated metrics (a leading replica axis, as pmap returns): replica 0 is kept.
  std::vector<Tree> replicated;
  for (int i = 0; i < 3; ++i) {
    replicated.push_back(Tree::dict({{"loss", array<float>({float(i), 100.0f + float(i)})},
                                     {"hist", array<float>({float(i), float(i), -1.0f, -1.0f}, {2, 2})}}));
  }
  Tree r = get_metrics(replicated, true);
  EXPECT_EQ(r.str(), "{'loss': f32[3], 'hist': f32[3,2]}");
  EXPECT_TRUE(all_close(r["loss"].leaf(), std::vector<double>{0, 1, 2}));
  EXPECT_TRUE(all_close(r["hist"].leaf(), std::vector<double>{0, 0, 1, 1, 2, 2}));
  EXPECT_PAX_ERROR(get_metrics({}), "get_metrics: no metrics recorded");
  EXPECT_PAX_ERROR(
      get_metrics(steps, true),
      "get_metrics: with replicated metrics every leaf needs a leading replica axis; leaf 'loss' of step 0 is f32[]");
}

TEST(CommonUtils, Onehot) {
  Array labels = array<int32_t>({0, 2, 1, 3}, {2, 2});
  Array h = onehot(labels, 3);
  EXPECT_EQ(h.aval().str(), "f32[2,2,3]");
  // Label 3 is out of range: a row of off_value.
  EXPECT_TRUE(all_close(h, std::vector<double>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}));
  Array smooth = onehot(array<int64_t>({1, 0}), 2, 0.9, 0.05);
  EXPECT_EQ(smooth.aval().str(), "f32[2,2]");
  EXPECT_TRUE(all_close(smooth, std::vector<double>{0.05, 0.9, 0.9, 0.05}));
  EXPECT_TRUE(all_close(onehot(scalar<int32_t>(-1), 2), std::vector<double>{0, 0}));
  EXPECT_TRUE(all_close(onehot(scalar<uint8_t>(4), 5), std::vector<double>{0, 0, 0, 0, 1}));
  EXPECT_EQ(onehot(array<int32_t>({1, 2}), 0).aval().str(), "f32[2,0]");
  EXPECT_PAX_ERROR(onehot(array<float>({1.0f}), 3), "onehot: labels must be an integer array, got f32[1]");
  EXPECT_PAX_ERROR(onehot(labels, -1), "onehot: num_classes must be >= 0");
}

}  // namespace
}  // namespace pax::train

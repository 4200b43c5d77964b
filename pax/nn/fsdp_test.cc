// Fully sharded data parallelism in the layers: which dimension is split,
// init's blocks, and apply / grad over blocks gathered across a named axis
// (a vmap axis standing in for the processes) against the whole weights.
#include "pax/nn/fsdp.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/nn/layer.h"
#include "pax/nn/transformers.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/blocks.h"
#include "pax/testing/testing.h"
#include "pax/train/common_utils.h"

namespace pax::nn {
namespace {

FsdpOptions on(int64_t size, int64_t index = 0, int64_t min_elements = 1) {
  return FsdpOptions{.axis = "data", .size = size, .index = index, .min_elements = min_elements};
}

TEST(Fsdp, SplitDimIsTheLargestDivisibleAfterTheRepeatPrefix) {
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}}, on(4), "w"), 1);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{12, 8}}, on(4), "w"), 0);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{6, 6}}, on(4), "w"), -1);            // nothing divisible
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 8}}, on(4), "w"), 0);             // the first of equals
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}}, on(4, 0, 1000), "w"), -1);  // too small
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 4, 6}, .repeat_prefix_axes = 1}, on(2), "w"), 2);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{16, 4}, .repeat_prefix_axes = 1}, on(4), "w"), 1);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}, .fsdp_dim = 0}, on(4), "w"), 0);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}, .fsdp_dim = -1}, on(4), "w"), -1);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}, .collection = "batch_stats"}, on(4), "w"), -1);
  EXPECT_EQ(fsdp_split_dim({.shape = Shape{8, 12}}, FsdpOptions{}, "w"), -1);  // off
  EXPECT_THROW(fsdp_split_dim({.shape = Shape{8, 6}, .fsdp_dim = 1}, on(4), "w"), Error);
  EXPECT_THROW(fsdp_split_dim({.shape = Shape{8, 8}, .repeat_prefix_axes = 1, .fsdp_dim = 0}, on(4), "w"), Error);
}

TEST(Fsdp, GatherRefusesAShapeThatIsNoBlock) {
  const Array w = zeros({3, 5});
  EXPECT_EQ(fsdp_gather(w, Shape{3, 5}, on(2), "w").shape(), (Shape{3, 5}));
  EXPECT_THROW(fsdp_gather(w, Shape{3, 7}, on(2), "w"), Error);
  EXPECT_THROW(fsdp_gather(w, Shape{6, 10}, on(2), "w"), Error);  // two dimensions differ
  EXPECT_THROW(fsdp_gather(w, Shape{6, 5}, FsdpOptions{}, "w"), Error);
}

using testing::block_of;

TEST(Fsdp, InitBlocksAndGatheredApplyAndGradMatchTheWholeWeights) {
  const int64_t members = 2, layers = 3, B = 2, T = 4;
  for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::nothing_saveable}) {
    auto hp = testing::repeat_of(testing::f64_transformer(2), layers);
    hp.checkpoint_policy = policy;
    auto repeat = build<Repeat>(hp);
    const Tree full = init(*repeat, random::key(3));
    std::vector<Tree> blocks;
    int64_t split = 0;
    for (int64_t k = 0; k < members; ++k) {
      blocks.push_back(init_sharded(*repeat, random::key(3), {.fsdp = on(members, k)}));
      const std::vector<Array> f = tree_leaves(full), b = tree_leaves(blocks.back());
      ASSERT_EQ(f.size(), b.size());
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i].shape() != b[i].shape()) ++split;
        EXPECT_TRUE(testing::all_close(b[i], block_of(f[i], b[i], k), 0, 0)) << i;
      }
    }
    EXPECT_GT(split, 8);  // the weight stacks are split
    // Each member's own batch; the members' losses summed.
    const Array xs = testing::random_array({members, B, T, 8}, DType::f64, 5);
    const Array paddings = zeros({B, T}, DType::f64);
    auto member_out = [&](const Tree& vars, const Array& x) {
      return apply(*repeat, vars, ApplyOptions{.sharding = {.fsdp = on(members)}}, x, paddings).output;
    };
    const Tree stacked = train::stack_forest(blocks);
    const Array outs = vmap(member_out, {.in_axes = {0, 0}, .axis_name = "data"})(stacked, xs);
    for (int64_t k = 0; k < members; ++k) {
      const Array x = squeeze(slice_along(xs, 0, k, k + 1), 0);
      EXPECT_TRUE(testing::all_close(squeeze(slice_along(outs, 0, k, k + 1), 0),
                                     apply(*repeat, full, x, paddings).output, 1e-12, 1e-12));
    }
    auto sharded_loss = [&](const Tree& vars) {
      return sum(square(vmap(member_out, {.in_axes = {0, 0}, .axis_name = "data"})(vars, xs)));
    };
    auto full_loss = [&](const Tree& vars) {
      Array total = scalar(0.0, DType::f64);
      for (int64_t k = 0; k < members; ++k)
        total = total + sum(square(apply(*repeat, vars, squeeze(slice_along(xs, 0, k, k + 1), 0), paddings).output));
      return total;
    };
    const std::vector<Array> g_blocks = tree_leaves(grad(sharded_loss)(stacked));
    const std::vector<Array> g_full = tree_leaves(grad(full_loss)(full));
    const std::vector<Array> b0 = tree_leaves(blocks[0]);
    for (size_t i = 0; i < g_full.size(); ++i) {
      for (int64_t k = 0; k < members; ++k) {
        const Array mine = squeeze(slice_along(g_blocks[i], 0, k, k + 1), 0);
        EXPECT_TRUE(testing::all_close(mine, block_of(g_full[i], b0[i], k), 1e-10, 1e-10)) << i;
      }
    }
  }
}

}  // namespace
}  // namespace pax::nn

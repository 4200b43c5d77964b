// Tensor parallelism in the layers: the blocks init holds, their shapes and
// errors, and a stack of Transformers whose heads and hidden widths are split
// over a named axis (a vmap axis standing in for the processes of "mdl"):
// every member computes the whole stack's output, and its gradients are the
// whole stack's (its own block of each split variable, all of the others).
#include "pax/nn/tensor_parallel.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/nn/attention.h"
#include "pax/nn/dropout.h"
#include "pax/nn/embedding.h"
#include "pax/nn/layer.h"
#include "pax/nn/transformers.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/blocks.h"
#include "pax/testing/testing.h"
#include "pax/train/common_utils.h"

namespace pax::nn {
namespace {

TensorParallelOptions mdl(int64_t size, int64_t index = 0) {
  return TensorParallelOptions{.axis = "mdl", .size = size, .index = index};
}

TEST(TensorParallel, BlockShapesAndTheirSplitOverData) {
  const WeightHParams w{.shape = Shape{8, 4, 2}, .mdl_dim = 1};
  EXPECT_EQ(mdl_local_shape(w, mdl(2), "w"), (Shape{8, 2, 2}));
  EXPECT_EQ(mdl_local_shape(w, TensorParallelOptions{}, "w"), (Shape{8, 4, 2}));   // off
  EXPECT_EQ(mdl_local_shape({.shape = Shape{8, 4}}, mdl(2), "w"), (Shape{8, 4}));  // not split
  EXPECT_PAX_ERROR(mdl_local_shape(w, mdl(3), "attention w"),
                   "attention w (8, 4, 2): dimension 1 (4) does not split over the 3 processes of the mesh axis 'mdl'");
  // fsdp splits the block along the same dimension where it divides it.
  const FsdpOptions data{.axis = "data", .size = 2, .min_elements = 1};
  EXPECT_EQ(held_spec(w, mdl(2), data, "w").fsdp_dim, 1);
  // One head each: data splits another dimension, the largest it divides
  // (Praxis's [data, mdl]); within a pipeline stage's block, none.
  EXPECT_EQ(held_spec(w, mdl(4), data, "w").fsdp_dim, 0);
  EXPECT_EQ(held_spec(w, mdl(4), data, "w", /*second_dimension=*/false).fsdp_dim, -1);
  EXPECT_EQ(held_spec(w, mdl(4), FsdpOptions{.axis = "data", .size = 16, .min_elements = 1}, "w").fsdp_dim, -1);
  const WeightHParams named{.shape = Shape{8, 4, 2}, .fsdp_dim = 2, .mdl_dim = 1};
  EXPECT_EQ(held_spec(named, mdl(2), data, "w").fsdp_dim, 2);
  EXPECT_PAX_ERROR(held_spec(named, mdl(2), data, "w", false), "w: fsdp_dim 2 differs from mdl_dim 1");
  EXPECT_EQ(held_spec(w, mdl(2), FsdpOptions{.axis = "data", .size = 2, .min_elements = 100}, "w").fsdp_dim, -1);
  const Array full = testing::random_array({8, 4, 2}, DType::f32, 1);
  EXPECT_TRUE(testing::all_close(mdl_block(full, w, mdl(2, 1)), slice_along(full, 1, 2, 4), 0, 0));
}

Repeat::HParams repeated_transformer(int64_t layers, bool combine_qkv, int64_t kv_heads) {
  auto atten = tpl<DotProductAttention>();
  atten->combine_qkv = combine_qkv;
  auto sub = testing::f64_transformer(4);
  sub->num_kv_heads = kv_heads;
  sub->tr_atten_tpl = atten;
  return testing::repeat_of(sub, layers);
}

using testing::block_of;

TEST(TensorParallel, SplitTransformerStackMatchesTheWholeOne) {
  const int64_t members = 2, layers = 2, B = 2, T = 5;
  struct Case {
    bool combine_qkv;
    int64_t kv_heads;
    bool mask_per_head;
  };
  for (const Case c : {Case{false, 0, false}, Case{true, 0, false}, Case{false, 2, true}}) {
    SCOPED_TRACE(::testing::Message() << "combine_qkv " << c.combine_qkv << ", kv heads " << c.kv_heads
                                      << ", a mask per head " << c.mask_per_head);
    auto repeat = build<Repeat>(repeated_transformer(layers, c.combine_qkv, c.kv_heads));
    const Tree full = init(*repeat, random::key(3));
    std::vector<Tree> blocks;
    int64_t split = 0;
    for (int64_t k = 0; k < members; ++k) {
      blocks.push_back(init_sharded(*repeat, random::key(3), {.tp = mdl(members, k)}));
      const std::vector<Array> f = tree_leaves(full), b = tree_leaves(blocks.back());
      ASSERT_EQ(f.size(), b.size());
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i].shape() != b[i].shape()) ++split;
        EXPECT_TRUE(testing::all_close(b[i], block_of(f[i], b[i], k), 0, 0)) << i;
      }
    }
    // Per member: q, k, v (or the combined weight and bias) and the output
    // weight, the feed-forward's two weights and first bias.
    EXPECT_EQ(split, members * (c.combine_qkv ? 2 + 1 + 3 : 6 + 1 + 3));
    const Array x = testing::random_array({B, T, 8}, DType::f64, 5);
    const Array paddings = zeros({B, T}, DType::f64);
    Array causal = causal_mask(T, DType::f64);  // (1, 1, T, T)
    if (c.mask_per_head) {
      // Heads 1 and 3 also cannot see the first position (after it).
      const Array odd = array<double>({0, 1, 0, 1}, Shape{1, 4, 1, 1});
      const Array first =
          array<double>({0, 1, 1, 1, 1}, Shape{1, 1, T, 1}) * array<double>({1, 0, 0, 0, 0}, Shape{1, 1, 1, T});
      causal = combine_masks(causal, odd * first * large_negative_number(DType::f64));  // (1, 4, T, T)
    }
    auto member_out = [&](const Tree& vars) {
      return apply(*repeat, vars, ApplyOptions{.sharding = {.tp = mdl(members)}}, x, paddings, causal).output;
    };
    const Tree stacked = train::stack_forest(blocks);
    const Array want = apply(*repeat, full, x, paddings, causal).output;
    const Array outs = vmap(member_out, {.in_axes = {0}, .axis_name = "mdl"})(stacked);
    for (int64_t k = 0; k < members; ++k)
      EXPECT_TRUE(testing::all_close(squeeze(slice_along(outs, 0, k, k + 1), 0), want, 1e-12, 1e-12)) << k;
    // Every member's loss is the whole stack's; each differentiates its own.
    auto split_loss = [&](const Tree& vars) {
      return sum(square(vmap(member_out, {.in_axes = {0}, .axis_name = "mdl"})(vars)));
    };
    auto full_loss = [&](const Tree& vars) { return sum(square(apply(*repeat, vars, x, paddings, causal).output)); };
    const std::vector<Array> g_blocks = tree_leaves(grad(split_loss)(stacked));
    const std::vector<Array> g_full = tree_leaves(grad(full_loss)(full));
    const std::vector<std::string> paths = tree_paths(full);
    for (int64_t k = 0; k < members; ++k) {
      const std::vector<Array> mine_blocks = tree_leaves(blocks[size_t(k)]);
      for (size_t i = 0; i < g_full.size(); ++i) {
        const Array mine = squeeze(slice_along(g_blocks[i], 0, k, k + 1), 0);
        EXPECT_TRUE(testing::all_close(mine, block_of(g_full[i], mine_blocks[i], k), 1e-10, 1e-10))
            << paths[i] << " member " << k;
      }
    }
  }
}

// A tied embedding and softmax whose table rows (and bias) split over mdl:
// lookups and logits as the whole table's, and the gradients of each
// member's rows; a vocabulary the axis does not divide stays whole.
TEST(TensorParallel, SplitVocabularyMatchesTheWholeTable) {
  const int64_t members = 2;
  for (int64_t classes : {8, 7}) {
    SCOPED_TRACE(classes);
    auto hp = tpl<SharedEmbeddingSoftmax>();
    hp->num_classes = classes;
    hp->input_dims = 4;
    hp->dtype = hp->fprop_dtype = DType::f64;
    auto sm = build<SharedEmbeddingSoftmax>(*hp);
    const Tree full = init(*sm, random::key(4));
    // The bias is drawn as zeros: make it count.
    Tree whole = full;
    whole["params"].set("bias", testing::random_array({classes}, DType::f64, 9));
    std::vector<Tree> blocks;
    for (int64_t k = 0; k < members; ++k) {
      Tree b = init_sharded(*sm, random::key(4), {.tp = mdl(members, k)});
      const Array bias = whole["params"]["bias"].leaf();
      b["params"].set("bias", classes % members ? bias : slice_along(bias, 0, k * classes / 2, (k + 1) * classes / 2));
      blocks.push_back(b);
    }
    const int64_t split_rows = tree_leaves(blocks[0])[1].dim(0);
    EXPECT_EQ(split_rows, classes % members ? classes : classes / members);
    const Array ids = array<int32_t>({0, 3, 7, 5, 9, -1}, Shape{2, 3});  // 9 and -1 are clamped
    auto forward = [&](const SharedEmbeddingSoftmax& l) { return l.get_logits(l.emb_lookup(ids)); };
    auto member_out = [&](const Tree& vars) {
      return apply_with(*sm, vars, forward, ApplyOptions{.sharding = {.tp = mdl(members)}}).output;
    };
    const Array want = apply_with(*sm, whole, forward).output;  // (2, 3, classes)
    const Tree stacked = train::stack_forest(blocks);
    const Array outs = vmap(member_out, {.in_axes = {0}, .axis_name = "mdl"})(stacked);
    for (int64_t k = 0; k < members; ++k)
      EXPECT_TRUE(testing::all_close(squeeze(slice_along(outs, 0, k, k + 1), 0), want, 1e-12, 1e-12)) << k;
    auto split_loss = [&](const Tree& vars) {
      return sum(square(vmap(member_out, {.in_axes = {0}, .axis_name = "mdl"})(vars)));
    };
    auto full_loss = [&](const Tree& vars) { return sum(square(apply_with(*sm, vars, forward).output)); };
    const std::vector<Array> g_blocks = tree_leaves(grad(split_loss)(stacked));
    const std::vector<Array> g_full = tree_leaves(grad(full_loss)(whole));
    for (int64_t k = 0; k < members; ++k) {
      const std::vector<Array> mine_blocks = tree_leaves(blocks[size_t(k)]);
      for (size_t i = 0; i < g_full.size(); ++i) {
        const Array mine = squeeze(slice_along(g_blocks[i], 0, k, k + 1), 0);
        EXPECT_TRUE(testing::all_close(mine, block_of(g_full[i], mine_blocks[i], k), 1e-10, 1e-10))
            << i << " member " << k;
      }
    }
  }
}

// Dropout on whole activations draws one mask on every member (they compute
// one model); on split activations each member's part draws its own.
TEST(TensorParallel, DropoutOnASplitActivationDrawsPerPart) {
  auto hp = tpl<Dropout>();
  hp->keep_prob = 0.5;
  auto drop = build<Dropout>(*hp);
  const Array x = ones({2, 64}, DType::f32);  // the same part on both members
  const Array members = zeros({2}, DType::f32);
  for (bool split : {false, true}) {
    auto member = [&](const Array&) {
      return apply_with(
                 *drop, Tree::dict(), [&](const Dropout& d) { return split ? d.fprop_split(x) : d.fprop(x); },
                 ApplyOptions{.rngs = {{"dropout", random::key(7)}}, .train = true, .sharding = {.tp = mdl(2)}})
          .output;
    };
    const Array out = vmap(member, {.in_axes = {0}, .axis_name = "mdl"})(members);  // (2, 2, 64)
    const Array first = squeeze(slice_along(out, 0, 0, 1), 0), second = squeeze(slice_along(out, 0, 1, 2), 0);
    const double differing = sum(not_equal(first, second).astype(DType::f32)).item<double>();
    if (split) {
      EXPECT_GT(differing, 20) << "the parts drew one mask";
    } else {
      EXPECT_EQ(differing, 0) << "whole activations drew different masks";
    }
    const double kept = sum(first).item<double>() / 2.0;  // kept elements scaled by 2
    EXPECT_GT(kept, 32) << split;
    EXPECT_LT(kept, 96) << split;
  }
}

}  // namespace
}  // namespace pax::nn

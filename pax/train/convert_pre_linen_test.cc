// convert_pre_linen against flax's docstring example (and the seed's, which
// is the same), nested modules, natural order past 10, names it leaves
// alone, Linen trees unchanged, and a pre-Linen checkpoint restored and
// converted.
#include "pax/train/convert_pre_linen.h"

#include <gtest/gtest.h>

#include "pax/ops/numpy.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"

namespace pax::train {
namespace {

using testing::trees_identical;

// Keys in natural order, the order convert_pre_linen returns them in.
Tree dense(float v) { return Tree::dict({{"bias", full({1}, v)}, {"kernel", full({1, 1}, v)}}); }

// Keys at every dict level, as "a(b c) d" for {'a': {'b', 'c'}, 'd': leaf}.
std::string keys_of(const Tree& t) {
  std::string out;
  for (const auto& [k, v] : t.entries()) {
    out += (out.empty() ? "" : " ") + k;
    if (v.is_dict() && v.size() && !v.contains("kernel")) out += "(" + keys_of(v) + ")";
  }
  return out;
}

TEST(ConvertPreLinen, FlaxDocstringExample) {
  // class Model: Conv then Dense. Pre-Linen: {'Conv_0', 'Dense_1'}; Linen: {'Conv_0', 'Dense_0'}.
  const Tree pre_linen = Tree::dict({{"Conv_0", dense(1)}, {"Dense_1", dense(2)}});
  const Tree linen = convert_pre_linen(pre_linen);
  EXPECT_EQ(keys_of(linen), "Conv_0 Dense_0");
  EXPECT_TRUE(trees_identical(linen["Conv_0"], dense(1)));
  EXPECT_TRUE(trees_identical(linen["Dense_0"], dense(2)));
  // Already Linen: unchanged, so any loaded checkpoint can go through it.
  EXPECT_TRUE(trees_identical(convert_pre_linen(linen), linen));
}

TEST(ConvertPreLinen, NestedModulesNaturalOrderAndOtherNames) {
  // One sequence for every class, twelve submodules: natural order puts
  // Dense_2 before Dense_10 (as text it would come after).
  Tree::Dict block;
  for (int i = 0; i < 12; ++i)
    block.emplace_back((i % 3 == 0 ? "LayerNorm_" : "Dense_") + std::to_string(i), dense(float(i)));
  block.emplace_back("scale", full({1}, 7.0f));  // not <module>_<n>: kept
  block.emplace_back("Dense_x", dense(-1));      // nor this
  const Tree pre_linen = Tree::dict({{"Block_3", Tree::dict(block)}, {"Embed_0", dense(9)}, {"head", dense(8)}});
  const Tree linen = convert_pre_linen(pre_linen);
  EXPECT_EQ(keys_of(linen),
            "Block_0(Dense_0 Dense_1 Dense_2 Dense_3 Dense_4 Dense_5 Dense_6 Dense_7 Dense_x LayerNorm_0 LayerNorm_1 "
            "LayerNorm_2 LayerNorm_3 scale) Embed_0 head");
  // Dense_0..7 are the old 1, 2, 4, 5, 7, 8, 10, 11; LayerNorm_0..3 the old 0, 3, 6, 9.
  const int dense_old[] = {1, 2, 4, 5, 7, 8, 10, 11};
  for (int n = 0; n < 8; ++n) {
    EXPECT_TRUE(trees_identical(linen["Block_0"]["Dense_" + std::to_string(n)], dense(float(dense_old[n])))) << n;
  }
  EXPECT_TRUE(trees_identical(linen["Block_0"]["LayerNorm_3"], dense(9)));
  EXPECT_TRUE(trees_identical(linen["Block_0"]["Dense_x"], dense(-1)));
  // The module part is everything before the last "_<digits>"; natural
  // order puts a_1_2 and a_1_7 before a_5.
  EXPECT_EQ(keys_of(convert_pre_linen(Tree::dict({{"a_1_7", dense(0)}, {"a_1_2", dense(0)}, {"a_5", dense(0)}}))),
            "a_1_0 a_1_1 a_0");
}

TEST(ConvertPreLinen, LeavesListsAndNoneAsTheyAre) {
  const Array x = full({2}, 1.0f);
  EXPECT_EQ(convert_pre_linen(Tree(x)).leaf().id(), x.id());
  EXPECT_TRUE(convert_pre_linen(Tree()).is_none());
  // flax converts dicts only: a list's dicts keep their names.
  const Tree list = Tree::list({Tree::dict({{"Dense_1", dense(1)}})});
  EXPECT_TRUE(trees_identical(convert_pre_linen(list), list));
}

TEST(ConvertPreLinen, APreLinenCheckpointRestoredAndConverted) {
  testing::TempDir dir;
  const Tree pre_linen = Tree::dict({{"params", Tree::dict({{"Conv_0", dense(1)}, {"Dense_1", dense(2)}})},
                                     {"batch_stats", Tree::dict({{"BatchNorm_1", dense(3)}, {"Conv_0", dense(4)}})}});
  save_checkpoint(dir.path(), pre_linen, 1);
  const Tree restored = restore_checkpoint(dir.path(), Tree());
  const Tree variables = Tree::dict(
      {{"params", convert_pre_linen(restored["params"])}, {"batch_stats", convert_pre_linen(restored["batch_stats"])}});
  EXPECT_EQ(keys_of(variables), "params(Conv_0 Dense_0) batch_stats(BatchNorm_0 Conv_0)");
  EXPECT_TRUE(trees_identical(variables["params"]["Dense_0"], dense(2)));
  EXPECT_TRUE(trees_identical(variables["batch_stats"]["BatchNorm_0"], dense(3)));
}

}  // namespace
}  // namespace pax::train

// Trees: construction, NestedMap-style building, flatten / unflatten round
// trips, TreeDef equality, paths, maps and structure diffs.
#include "pax/core/tree.h"

#include <gtest/gtest.h>

#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

Tree example() {
  Tree t;
  t["params"]["ff"]["w"] = zeros({3, 4});
  t["params"]["ff"]["b"] = zeros({4});
  t["params"]["layers"] = Tree::list({Tree(ones({2})), Tree(ones({2}, DType::i32))});
  t["step"] = scalar<int32_t>(0);
  t["optional"] = Tree();
  return t;
}

TEST(Tree, BuildAndAccess) {
  Tree t = example();
  EXPECT_TRUE(t.is_dict());
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"params", "step", "optional"}));
  EXPECT_EQ(t["params"]["ff"]["w"].leaf().shape(), (Shape{3, 4}));
  EXPECT_EQ(t.at_path("params/layers/1").leaf().dtype(), DType::i32);
  EXPECT_TRUE(t["optional"].is_none());
  EXPECT_EQ(t.str(),
            "{'params': {'ff': {'w': f32[3,4], 'b': f32[4]}, 'layers': [f32[2], i32[2]]}, 'step': i32[], "
            "'optional': None}");
  const Tree& c = t;
  EXPECT_PAX_ERROR(c["nope"], "no key 'nope'; keys are 'params', 'step', 'optional'");
  EXPECT_PAX_ERROR(c.at_path("params/ff/x"), "no key 'x'");
  EXPECT_PAX_ERROR(c["params"]["layers"][5], "index 5 is out of range");
  EXPECT_PAX_ERROR(Tree::dict({{"a", Tree()}, {"a", Tree()}}), "duplicate key 'a'");
}

// flax.core.pop and {'params': params, **state}, as the Flax state guide uses them.
TEST(Tree, PopAndMergeAsFlaxDoes) {
  const Tree variables =
      Tree::dict({{"params", Tree::dict({{"w", zeros({2})}})}, {"batch_stats", Tree::dict({{"mean", ones({2})}})}});
  auto [state, params] = tree_pop(variables, "params");
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"batch_stats"}));
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"w"}));
  EXPECT_EQ(variables.keys().size(), 2u) << "the input is unchanged";
  const Tree merged = tree_merge(Tree::dict({{"params", params}}), state);
  EXPECT_EQ(merged.keys(), (std::vector<std::string>{"params", "batch_stats"}));
  EXPECT_EQ(tree_structure_diff(merged, variables), "");
  // A key in both takes the second value, in the first's place.
  const Tree updated = tree_merge(merged, Tree::dict({{"params", Tree(full({3}, 1.0))}, {"extra", Tree()}}));
  EXPECT_EQ(updated.keys(), (std::vector<std::string>{"params", "batch_stats", "extra"}));
  EXPECT_EQ(updated["params"].leaf().shape(), (Shape{3}));
  EXPECT_EQ(tree_merge(Tree(), state).keys(), state.keys());
  EXPECT_PAX_ERROR(tree_pop(variables, "cache"), "no key 'cache'; keys are 'params', 'batch_stats'");
  EXPECT_PAX_ERROR(tree_pop(Tree(zeros({2})), "params"), "not a dict");
  EXPECT_PAX_ERROR(tree_merge(variables, Tree::list({})), "is not a dict");
}

TEST(Tree, CopiesAreIndependent) {
  Tree a = example();
  Tree b = a;
  b["params"]["ff"]["w"] = ones({1});
  EXPECT_EQ(a["params"]["ff"]["w"].leaf().shape(), (Shape{3, 4}));
  EXPECT_EQ(b["params"]["ff"]["w"].leaf().shape(), (Shape{1}));
}

TEST(Tree, FlattenUnflattenRoundTrip) {
  Tree t = example();
  auto [leaves, def] = tree_flatten(t);
  EXPECT_EQ(leaves.size(), 5u);
  EXPECT_EQ(def.num_leaves(), 5u);
  EXPECT_EQ(def.child_leaf_counts(), (std::vector<size_t>{4, 1, 0}));
  EXPECT_TRUE(tree_structure(Tree(zeros({1}))).child_leaf_counts().empty());
  EXPECT_EQ(def.str(), "{'params': {'ff': {'w': *, 'b': *}, 'layers': [*, *]}, 'step': *, 'optional': None}");
  Tree back = tree_unflatten(def, leaves);
  EXPECT_EQ(tree_structure(back), def);
  EXPECT_EQ(back.str(), t.str());
  EXPECT_EQ(back["params"]["ff"]["w"].leaf().id(), t["params"]["ff"]["w"].leaf().id());
  EXPECT_EQ(tree_paths(t),
            (std::vector<std::string>{"params/ff/w", "params/ff/b", "params/layers/0", "params/layers/1", "step"}));
  EXPECT_PAX_ERROR(tree_unflatten(def, std::vector<Array>(4, zeros({1}))), "has 5 leaves but 4 arrays");
  // Structures compare and hash by shape of the tree, not by values.
  Tree other = tree_map([](const Array& x) { return ones_like(x); }, t);
  EXPECT_EQ(tree_structure(other), def);
  EXPECT_EQ(tree_structure(other).hash(), def.hash());
  Tree renamed = t;
  renamed["step2"] = zeros({});
  EXPECT_NE(tree_structure(renamed), def);
}

TEST(Tree, MapsAndDiffs) {
  Tree t = example();
  Tree doubled = tree_map([](const Array& x) { return x + x; }, t);
  EXPECT_EQ(doubled["params"]["layers"][0].leaf().to_vector<float>(), (std::vector<float>{2, 2}));
  Tree summed = tree_map([](const Array& a, const Array& b) { return a + b; }, t, doubled);
  EXPECT_EQ(summed["params"]["layers"][0].leaf().to_vector<float>(), (std::vector<float>{3, 3}));
  std::vector<Tree> three{t, t, t};
  Tree n = tree_map_n([](std::span<const Array> xs) { return xs[0] + xs[1] + xs[2]; }, three);
  EXPECT_EQ(n["params"]["layers"][0].leaf().to_vector<float>(), (std::vector<float>{3, 3}));
  std::vector<std::string> seen;
  tree_map_with_path(
      [&](const std::string& path, const Array& x) {
        seen.push_back(path);
        return x;
      },
      t);
  EXPECT_EQ(seen, tree_paths(t));

  Tree missing = t;
  missing["params"]["ff"] = Tree::dict({{"w", zeros({3, 4})}, {"c", zeros({4})}});
  EXPECT_EQ(tree_structure_diff(t, missing), "at params/ff: keys differ (missing 'b', unexpected 'c')");
  Tree shorter = t;
  shorter["params"]["layers"] = Tree::list({Tree(ones({2}))});
  EXPECT_EQ(tree_structure_diff(t, shorter), "at params/layers: lists of length 2 vs 1");
  Tree leafy = t;
  leafy["step"] = Tree::list();
  EXPECT_EQ(tree_structure_diff(t, leafy), "at step: a leaf vs a list");
  EXPECT_EQ(tree_structure_diff(t, t), "");
  EXPECT_PAX_ERROR(tree_map([](const Array& a, const Array& b) { return a; }, t, missing),
                   "tree structures differ at params/ff");
}

}  // namespace
}  // namespace pax

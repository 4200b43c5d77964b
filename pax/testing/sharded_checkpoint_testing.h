// Test helpers for sharded checkpoints: a global train-state-like tree (f32,
// bf16, i32, a scalar, a zero-size array), each process's blocks of it for a
// choice of split per leaf, and the specs that describe them.
#pragma once

#include <map>
#include <string>

#include "pax/dist/shard_spec.h"
#include "pax/core/tree.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::testing {

// Leaves: "params/w" f32[8, 12], "params/v" bf16[4, 8], "params/b" f32[4],
// "step" i32[], "opt/mu" f32[8, 12], "opt/empty" f32[0, 4].
inline Tree sharded_global_tree(uint32_t seed) {
  return Tree::dict({
      {"params", Tree::dict({{"w", random_array({8, 12}, DType::f32, seed)},
                             {"v", random_array({4, 8}, DType::bf16, seed + 1)},
                             {"b", random_array({4}, DType::f32, seed + 2)}})},
      {"step", scalar(int32_t(seed))},
      {"opt", Tree::dict({{"mu", random_array({8, 12}, DType::f32, seed + 3)},
                          {"empty", random_array({0, 4}, DType::f32, seed + 4)}})},
  });
}

// The split dimension per leaf path (a path not listed is replicated).
using SplitDims = std::map<std::string, int64_t>;

// Splits used by the tests: along dimension 0, dimension 1, and replicated.
inline SplitDims default_split_dims() { return {{"params/w", 0}, {"params/v", 1}, {"opt/mu", 0}, {"opt/empty", 1}}; }

// Block `index` of `count` of every leaf of `global` along its split dim.
inline dist::ShardSpecs shard_specs_of(const Tree& global, const SplitDims& dims, int64_t count, int64_t index) {
  dist::ShardSpecs specs;
  const std::vector<Array> leaves = tree_leaves(global);
  const std::vector<std::string> paths = tree_paths(global);
  for (size_t i = 0; i < leaves.size(); ++i) {
    auto it = dims.find(paths[i]);
    if (it == dims.end()) continue;
    specs[paths[i]] = dist::ShardSpec{leaves[i].shape(), it->second, count, index};
  }
  return specs;
}

// The blocks the specs name (a leaf without a spec whole).
inline Tree local_blocks(const Tree& global, const dist::ShardSpecs& specs) {
  return tree_map_with_path(
      [&](const std::string& path, const Array& x) {
        auto it = specs.find(path);
        if (it == specs.end() || it->second.replicated()) return x;
        return slice_along(x, it->second.dim, it->second.begin(), it->second.end());
      },
      global);
}

}  // namespace pax::testing

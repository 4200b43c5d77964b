// flax.training.common_utils: sharding, stacking and one-hot helpers.
#include "pax/train/common_utils.h"

#include <string>

#include "pax/core/error.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::train {

namespace {

// The leaf's dims from `from` on.
Ints dims_from(const Array& x, int64_t from) {
  Ints out;
  for (int64_t d = from; d < x.ndim(); ++d) out.push_back(x.dim(d));
  return out;
}

}  // namespace

Tree shard(const Tree& xs, int64_t n) {
  PAX_CHECK(n > 0, "shard: the number of shards must be > 0, got ", n);
  return tree_map_with_path(
      [n](const std::string& path, const Array& x) {
        PAX_CHECK(x.ndim() >= 1 && x.dim(0) % n == 0, "shard: leaf '", path, "' is ", x.aval().str(),
                  "; its leading (batch) axis must be divisible by the ", n, " shards");
        Ints shape{n, x.dim(0) / n};
        for (int64_t d : dims_from(x, 1)) shape.push_back(d);
        return reshape(x, shape);
      },
      xs);
}

Tree unshard(const Tree& xs) {
  return tree_map_with_path(
      [](const std::string& path, const Array& x) {
        PAX_CHECK(x.ndim() >= 2, "unshard: leaf '", path, "' is ", x.aval().str(),
                  "; expected [shards, per_shard_batch, ...] (rank >= 2)");
        Ints shape{x.dim(0) * x.dim(1)};
        for (int64_t d : dims_from(x, 2)) shape.push_back(d);
        return reshape(x, shape);
      },
      xs);
}

Array shard_prng_key(const Array& prng_key, int64_t n) {
  PAX_CHECK(n > 0, "shard_prng_key: the number of shards must be > 0, got ", n);
  return random::split(prng_key, n);
}

Tree stack_forest(const std::vector<Tree>& forest) {
  PAX_CHECK(!forest.empty(), "stack_forest: needs at least one tree");
  for (size_t i = 1; i < forest.size(); ++i) {
    check_same_structure(forest[0], forest[i], "stack_forest: tree " + std::to_string(i) + " vs tree 0");
  }
  std::vector<std::string> paths = tree_paths(forest[0]);
  std::vector<std::vector<Array>> leaves;
  for (const Tree& t : forest) leaves.push_back(tree_leaves(t));
  std::vector<Array> stacked;
  for (size_t leaf = 0; leaf < paths.size(); ++leaf) {
    std::vector<Array> column;
    for (size_t i = 0; i < forest.size(); ++i) {
      const Array& x = leaves[i][leaf];
      const Array& first = leaves[0][leaf];
      PAX_CHECK(x.shape() == first.shape() && x.dtype() == first.dtype(), "stack_forest: leaf '", paths[leaf], "' is ",
                first.aval().str(), " in tree 0 but ", x.aval().str(), " in tree ", i);
      column.push_back(x);
    }
    stacked.push_back(stack(column, 0));
  }
  return tree_unflatten(tree_structure(forest[0]), stacked);
}

Tree get_metrics(const std::vector<Tree>& step_metrics, bool replicated) {
  PAX_CHECK(!step_metrics.empty(), "get_metrics: no metrics recorded (the list of per-step trees is empty)");
  if (!replicated) return stack_forest(step_metrics);
  std::vector<Tree> first_replica;
  for (size_t i = 0; i < step_metrics.size(); ++i) {
    first_replica.push_back(tree_map_with_path(
        [i](const std::string& path, const Array& x) {
          PAX_CHECK(x.ndim() >= 1 && x.dim(0) >= 1, "get_metrics: with replicated metrics every leaf needs a ",
                    "leading replica axis; leaf '", path, "' of step ", i, " is ", x.aval().str());
          return squeeze(slice_along(x, 0, 0, 1), 0);
        },
        step_metrics[i]));
  }
  return stack_forest(first_replica);
}

Array onehot(const Array& labels, int64_t num_classes, double on_value, double off_value) {
  PAX_CHECK(labels.defined() && is_integer(labels.dtype()), "onehot: labels must be an integer array, got ",
            labels.defined() ? labels.aval().str() : std::string("an empty Array"));
  PAX_CHECK(num_classes >= 0, "onehot: num_classes must be >= 0, got ", num_classes);
  Array hit = nn::one_hot(labels, num_classes, DType::bool_);
  return where(hit, full(hit.shape(), on_value, DType::f32), full(hit.shape(), off_value, DType::f32));
}

}  // namespace pax::train

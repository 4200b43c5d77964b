// Helpers of flax.training.common_utils: splitting a batch into per-device
// shards and back, per-device PRNG keys, stacking trees, collecting metrics
// over steps, and one-hot labels. flax takes the shard count from
// jax.local_device_count(); here it is an argument.
#pragma once

#include <cstdint>
#include <vector>

#include "pax/core/tree.h"

namespace pax::train {

// Every leaf [B, ...] -> [n, B / n, ...]. pax::Error naming the leaf's path
// and shape when a leaf is 0-d or B is not divisible by n; n must be > 0.
Tree shard(const Tree& xs, int64_t n);

// The inverse of shard: every leaf [n, b, ...] -> [n * b, ...] (rank >= 2).
Tree unshard(const Tree& xs);

// n keys from one (random::split): u32[n, 2], one row per shard.
Array shard_prng_key(const Array& prng_key, int64_t n);

// Trees of the same structure -> one tree whose leaves stack the matching
// leaves along a new leading axis. pax::Error when the forest is empty, a
// tree's structure differs from the first one's (naming the difference), or
// matching leaves differ in shape or dtype (naming the path).
Tree stack_forest(const std::vector<Tree>& forest);

// Metric trees recorded once per step -> one tree of arrays stacked over the
// steps ([num_steps, ...] leaves), concrete on the host, for summaries and
// logging. With `replicated`, each leaf carries a leading replica axis and
// replica 0 is taken first (flax's unreplicate of pmap outputs); metrics from
// a jitted step are not replicated.
Tree get_metrics(const std::vector<Tree>& step_metrics, bool replicated = false);

// Dense one-hot of integer labels: [..., num_classes] f32 with on_value where
// the class equals the label and off_value elsewhere (labels outside
// [0, num_classes) give a row of off_value).
Array onehot(const Array& labels, int64_t num_classes, double on_value = 1.0, double off_value = 0.0);

}  // namespace pax::train

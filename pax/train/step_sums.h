// The sums a train step takes over processes: the global batch's loss,
// gradients, metrics and written collections from every process's own, the
// gradients of the blocks a sharding plan splits, and the norms of whole
// arrays held as blocks. Used inside the jitted step (train/steps.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/nn/sharding_plan.h"
#include "pax/train/loss_aggregator.h"
#include "pax/train/metrics_aggregator.h"

namespace pax::train {

// Gradients are summed over the processes in buckets of about this size:
// small enough that a bucket's reduction starts while the backward pass
// still computes the gradients of the layers below
// (compile/collective_order.h), large enough that each collective moves
// megabytes.
inline constexpr int64_t kGradientBucketBytes = int64_t(4) << 20;

// The loss of the learner from compute_loss's metrics: sum_k c_k * loss_k.
// Across processes (`axis` set) with `normalise` (several terms, or sharded
// params whose gradients are summed by the gather's derivative), each loss_k
// is scaled by this process's share of its summed weight, so that the psum
// of the losses (and of their gradients) is the global batch's; *loss_weight
// is then unset. Otherwise *loss_weight is the one term's weight and the
// scaling happens after the gradient, in sum_over_batch.
Array aggregate_loss(const std::vector<LossTerm>& terms, const Tree& metrics, const std::string& model_name,
                     const std::string& axis, bool normalise, std::optional<Array>* loss_weight);

// The global batch's gradients, metrics and written collections from every
// process's own, in one bucketed psum over `axis`: the gradients (scaled by
// this process's loss weight when the loss is one metric, then divided by
// the summed weights; summed as they are when the loss was normalised over
// the processes already), the metrics (weighted means, or maxima of the
// values whose weight is > 0, as `rules` say) and the collections (their
// means). A gradient, loss or metric of weight 0 (which may be NaN) adds
// nothing.
struct GlobalBatch {
  Tree grads, metrics, collections;
  Array loss;
};
GlobalBatch sum_over_batch(const std::string& axis, const std::optional<Array>& loss_weight, const MetricRules& rules,
                           const Tree& grads, const Tree& metrics, const Tree& collections, const Array& loss);

// Whether each leaf of `local` (the params a process holds) is a block of
// the leaf of `global` (the params' shapes under fewer splits) at the same
// place.
std::vector<bool> split_leaves(const Tree& local, const Tree& global);

// The leaves of `tree` whose mark in `pick` equals `want`, summed over
// `axis` in one bucketed psum ("" : as they are), put back in place.
Tree psum_leaves(const Tree& tree, const std::vector<bool>& pick, bool want, const std::string& axis);

// Per leaf, sum(x^2) in f32 (f64 for f64 leaves), of the whole array: a
// block's summed over the plan's axes that `splits` marks it split over
// (one bucketed psum per axis).
std::vector<Array> whole_squares(const Tree& tree, const nn::LeafSplits& splits, const nn::ShardingPlan& plan);

// `summaries` plus, per group of variables (a layer: a variable's path
// without its name), the L2 norms of its parameters and of their gradients:
// "param_norm/<layer path>", "grad_norm/<layer path>", of the whole arrays.
Tree with_norm_summaries(Tree summaries, const Tree& params, const Tree& grads, const nn::LeafSplits& splits,
                         const nn::ShardingPlan& plan);

}  // namespace pax::train

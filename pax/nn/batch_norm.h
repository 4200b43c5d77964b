// BatchNorm and GroupNorm, as praxis.layers.normalizations (and
// flax.linen.BatchNorm / GroupNorm). Both learn a per-channel `gamma`
// (initialised to 1, applied as is: y = x_hat * gamma + beta, Flax's `scale`
// semantics rather than Praxis's 1 + gamma) and `beta` (initialised to 0)
// over the last axis. Statistics are computed in f32 for 16-bit inputs.
#pragma once

#include <string>

#include "pax/nn/layer.h"

namespace pax::nn {

// Normalises over every axis but the last (the features).
//
// Training (is_training() and not use_running_average): the batch mean and
// (biased) variance normalise the input, and the moving statistics of the
// "batch_stats" collection become decay * old + (1 - decay) * batch. The
// collection must then be mutable (mutable_collections = {"batch_stats"}), as
// in Flax; nn::init leaves the moving statistics at their initial values.
// Evaluation: the moving statistics normalise the input.
//
// With axis_name set, the batch statistics are averaged (pmean) across that
// named axis, so a per-example vmap(..., {.axis_name = "batch"}) computes the
// statistics of the whole batch (and a process group, later, of every shard).
class BatchNorm : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dim = 0;
    double decay = 0.99;
    double epsilon = 1e-3;
    bool use_moving_avg_in_training = false;
    bool use_running_average = false;
    std::string axis_name;
    bool use_scale = true;
    bool use_bias = true;
    PAX_HPARAMS(BatchNorm, Layer::HParams, (dim, "Depth of the last (feature) axis.", range::size),
                (decay, "Weight of the old moving statistics in each update (Flax's momentum).", range::fraction),
                (epsilon, "Added to the variance for stability.", range::non_negative),
                (use_moving_avg_in_training,
                 "In training, normalise with the (just updated) moving statistics instead of the batch's."),
                (use_running_average, "Always normalise with the moving statistics (evaluation behaviour)."),
                (axis_name, "Named (vmap) axis across which batch statistics are averaged; empty: none."),
                (use_scale, "Learn gamma (initialised to 1)."), (use_bias, "Learn beta (initialised to 0)."));
  };
  // x: (..., dim) -> (..., dim)
  Array fprop(const Array& x) const;

 protected:
  void setup() override;
};

// Splits the last axis into num_groups groups and normalises each group of
// every example over its channels and the spatial axes: statistics over all
// axes but the first (batch) axis, per group. Inputs are (B, ..., dim) with
// rank >= 2 (the first axis is always the batch, also under vmap).
class GroupNorm : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dim = 0;
    int64_t num_groups = 32;
    double epsilon = 1e-3;
    bool use_scale = true;
    bool use_bias = true;
    PAX_HPARAMS(GroupNorm, Layer::HParams, (dim, "Depth of the last (channel) axis.", range::size),
                (num_groups, "Number of channel groups (must divide dim).", range::count),
                (epsilon, "Added to the variance for stability.", range::non_negative),
                (use_scale, "Learn gamma (initialised to 1)."), (use_bias, "Learn beta (initialised to 0)."));
  };
  // x: (B, ..., dim) -> (B, ..., dim)
  Array fprop(const Array& x) const;

 protected:
  void setup() override;
};

}  // namespace pax::nn

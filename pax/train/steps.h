// The jitted computations of the programs: one training step (forward, loss,
// gradients, skip checks, optimizer, metrics), one evaluation step and one
// decoding step of a model. Variables are the model's collections:
// {params, batch_stats, ...}; a TrainState keeps params separately and the
// other collections in `extra`.
//
//   TrainStep train(model, learner);
//   TrainState state = train.init_state(random::key(seed));
//   auto [next, out] = train(std::move(state), batch, step_key);
//   out["metrics"]  weighted scalars {name: [value, weight]} of compute_loss
//   out["grad_norm"], out["skipped"] (1 when the update was skipped), out["loss"],
//   out["nonfinite"] (1 when the loss or the gradients hold NaN or infinity)
//   out["summaries"] {name: value} of the layers' add_summary calls (a
//     histogram's name ends in nn::kHistogramSuffix) and the norms per layer
//
// Data parallelism: with options.sharding.batch_axis set (the process axis,
// "processes"), each process runs the step on its own batch and the step
// sums, inside the jitted program and in one bucketed all-reduce, every
// process's gradient weighted by its loss weight, the metrics and the
// collections the forward pass wrote (a gradient, loss or metric of weight
// 0, which may be NaN, adds nothing). The update is then the one of the
// global batch's loss (padding on one host does not tilt the average), and
// it is the same on every process.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "pax/core/tree.h"
#include "pax/dist/shard_spec.h"
#include "pax/nn/sharding_plan.h"
#include "pax/nn/models/base_model.h"
#include "pax/train/learner.h"
#include "pax/train/loss_aggregator.h"
#include "pax/train/metrics_aggregator.h"
#include "pax/train/train_state.h"
#include "pax/train/variational_noise.h"

namespace pax::train {

// {params: ..., <collection>: ...} of a TrainState, as the model reads them.
Tree model_variables(const TrainState& state);

struct TrainStepOptions {
  // How the run is split over processes (nn/sharding_plan.h); the default
  // is this process alone, whole.
  //  - batch_axis: the processes that read different batches; the step
  //    averages over them (data parallelism).
  //  - fsdp: the params and optimizer state are this process's blocks,
  //    split over fsdp.axis (one of the batch axes). The gradient of a block
  //    arrives summed over fsdp.axis (the gather's derivative) and is summed
  //    over replica_axis too when set; a variable kept whole is summed over
  //    all of the batch axes.
  //  - tp: the variables the layers split over tp.axis (attention heads,
  //    feed-forward hidden width) are this process's blocks, whose gradients
  //    are its own (summed over the batch axes like whole arrays); every
  //    process of tp.axis reads the same batch. fsdp then splits those blocks
  //    further along the same dimension.
  //  - stage: a pipelined Repeat's stacks are this process's stage (its
  //    consecutive repetitions), whose gradients are its own; everything
  //    else is whole on every stage and computed alike there.
  // Clipping and the skip checks use the norm over every block. Optimizers
  // whose statistics span a tensor (OptimizerHParams::needs_whole_tensors)
  // are refused when anything is split.
  nn::ShardingPlan sharding;
  // Which metrics are the loss: a LossAggregatorHParams (null: the learner's
  // loss_name alone).
  HParamsPtr loss_aggregator;
  // How metrics combine over the processes: a MetricsAggregatorHParams
  // (null: weighted means).
  HParamsPtr metrics;
  // Variational weight noise in the forward and backward passes.
  VariationalNoise vn;
  // out["summaries"]: the layers' add_summary values and, per layer, the
  // norms of its parameters and gradients (param_norm/<path>, grad_norm/<path>).
  bool summaries = true;
};

class TrainStep {
 public:
  TrainStep(const nn::BaseModel& model, const Learner& learner, TrainStepOptions options = {});
  // Variables drawn from `key`, optimizer state, step 0 (under fsdp, this
  // process's blocks of them).
  TrainState init_state(const Array& key) const;
  // The whole (unsharded) train state's shapes, abstract; and how each
  // array of init_state's is split (by the path of TrainState::to_tree()).
  Tree global_state_shapes() const;
  dist::ShardSpecs state_specs() const;
  // The train state's shapes (abstract) with the variables held as `plan`
  // splits them.
  Tree state_shapes(const nn::ShardingPlan& plan) const;
  const nn::ShardingPlan& sharding() const { return plan_; }
  // One step on `batch` with dropout keys from `key`. Pass the state with
  // std::move: its buffers are reused for the new state.
  std::pair<TrainState, Tree> operator()(TrainState state, const Tree& batch, const Array& key) const;
  const optim::GradientTransformation& optimizer() const { return tx_; }
  size_t num_traces() const;
  // Bytes of the compiled step's intermediates (activations, gradients,
  // optimizer temporaries: its planned arena) for a state and batch of these
  // shapes, which may be abstract (eval_shape): the step is traced and
  // compiled, nothing runs. The compiled program is kept for the real calls.
  size_t intermediate_bytes(const TrainState& state, const Tree& batch, const Array& key) const;

 private:
  const nn::BaseModel& model_;
  optim::GradientTransformation tx_;
  VariationalNoise vn_;
  nn::ShardingPlan plan_;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// compute_predictions + compute_loss in evaluation mode: (metrics, per-example outputs).
class EvalStep {
 public:
  // With variables split by `plan`, `variables` hold this process's blocks
  // of the params (every process of the plan's axes runs the step together).
  // With `summaries`, the layers' add_summary values are collected too, as
  // the train step collects them.
  explicit EvalStep(const nn::BaseModel& model, const nn::ShardingPlan& plan = {}, bool summaries = false);
  std::pair<Tree, Tree> operator()(const Tree& variables, const Tree& batch) const;
  struct Outputs {
    Tree metrics;      // compute_loss's {name: [value, weight]}
    Tree per_example;  // compute_predictions' per-example outputs
    Tree summaries;    // {name: value} of the layers' add_summary calls (empty without `summaries`)
  };
  Outputs evaluate(const Tree& variables, const Tree& batch) const;
  // Bytes of the compiled eval step's intermediates for variables and a
  // batch of these shapes (abstract ones too), as TrainStep's.
  size_t intermediate_bytes(const Tree& variables, const Tree& batch) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// model.decode(batch) with sampling keys from `key` (eager: decoding loops
// over positions with the KV cache).
Tree decode_batch(const nn::BaseModel& model, const Tree& variables, const Tree& batch, const Array& key);

// The state decode_batch keeps while it decodes a batch shaped like `batch`
// (model.init_decode_states: {decoder_cache: the key/value caches}), as
// abstract arrays: nothing is allocated.
Tree decode_state_shapes(const nn::BaseModel& model, const Tree& variables, const Tree& batch);

}  // namespace pax::train

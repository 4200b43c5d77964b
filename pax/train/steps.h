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
// Data parallelism: with options.data_parallel_axis set (the process axis,
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
  // The named axis to average over (empty: this process alone).
  std::string data_parallel_axis;
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
  // Fully sharded data parallelism (nn/fsdp.h): the params and optimizer
  // state are this process's blocks, split over fsdp.axis, which is
  // data_parallel_axis or one of its axes. The gradient of a block arrives
  // summed over fsdp.axis (the gather's derivative); it is summed over
  // replica_axis too when set (the batch axes besides fsdp.axis), and a
  // variable kept whole over all of data_parallel_axis. Clipping and the
  // skip checks use the norm over every block. Optimizers whose statistics
  // span a tensor (Adafactor's factored moments, Lamb's trust ratio) are
  // refused.
  nn::FsdpOptions fsdp;
  std::string replica_axis;
  // Tensor parallelism (nn/tensor_parallel.h): the variables the layers
  // split over tp.axis (attention heads, feed-forward hidden width) are this
  // process's blocks, whose gradients are its own (summed over the batch
  // axes like whole arrays); every process of tp.axis reads the same batch,
  // and data_parallel_axis names the batch axes alone. fsdp then splits
  // those blocks further along the same dimension.
  nn::TensorParallelOptions tp;
  // Pipeline parallelism (nn/pipeline.h): a pipelined Repeat's stacks are
  // this process's stage (its consecutive repetitions), whose gradients are
  // its own; everything else is whole on every stage, computed alike there
  // (the stages read the same batch, and data_parallel_axis names the batch
  // axes alone). tp and fsdp split a stage's blocks further along their own
  // dimensions.
  nn::PipelineOptions stage;
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
  // The train state's shapes (abstract) with the params held under `fsdp`,
  // `tp` and `stage`.
  Tree state_shapes(const nn::FsdpOptions& fsdp, const nn::TensorParallelOptions& tp,
                    const nn::PipelineOptions& stage = {}) const;
  const nn::FsdpOptions& fsdp() const { return fsdp_; }
  const nn::TensorParallelOptions& tp() const { return tp_; }
  const nn::PipelineOptions& stage() const { return stage_; }
  // Whether the params are held as blocks (fsdp, tp or stage on).
  bool sharded() const { return fsdp_.enabled() || tp_.enabled() || stage_.enabled(); }
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
  nn::FsdpOptions fsdp_;
  nn::TensorParallelOptions tp_;
  nn::PipelineOptions stage_;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// compute_predictions + compute_loss in evaluation mode: (metrics, per-example outputs).
class EvalStep {
 public:
  // With fsdp or tp on, `variables` hold this process's blocks of the
  // params (every process of their axes runs the step together).
  explicit EvalStep(const nn::BaseModel& model, const nn::FsdpOptions& fsdp = {},
                    const nn::TensorParallelOptions& tp = {}, const nn::PipelineOptions& stage = {});
  std::pair<Tree, Tree> operator()(const Tree& variables, const Tree& batch) const;
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

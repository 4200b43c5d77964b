// Pipeline parallelism over a mesh axis (Pax's "stage"), GPipe's schedule.
// A pipelined Repeat (Repeat::HParams::num_microbatches or microbatch_size
// set) holds its stacked variables split along the repeat axis: with S
// processes on the axis each holds x_times / S consecutive layers, the
// stage. The batch is cut into M microbatches, and a scan of M + S - 1
// iterations runs every stage on its current microbatch and hands the result
// to the next stage:
//
//   iteration t:  stage s runs microbatch t - s (when 0 <= t - s < M)
//
// The shift is a ppermute from each stage to the next (the last sends
// nothing). With delay_forwarding (MaxText's delayed activation forwarding)
// a stage's output is sent during the iteration after the one that computed
// it, so the transfer and that iteration's compute are independent and
// overlap (the collective starts on the communication thread as the
// iteration begins and is waited for as it ends), at the cost of a bubble
// twice as long: stage s runs microbatch t - 2s, in M + 2(S - 1) iterations.
//
// Reverse-mode differentiation of that scan is GPipe's backward schedule:
// the cotangents flow back through the shifts from the last stage to the
// first. The stack is entered with enter_split and left with leave_split
// over the axis (the last stage's outputs summed onto every stage), so the
// layers around it (embedding, softmax, final norm) stay whole on every
// stage and get the whole gradient there, as under tensor parallelism.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/core/tree.h"
#include "pax/nn/tensor_parallel.h"
#include "pax/nn/weight_init.h"

namespace pax::nn {

// The stage axis is described like the mdl axis: its name, its size and this
// process's position on it (the stage it runs).
using PipelineOptions = TensorParallelOptions;

// Whether `stage` splits a variable declared as `spec` (stage_dim set, the
// pipeline on).
bool stage_split(const WeightHParams& spec, const PipelineOptions& stage);
// The declaration of this process's block of `spec` under `stage`: the
// shape with stage_dim divided by the axis size and stage_dim cleared (the
// block is what tensor parallelism and fsdp split further). Throws naming
// `what` when the axis size does not divide the repetitions.
WeightHParams stage_held_spec(const WeightHParams& spec, const PipelineOptions& stage, const std::string& what);
// Block stage.index of `full` (of spec.shape) along spec.stage_dim; `full`
// when the variable is not split.
Array stage_block(const Array& full, const WeightHParams& spec, const PipelineOptions& stage);

// x[i] for a traced i32 scalar i: x (N, ...) -> (...).
Array index_leading(const Array& x, const Array& i);

// The previous stage's `y` on every stage (stage 0 gets zeros, which the
// schedule ignores); backward, the cotangent goes back to the stage that
// sent it. A ppermute over the axis: each stage but the last sends one
// block, point to point.
Array from_previous_stage(const Array& y, const PipelineOptions& stage);

// What one stage computes on one microbatch: its output (of the input's
// shape and dtype) and values to stack over the iterations (summaries,
// auxiliary losses).
struct StageOutput {
  Array output;
  Tree ys;
};
// x (b, ...) is the stage's input for microbatch `microbatch` (an i32 scalar,
// clamped into [0, M) in the bubble's iterations); args are the schedule's
// args, each cut to that microbatch where it has the batch dimension.
using StageFn = std::function<StageOutput(const Array& x, const std::vector<Array>& args, const Array& microbatch)>;

struct PipelineResult {
  Array output;  // (B, ...), the last stage's outputs, whole on every stage
  Tree ys;       // the stage's ys, stacked over the schedule's iterations
  Array valid;   // (iterations,) bool: whether this stage ran a microbatch then
};

// The schedule's iterations: M + S - 1, or M + 2(S - 1) with the
// forwarding delayed.
int64_t pipeline_iterations(int64_t microbatches, int64_t stages, bool delay_forwarding);

// The number of microbatches of a batch of `batch` rows: num_microbatches,
// or batch / microbatch_size (one of them positive). Throws naming `who`
// when it does not divide the batch.
int64_t microbatch_count(int64_t batch, int64_t num_microbatches, int64_t microbatch_size, const std::string& who);

// Runs `fn` (this process's stage) as GPipe's schedule over `stage` on
// inputs (B, ...) cut into `microbatches` of B / microbatches rows. An arg
// with leading dimension B is cut per microbatch, the others (undefined, or a
// leading 1 that broadcasts) are passed as they are. delay_forwarding: see
// the top of this file.
PipelineResult run_pipeline(const Array& inputs, const std::vector<Array>& args, int64_t microbatches,
                            const PipelineOptions& stage, const StageFn& fn, bool delay_forwarding = false);

}  // namespace pax::nn

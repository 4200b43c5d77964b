// How a run splits its work over named process axes: which processes read
// different batches, and which split the variables (fully sharded data
// parallelism, tensor parallelism, pipeline stages). Built once per run
// (experiments/sharded_state.h builds it from the mesh) and handed to
// everything that splits or gathers: init, apply, the train and eval steps,
// the checkpoints' specs.
//
//   nn::ShardingPlan plan{.batch_axis = "replica,data",
//                         .fsdp = {.axis = "data", .size = 2, .index = 1},
//                         .tp = {.axis = "mdl", .size = 2, .index = 0}};
//   Tree vars = nn::init_sharded(model, key, plan);  // this process's blocks
//   nn::apply(model, vars, {.sharding = plan}, x);  // whole weights per layer
#pragma once

#include <string>
#include <vector>

#include "pax/nn/fsdp.h"
#include "pax/nn/pipeline.h"
#include "pax/nn/tensor_parallel.h"

namespace pax::nn {

struct ShardingPlan {
  // The axes whose processes read different batches, averaged over by the
  // train step ("" : this process alone). A comma list names several.
  std::string batch_axis;
  // The batch axes besides fsdp's axis ("" : none): blocks' gradients are
  // summed over them after the gather's derivative summed them over fsdp's.
  std::string replica_axis;
  FsdpOptions fsdp;          // params and optimizer state split over data (nn/fsdp.h)
  TensorParallelOptions tp;  // heads and hidden widths split over mdl (nn/tensor_parallel.h)
  PipelineOptions stage;     // a pipelined Repeat's layers split over stage (nn/pipeline.h)

  // Whether the variables are held as blocks (each process its own).
  bool sharded() const { return fsdp.enabled() || tp.enabled() || stage.enabled(); }
  // The same splits of the variables, without the batch axes: what decides
  // the shapes a process holds.
  ShardingPlan variables_only() const { return {.fsdp = fsdp, .tp = tp, .stage = stage}; }
  // "the mesh's data axis of 4 (fully sharded data parallelism) and the
  // mesh's mdl axis of 2 (tensor parallelism)" ("" when nothing is split).
  std::string describe_splits() const;
};

// Per leaf of a params tree (flatten order), whether this process holds it
// as a block split over each of the plan's axes (an empty mask: none is).
struct LeafSplits {
  std::vector<bool> data, mdl, stage;
};

}  // namespace pax::nn

// The mesh's data, mdl and stage axes for a run: which named axes the train
// step sums over, which splits the params (fully sharded data parallelism
// over data, tensor parallelism over mdl, pipeline parallelism over stage),
// and the gather of whole arrays from the blocks (for decoding on the chief).
//
//   mpirun -np 4 paxcc --exp=... --set train.ici_mesh_shape=[1,4,1]
//   -> every process holds a quarter of each large parameter and of its
//      optimizer state (nn/fsdp.h), gathered per layer inside the step.
//   mpirun -np 4 paxcc --exp=... --set train.ici_mesh_shape=[1,2,2]
//   -> each pair of processes on mdl computes half of every attention's
//      heads and of every feed-forward's hidden width on the same batch
//      (nn/tensor_parallel.h); their blocks are split over data too.
#pragma once

#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/dist/shard_spec.h"
#include "pax/nn/sharding_plan.h"
#include "pax/train/report_context.h"

namespace pax::experiments {

struct TrainSettings;

using nn::ShardingPlan;

// The plan of a run of `process_count` processes on the named process axis
// `process_axis` (the world), after init_process_mesh: data parallel over
// every process; with the mesh's data axis above 1, the params split over
// the mesh axis "data" (this process's block: its coordinate there), and the
// gradients of the blocks also summed over "replica" when that axis is above 1;
// with the mesh's mdl axis above 1, the heads and hidden widths split over
// "mdl", and with its stage axis above 1 a pipelined Repeat's layers split
// over "stage"; with either, the batch is read per "replica,data" coordinate.
ShardingPlan plan_sharding(const TrainSettings& t, int64_t process_count, const std::string& process_axis);
// The plan of the mesh's first process (coordinate 0 on every axis),
// without a mesh of processes: what --mode=inspect sizes the train state by.
ShardingPlan first_process_plan(const TrainSettings& t);

// Whether any of `specs` splits an array over the mesh axis `axis`.
bool splits_over(const dist::ShardSpecs& specs, const std::string& axis);

// Every array of `tree` whole: the blocks of the arrays `specs` names
// all-gathered over their axes, inner first (every process calls it).
Tree gather_whole(const Tree& tree, const dist::ShardSpecs& specs);

// This process's block of `whole` by `spec` (the outer split, then the
// split along spec.dim); `whole` itself when replicated.
Array block_of(const Array& whole, const dist::ShardSpec& spec);

// train.init_from under sharding: the params in `path` (a Flax msgpack file
// or an Orbax / Pax checkpoint, train/import_params.h) matched against the
// whole shapes the train state's specs give, each cut to this process's
// block. `local` is this process's params (their structure and dtypes).
Tree params_blocks_from_checkpoint(const std::string& path, const Tree& local, const dist::ShardSpecs& specs);

// report.html's parameter table: a row per array of `params` (this
// process's blocks under sharding) with its whole shape and how it is split,
// from the train state's specs ("params/<path>"; an empty map: replicated).
std::vector<train::ReportParameter> parameter_table(const Tree& params, const dist::ShardSpecs& specs);

// "replicated", "dim 1 in 4 blocks over data", "dim 0 in 2 blocks over
// stage, then dim 2 in 2 blocks over mdl".
std::string describe_split(const dist::ShardSpec& spec);

}  // namespace pax::experiments

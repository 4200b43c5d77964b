// The mesh's data axis as fully sharded data parallelism for a run: which
// named axes the train step sums over, which one splits the params, and the
// gather of whole arrays from the blocks (for decoding on the chief).
//
//   mpirun -np 4 paxcc --exp=... --set train.ici_mesh_shape=[1,4,1]
//   -> every process holds a quarter of each large parameter and of its
//      optimizer state (nn/fsdp.h), gathered per layer inside the step.
#pragma once

#include <string>

#include "pax/core/tree.h"
#include "pax/dist/shard_spec.h"
#include "pax/nn/fsdp.h"

namespace pax::experiments {

struct TrainSettings;

struct ShardingPlan {
  std::string batch_axis;    // the axis whose processes read different batches ("" : one process)
  std::string replica_axis;  // the batch axes besides the fsdp axis ("" : none)
  nn::FsdpOptions fsdp;      // off unless the mesh's data axis is above 1
};

// The plan of a run of `process_count` processes on the named process axis
// `process_axis` (the world), after init_process_mesh: data parallel over
// every process; with the mesh's data axis above 1, the params split over
// the mesh axis "data" (this process's block: its coordinate there), and the
// gradients of the blocks also summed over "replica" when that axis is above 1.
ShardingPlan plan_sharding(const TrainSettings& t, int64_t process_count, const std::string& process_axis);

// Every array of `tree` whole: the blocks of the arrays `specs` names
// all-gathered over `axis` (every process of the axis calls it).
Tree gather_whole(const Tree& tree, const dist::ShardSpecs& specs, const std::string& axis);

}  // namespace pax::experiments

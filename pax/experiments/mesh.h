// Pax's device mesh (ICI_MESH_SHAPE, DCN_MESH_SHAPE) kept in an experiment's
// train settings and read the way paxcc runs: devices are processes (one per
// `mpirun` rank); parameters are replicated over the replica axis, split
// over the data axis (fully sharded data parallelism, nn/fsdp.h), split by
// heads and widths over mdl (tensor parallelism, nn/tensor_parallel.h), and
// a pipelined Repeat's layers split over stage (pipeline parallelism,
// nn/pipeline.h). The product of both meshes must equal the process count;
// the check runs before any work.
//
//   train.ici_mesh_shape = [1, 4, 1], train.dcn_mesh_shape = [2, 1, 1]
//   -> 8 processes: mpirun -np 8 paxcc --exp=...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pax::experiments {

struct TrainSettings;

// The mesh's axis names: [replica, data, mdl], or [stage, replica, data,
// mdl] for a pipelined config. Throws pax::Error for another rank, an entry
// below 1, or two meshes of different ranks.
std::vector<std::string> mesh_axes(const TrainSettings& t);
// ICI x DCN, element-wise (all ones where neither is set).
std::vector<int64_t> mesh_shape(const TrainSettings& t);
// The size of the mesh axis `name` (1 when the mesh has no such axis).
int64_t mesh_axis_size(const TrainSettings& t, const std::string& name);
// The processes the mesh asks for (1 when neither mesh is set).
int64_t mesh_processes(const TrainSettings& t);
// One line: "ICI [1, 4, 1] x DCN [2, 1, 1] = [2, 4, 1] (replica, data, mdl): 8 processes".
std::string describe_mesh(const TrainSettings& t);
// Which process sits where, one line a slice (the processes of one ICI
// mesh, consecutive ranks): "slice 1 (DCN [1, 0, 0]): ranks 4-7 at [1, 0..3, 0]",
// then up to `max_ranks` lines "rank 5: replica 1, data 1, mdl 0". Empty
// when no mesh is set.
std::string describe_placement(const TrainSettings& t, int64_t max_ranks = 8);
// Throws pax::Error, before any work, when the mesh asks for another number
// of processes than `process_count`, with the mpirun command or the mesh to
// use instead. No mesh set: any count.
void check_mesh(const TrainSettings& t, int64_t process_count);
// Arranges the job's processes into the mesh (dist::init_mesh with
// mesh_axes(t); an unset ICI or DCN shape is all ones), after check_mesh.
// Collective: every process calls it. No mesh set: does nothing.
void init_process_mesh(const TrainSettings& t);

}  // namespace pax::experiments

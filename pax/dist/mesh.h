// The processes of a job as a mesh (Pax's device mesh, with processes for
// devices): named axes ("replica", "data", "mdl", optionally "stage" first)
// whose ICI part is the processes of one host (or slice) and whose DCN part
// spans hosts, as Pax's hybrid device mesh. Each axis has a process group of
// the processes that share every other coordinate, and the array core's
// named-axis collectives bind to it by name:
//
//   dist::init_mesh({"replica", "data", "mdl"}, /*ici=*/{1, 2, 1}, /*dcn=*/{2, 1, 1});
//   lax::psum(x, "data");           // over the 2 processes of this one's slice
//   lax::psum(x, "replica,data");   // over both axes: JAX's psum(x, ('replica', 'data'))
//   lax::axis_index("replica");     // this process's coordinate
//
// Groups over several axes are named by the axes comma-joined in mesh order.
// Creating a group is itself collective (MPI_Comm_split over every process):
// init_mesh creates each single-axis group and the "replica,data" pair at
// once; any other group is created on its first use, so every process must
// first use such a name at the same point of its sequence of collectives.
// A job without init_mesh has the 1-axis mesh "processes" (the world).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pax/dist/process_group.h"

namespace pax {
class ProcessAxis;
}

namespace pax::dist {

// The mesh coordinates of world rank `rank` (pure arithmetic). ici and dcn
// have one entry per axis; consecutive ranks fill a slice of prod(ici)
// processes, so slice s = rank / prod(ici) at position i = rank % prod(ici),
// and coordinate k is dcn_coord_k * ici_k + ici_coord_k, where dcn_coord and
// ici_coord unravel s over dcn and i over ici (row-major). local_rank and
// local_size place the rank on its host (OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK
// / _SIZE): a slice must not straddle hosts partly (local_size a multiple or
// a divisor of prod(ici)) and ranks must fill hosts in order (local_rank ==
// rank % local_size); otherwise pax::Error says what to change.
std::vector<int64_t> mesh_coordinates(int64_t rank, int64_t local_rank, int64_t local_size,
                                      const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn);

class Mesh {
 public:
  // Checks the shapes against the process count and computes this process's
  // coordinates; creates no group (collective only through group()).
  Mesh(std::vector<std::string> names, std::vector<int64_t> ici, std::vector<int64_t> dcn);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const std::vector<std::string>& axis_names() const { return names_; }
  const std::vector<int64_t>& ici() const { return ici_; }
  const std::vector<int64_t>& dcn() const { return dcn_; }
  const std::vector<int64_t>& shape() const { return shape_; }         // ici * dcn, elementwise
  const std::vector<int64_t>& coordinates() const { return coords_; }  // this process's
  // One line: "[2, 2] (replica, data) = ICI [1, 2] x DCN [2, 1]".
  std::string str() const;

  // `axes` is one axis name or several comma-joined in mesh order.
  bool has(const std::string& axes) const;
  int64_t size(const std::string& axes) const;
  // This process's coordinate: row-major over the named axes.
  int64_t coordinate(const std::string& axes) const;
  // The group of the processes that share every other coordinate, ordered by
  // coordinate(axes). Created on first use (collective; see above).
  ProcessGroup& group(const std::string& axes);
  // That group as the array core's named axis.
  ProcessAxis& axis(const std::string& axes);
  // The groups created so far, by name.
  std::vector<std::string> group_names() const;

 private:
  friend Mesh& mesh();
  struct World {};
  explicit Mesh(World);  // the 1-axis mesh "processes" of the world group
  // The mesh positions of `axes`; throws pax::Error naming the valid names.
  std::vector<size_t> positions(const std::string& axes) const;

  std::vector<std::string> names_;
  std::vector<int64_t> ici_, dcn_, shape_, coords_;
  bool world_ = false;  // the default mesh: its one group is process_group()
  std::map<std::string, std::unique_ptr<ProcessGroup>> groups_;
  std::map<std::string, std::unique_ptr<ProcessAxis>> axes_;
};

// Makes the job's mesh (collective: every process calls it with the same
// arguments) and creates its single-axis groups and the "replica,data" pair.
// Once per job: again with the same shape is a no-op, another shape throws,
// except in a single process (no group is shared), where it replaces the mesh.
void init_mesh(const std::vector<std::string>& names, const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn);
bool mesh_initialized();
// The job's mesh: init_mesh's, or the 1-axis mesh "processes" of the world.
Mesh& mesh();

// This process's input shard among the processes that read different data:
// every mesh axis but "mdl" and "stage" (processes that differ only in those
// read the same batch), row-major; without a mesh, the process index and count.
struct DataShard {
  int64_t index = 0;
  int64_t count = 1;
};
DataShard data_shard();

}  // namespace pax::dist

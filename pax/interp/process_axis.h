// The processes of a multi-process job as named axes, for the collectives
// (psum, pmax, pmin, all_gather, psum_scatter, axis_index) bound outside any
// vmap of their axis name. The array core knows only this interface: the process group
// library (pax/dist) installs its resolver when it is loaded, which answers
// the world ("processes") and every axis of the process mesh (dist/mesh.h:
// "data", or several axes comma-joined, "replica,data"). Without it the job
// is one process on an axis named "processes", and every collective returns
// its input (all_gather adds an axis of size 1).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/elementwise_ops.h"

namespace pax {

class ProcessAxis {
 public:
  virtual ~ProcessAxis() = default;
  virtual const std::string& name() = 0;  // the axis name collectives bind to
  virtual int64_t size() = 0;             // the number of processes
  virtual int64_t index() = 0;            // this process's position on the axis
  // Elementwise reduction over the processes (op: sum, max or min).
  virtual Array all_reduce(const Array& x, ReduceOp op) = 0;
  // Every process's x in process order: stacked along a new axis `axis`, or
  // (tiled) concatenated along existing axis `axis`.
  virtual Array all_gather(const Array& x, int64_t axis, bool tiled) = 0;
  // The elementwise sum over the processes, of which this process keeps
  // block index() of axis `axis` (whose size is a multiple of size()).
  virtual Array reduce_scatter_sum(const Array& x, int64_t axis) = 0;
  // For each (source, destination) pair, the destination receives the
  // source's x; a process no pair sends to gets zeros (JAX's ppermute).
  virtual Array permute(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pairs) = 0;
};

// The world axis of this job (every process): the installed one, or the
// single process.
ProcessAxis& process_axis();
// The process axis bound to `name`, or nullptr when no process axis is.
ProcessAxis* find_process_axis(const std::string& name);
// The names bound now (the world's first), for messages.
std::vector<std::string> process_axis_names();
// find_process_axis(name), or throws pax::Error "<op>: unbound axis name"
// listing the bound names.
ProcessAxis& bound_process_axis(const std::string& name, const char* op);

// How the process group library answers; its functions are called on every
// use, so that it may set groups up lazily.
struct ProcessAxes {
  ProcessAxis& (*world)();
  ProcessAxis* (*find)(const std::string& name);
  std::vector<std::string> (*names)();
};
// The process group library calls it once when it is loaded (a test that
// traces programs over process axes it does not have installs its own and
// puts back what current_process_axes() returned).
void install_process_axes(const ProcessAxes& axes);
ProcessAxes current_process_axes();

}  // namespace pax

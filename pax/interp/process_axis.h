// The processes of a multi-process job as a named axis, for the collectives
// (psum, pmax, pmin, all_gather, psum_scatter, axis_index) bound outside any vmap of their
// axis name. The array core knows only this interface: the process group
// (pax/dist) installs itself when its library is loaded; without it the job
// is one process on an axis named "processes", and every collective returns
// its input (all_gather adds an axis of size 1).
#pragma once

#include <cstdint>
#include <string>

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
};

// The axis of this job: the installed one, or the single process.
ProcessAxis& process_axis();

// Installs the function that gives the job's axis (called on every use, so
// that it may set the group up lazily); the process group library calls it
// once when it is loaded.
void install_process_axis(ProcessAxis& (*axis)());

}  // namespace pax

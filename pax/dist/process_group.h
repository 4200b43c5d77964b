// The process group of multi-process (MPI) data-parallel training: which
// process this is, how many there are, a barrier, and host-side collectives on
// concrete arrays (all_reduce, all_gather, broadcast, reduce_scatter).
//
// Launched under mpirun (OpenMPI sets OMPI_COMM_WORLD_SIZE) the group spans
// every MPI rank; launched directly it is a single process and MPI is never
// touched, so every collective returns its input (gathered along a new axis of
// size 1 for all_gather).
//
// Every operation waits at most timeout_seconds() (default 300 s, or
// $PAX_DIST_TIMEOUT): a rank that died or hangs makes the others throw
// pax::Error naming the operation, the timeout and the ranks that never
// arrived, or, when every rank arrived and the data did not, the ranks that
// stopped during the transfer. Before moving data, the ranks agree on the operation, dtype and
// shape: a mismatch throws pax::Error on every rank instead of corrupting
// memory. After a timeout the group is broken (later calls throw at once).
// Calls come from one thread at a time; a call first waits for the
// collectives that compiled programs started on the communication thread
// (interp/collective_thread.h), which then run these same operations.
//
// process_group() is the world: every process of the job. split() makes a
// sub-group over some of them (MPI_Comm_split; dist/mesh.h makes one per mesh
// axis) with its own sequence of collectives and the same discipline; its
// messages name the group ("all_reduce over 'data'") and each rank by its
// index in the group and its world rank ("rank 1 (world rank 3)").
//
// The processes also form a named axis (axis_name(), default "processes"):
// lax::psum / pmean / pmax / pmin / all_gather / psum_scatter / axis_index over that name,
// outside any vmap of the same name, run these collectives, so their
// derivative rules give gradients across processes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/array.h"

namespace pax::dist {

enum class ReduceOp : uint8_t { sum, mean, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", "mean", "max", "min"

namespace detail {
struct Communicator;  // the MPI communicator of a group and its state (process_group.cc)
}

class ProcessGroup {
 public:
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Joins the MPI job when launched under mpirun, otherwise sets up a single
  // process. Idempotent; every other member calls it on first use. MPI is
  // finalized at exit.
  void initialize();
  bool initialized() const { return initialized_; }
  bool uses_mpi() const;  // launched under mpirun

  // This process's index in the group and the group's size.
  int process_index();
  int process_count();
  // The world rank of the group's process `index` (the index itself in the world group).
  int world_rank(int index) const;
  // Whether this is a group of split() rather than the world.
  bool is_subgroup() const { return world_ != nullptr; }

  // A sub-group of this group's processes: those that pass the same `color`
  // (>= 0) form one group, ordered by `key` (ties by index here). Collective:
  // every process of this group calls it, in the same order as its other
  // collectives; it waits at most timeout_seconds() for all of them.
  // `axis_name` names the new group's axis and its messages (non-empty).
  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& axis_name);

  // The wait limit of every operation, in seconds (> 0). A sub-group uses
  // its world group's limits (setting them on it sets the world's).
  double timeout_seconds() const { return world_ ? world_->timeout_seconds() : timeout_seconds_; }
  void set_timeout_seconds(double seconds);
  // The wait limit of a barrier after a phase that one process runs alone
  // (a restore, a save, decoding): default an hour, or $PAX_DIST_PHASE_TIMEOUT;
  // never below timeout_seconds().
  double phase_timeout_seconds() const {
    return world_ ? world_->phase_timeout_seconds() : std::max(phase_timeout_seconds_, timeout_seconds_);
  }
  void set_phase_timeout_seconds(double seconds);
  // Once this process is asked to stop (pax::stop_requested(): SIGINT /
  // SIGTERM under watch_stop_signals(), or request_stop()), every wait ends
  // at the latest this many seconds after the first one that saw the request,
  // whatever its timeout: default 30 (the time preemption usually leaves
  // between SIGTERM and SIGKILL), or $PAX_DIST_STOP_GRACE.
  double stop_grace_seconds() const;
  void set_stop_grace_seconds(double seconds);

  // The name of the process axis for the named-axis collectives (non-empty).
  // A vmap with the same axis_name takes precedence inside it.
  const std::string& axis_name() const { return axis_name_; }
  void set_axis_name(std::string name);

  // Returns once every process has called barrier; timeout_seconds <= 0 means
  // the group's timeout.
  void barrier(double timeout_seconds = 0);
  // The barrier after a phase that some processes run alone and the others
  // wait out (phase_timeout_seconds()); a timeout's message names `phase`.
  void meet_after(const std::string& phase);

  // Ends every process of the job at once with exit status `code`
  // (MPI_Abort), after a failure on this one that the others cannot learn of
  // otherwise (they would wait out the timeout). A single process just exits.
  [[noreturn]] void abort_job(int code);

  // Elementwise reduction over the processes of arrays of one shape and dtype.
  // f32, f64, i32, i64, u8, u32 reduce natively; bf16 and f16 in f32. mean
  // needs a floating dtype.
  Array all_reduce(const Array& x, ReduceOp op = ReduceOp::sum);
  // Every process's x, in process order: stacked along a new axis `axis` of
  // size process_count(), or (tiled) concatenated along existing axis `axis`.
  Array all_gather(const Array& x, int64_t axis = 0, bool tiled = false);
  // Process `root`'s x on every process (the others pass an array of the same
  // shape and dtype, whose values are ignored).
  Array broadcast(const Array& x, int root = 0);
  // all_reduce, then process i keeps block i of `axis` (whose size must be a
  // multiple of process_count()): jax's psum_scatter(..., tiled=True).
  Array reduce_scatter(const Array& x, ReduceOp op = ReduceOp::sum, int64_t axis = 0);
  // JAX's ppermute: for each (source, destination) pair, the destination
  // receives the source's x (point to point); a process no pair sends to
  // gets zeros. Sources and destinations are process indices, each at most
  // once on each side.
  Array permute(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pairs);

 private:
  friend ProcessGroup& process_group();
  ProcessGroup();
  struct Header;
  // Gathers every rank's header at rank 0, which checks them and answers
  // every rank: they agree, or which ranks differ or never arrived.
  void agree(const Header& mine, double timeout_seconds);
  void check_usable(const char* op) const;

  bool initialized_ = false;
  bool mpi_ = false;
  std::unique_ptr<detail::Communicator> comm_;  // index, count, MPI communicator
  const ProcessGroup* world_ = nullptr;         // a sub-group's world group
  double timeout_seconds_ = 300;
  double phase_timeout_seconds_ = 3600;
  std::string axis_name_ = "processes";
  int64_t sequence_ = 0;             // collectives so far: ranks must agree on the order
  const char* broken_by_ = nullptr;  // the operation that timed out, if any
};

// Fault injection for tests: this process's next data-moving collective is
// agreed on as usual, then moves no data for `seconds` and throws, as a
// process that stops in the middle of a transfer would.
void stall_next_transfer_for_testing(double seconds);

// The process-wide group (created and initialized on first use).
ProcessGroup& process_group();
inline int process_index() { return process_group().process_index(); }
inline int process_count() { return process_group().process_count(); }

}  // namespace pax::dist

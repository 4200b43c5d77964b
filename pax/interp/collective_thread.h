// The communication thread: where compiled programs run their collectives
// over the processes, so that computing goes on while data moves.
//
// A compiled program starts a collective (start_collective) at its step and
// waits for it (PendingCollective::wait) just before the first step that
// reads its result; the steps in between compute meanwhile. Collectives run
// one at a time on one thread per process, in the order they were started,
// which every process shares because every process runs the same programs
// in the same order; that thread also progresses MPI's transfers. Each
// collective waits at most the process group's timeout and fails naming the
// ranks that never came, so a wait for one is bounded too.
//
// A host-side collective called from any other thread (ProcessGroup's
// all_reduce, barrier, ...) first waits for every started one
// (finish_started_collectives), so that the order stays the same and MPI is
// only ever called from one thread at a time.
//
// PAX_OVERLAP_COLLECTIVES=0 in the environment runs every collective at its
// step, as if waited at once (the figures below still count it), and leaves
// the schedule's order alone (compile/collective_order.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pax/core/array.h"

namespace pax {

// A collective started on the communication thread.
class PendingCollective {
 public:
  // Its outputs, once it has run (rethrows its failure); waits until then.
  // The time this thread waits counts as waiting (communication_times()).
  std::vector<Array> wait();
  bool finished() const;

 private:
  friend class CollectiveThread;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::vector<Array> outputs_;
  std::exception_ptr error_;
};
using PendingCollectivePtr = std::shared_ptr<PendingCollective>;

// Runs `collective` on the communication thread after every collective
// started before it. With one process it runs here and now (nothing to wait
// for); so it does when PAX_OVERLAP_COLLECTIVES is 0 or on the communication
// thread itself.
PendingCollectivePtr start_collective(std::function<std::vector<Array>()> collective);

// Waits until every collective started so far has finished (their failures
// stay with their handles). Called by host-side collectives on other threads.
void finish_started_collectives();

// Whether the calling thread is the communication thread.
bool on_collective_thread();

// Whether compiled programs run collectives asynchronously (default yes;
// PAX_OVERLAP_COLLECTIVES=0 turns it off, and so does the process group
// when MPI cannot be called from a second thread).
bool overlap_collectives();
void disable_overlap_collectives();

// The position of the collective being run among the collectives of its
// compiled program, in program order (-1: none). The process group sends it
// with the collective, so that processes which start a program's collectives
// in different orders fail instead of mixing up arrays of one shape.
int64_t current_collective_position();
class CollectivePosition {
 public:
  explicit CollectivePosition(int64_t position);
  ~CollectivePosition();
  CollectivePosition(const CollectivePosition&) = delete;
  CollectivePosition& operator=(const CollectivePosition&) = delete;

 private:
  int64_t saved_;
};

// Seconds the collectives of compiled programs took on the communication
// thread (communication) and seconds the programs waited for them
// (waiting), since the process started or the last reset. Waiting that is
// close to communication means nothing overlapped.
struct CommunicationTimes {
  double communication_seconds = 0;
  double waiting_seconds = 0;
  // Jobs run: a collective, or a program of several run as one (a loop's
  // fetch or finish, prims/scan_pipeline.h), which counts once.
  int64_t collectives = 0;
};
CommunicationTimes communication_times();
void reset_communication_times();

}  // namespace pax

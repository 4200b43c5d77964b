// A process-wide request to stop, and the one thread that turns SIGINT /
// SIGTERM into it.
//
// A training loop polls stop_requested() after every step: when it is set the
// loop finishes the step, saves a checkpoint and returns. Anything may set it
// (request_stop() is safe from any thread), and watch_stop_signals() makes the
// stop signals set it:
//
//   int main(int argc, char** argv) {
//     pax::watch_stop_signals();   // first, before anything starts a thread
//     ...                          // MPI, OpenMP, oneDNN, the training loop
//   }
//
// Why a thread and not a handler: a signal handler runs on whichever thread
// the kernel picks, and the kernel writes the handler's frame below that
// thread's stack pointer, which inside some vendor kernels (oneDNN's JIT GEMM)
// points into a heap buffer, so a handler corrupts the heap. Blocked in every
// thread and received by sigwait() on one, a signal is only ever a return
// value.
#pragma once

namespace pax {

// Sets the process-wide stop request. Async-signal-safe and thread-safe.
void request_stop() noexcept;

// Whether a stop was requested (since the last clear_stop_request()).
bool stop_requested() noexcept;

// Clears the request (a program that trains again after a stop, tests).
void clear_stop_request() noexcept;

// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread
// created after this call (a new thread inherits its creator's mask), and
// starts one thread that receives them with sigwait(). While a StopListener
// exists, the first one requests a stop and a second one ends the process
// with that signal's default action (a user who presses Ctrl-C twice means
// it); with no listener, the first one ends the process, as it would without
// this call. A stop signal less than kStopRepeatSeconds after the first is
// that stop delivered again, and is dropped: coreutils' `timeout` signals its
// command and then its own process group (so the command gets it twice), as
// may any launcher that signals both a process and its group. Call it first in main(): a thread
// that exists already keeps the signals unblocked. Returns the number of
// other threads the process had at the call (0 when called in time; they may
// still receive a stop signal). Later calls do nothing and return 0. Throws
// pax::Error if the signal thread cannot be started.
int watch_stop_signals();
inline constexpr double kStopRepeatSeconds = 1.0;

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread: a worker thread
// (compiler, communication) never receives a stop signal, whenever it starts.
void block_stop_signals_in_this_thread() noexcept;

// Marks a stretch of work that polls stop_requested() and ends in an orderly
// way (a training loop that saves): while one exists, a stop signal becomes a
// request instead of ending the process. Nests; any thread.
class StopListener {
 public:
  StopListener() noexcept;
  ~StopListener();
  StopListener(const StopListener&) = delete;
  StopListener& operator=(const StopListener&) = delete;
};

}  // namespace pax

// AsyncManager (flax.training.checkpoints.AsyncManager): runs one checkpoint
// write at a time on a background thread. Starting a new write first waits
// for the previous one, and an error from a background write is rethrown by
// the next run(), wait_previous_save() or rethrow_if_failed(), never dropped.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace pax::train {

class AsyncManager {
 public:
  AsyncManager() = default;
  // Waits for the write in flight. A destructor cannot throw (it runs while
  // other errors unwind), so an error that nobody collected with
  // wait_previous_save() is printed to stderr, and a failure to join is
  // swallowed rather than ending the process.
  ~AsyncManager();
  AsyncManager(const AsyncManager&) = delete;
  AsyncManager& operator=(const AsyncManager&) = delete;

  // Blocks until the write in flight (if any) has finished and rethrows its
  // error, once.
  void wait_previous_save();
  // wait_previous_save(), then runs `work` on a new background thread.
  void run(std::function<void()> work);
  // Without blocking: when the write in flight has already failed, collects
  // it and rethrows its error; otherwise does nothing.
  void rethrow_if_failed();
  // True while a write started by run() has not been waited for.
  bool in_flight() const { return thread_.joinable(); }

 private:
  std::thread thread_;
  std::exception_ptr error_;         // written by the thread, read after join()
  std::atomic<bool> failed_{false};  // set by the thread after error_
  // Held by run() until thread_ holds the new thread, which waits for it
  // before its work starts: a write that destroys its manager then finds the
  // handle it must detach from, not an empty one about to be overwritten.
  std::mutex handing_over_;
};

}  // namespace pax::train

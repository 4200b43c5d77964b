// PrefetchInput: runs any input on a background thread that keeps up to
// `buffer_size` batches ready in a bounded queue, so that reading and
// assembling batches overlaps the training step.
//
// Exactness: each queued batch travels with the inner input's state() taken
// right after producing it, and state() here is the state of the last batch
// get_next() handed out — never of batches still waiting in the queue — so a
// checkpoint records the batches the trainer actually consumed, and a
// restored run (prefetching or not) continues with the next one. Errors
// (OutOfRange included) travel through the queue in order: the batches read
// before them come out first, then the error is rethrown with its type, and
// again on every later call until reset() / restore_state(). reset() and
// restore_state() stop the thread, drop the queue and start afresh;
// destruction stops the thread cleanly, even while it waits on a full queue.
// Both are exception-safe. When the inner input's reset() throws, the error
// propagates and the stream is left as it was: the queued batches come out,
// then the ones after them, and state() is unchanged (should the inner input
// fail to return to its position too, get_next() rethrows the reset's error
// until a reset() or restore_state() succeeds). When its restore_state()
// throws, the stream restarts from the last consumed batch.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "pax/data/base_input.h"

namespace pax::data {

class PrefetchInput : public BaseInput {
 public:
  PrefetchInput(std::unique_ptr<BaseInput> inner, int64_t buffer_size);
  ~PrefetchInput() override;

  Tree get_next() override;
  void reset() override;
  Tree state() const override;
  void restore_state(const Tree& state) override;
  std::optional<Tree> reshard_state(const Tree& host0_state) const override {
    return inner_->reshard_state(host0_state);
  }
  std::vector<std::string> ids_to_strings(const Array& ids, const Array& lengths = Array()) const override;
  int64_t vocab_size() const override { return inner_->vocab_size(); }

  const BaseInput& inner() const { return *inner_; }
  int64_t buffer_size() const { return buffer_size_; }

 private:
  struct Item {
    Tree batch;
    Tree state;                // the inner state after this batch
    std::exception_ptr error;  // set instead of batch / state
  };
  void start();   // drops the queue and any error, then launches the worker
  void launch();  // starts the worker thread, which appends to the queue
  void halt();    // stops and joins the worker; the queue is kept
  // After a failed inner reset: the inner input back after the last queued
  // batch and the worker relaunched (or, if that fails too, reset_error
  // rethrown by get_next() until a reset() / restore_state() succeeds).
  void resume(const std::exception_ptr& reset_error);
  void work();

  std::unique_ptr<BaseInput> inner_;
  const int64_t buffer_size_;
  Tree consumed_state_;       // state after the last batch handed out
  std::exception_ptr error_;  // the error handed out, rethrown until a reset

  std::mutex mu_;
  std::condition_variable cv_;  // queue changed, or stop requested
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace pax::data

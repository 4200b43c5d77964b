// PrefetchInput: the worker thread and its bounded queue.
#include "pax/data/prefetch.h"

#include "pax/backend/backend.h"

namespace pax::data {
namespace {

const BaseInput::HParams& checked_hparams(const std::unique_ptr<BaseInput>& inner) {
  PAX_CHECK(inner, "PrefetchInput: the inner input is null");
  return inner->base_hparams();
}

}  // namespace

PrefetchInput::PrefetchInput(std::unique_ptr<BaseInput> inner, int64_t buffer_size)
    : BaseInput(checked_hparams(inner)), inner_(std::move(inner)), buffer_size_(buffer_size) {
  PAX_CHECK(buffer_size_ >= 1, "PrefetchInput: buffer_size must be >= 1, got ", buffer_size_);
  consumed_state_ = inner_->state();
  start();
}

PrefetchInput::~PrefetchInput() { halt(); }

void PrefetchInput::start() {
  queue_.clear();
  error_ = nullptr;
  launch();
}

void PrefetchInput::launch() {
  stop_ = false;
  worker_ = std::thread([this] { work(); });
}

void PrefetchInput::halt() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void PrefetchInput::resume(const std::exception_ptr& reset_error) {
  // The worker had ended at an error (queued or handed out): nothing more to read.
  if (error_ || (!queue_.empty() && queue_.back().error)) return;
  try {
    // The worker may have read one batch past the queue when it was halted.
    inner_->restore_state(queue_.empty() ? consumed_state_ : queue_.back().state);
  } catch (...) {
    // The position of the inner input is unknown: fail until a reset or
    // restore_state succeeds rather than deliver batches out of order.
    queue_.clear();
    error_ = reset_error;
    return;
  }
  launch();
}

void PrefetchInput::work() {
  // One thread for the batch builders' parallel loops here: this thread runs
  // beside the training step, whose kernels already use every core.
  set_num_threads(1);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || int64_t(queue_.size()) < buffer_size_; });
      if (stop_) return;
    }
    Item item;
    try {
      item.batch = inner_->get_next();
      item.state = inner_->state();
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

Tree PrefetchInput::get_next() {
  if (error_) std::rethrow_exception(error_);
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  if (item.error) {
    error_ = item.error;
    std::rethrow_exception(error_);
  }
  consumed_state_ = std::move(item.state);
  return std::move(item.batch);
}

void PrefetchInput::reset() {
  halt();
  try {
    inner_->reset();
  } catch (...) {
    resume(std::current_exception());  // the stream goes on as if reset() had not been called
    throw;
  }
  consumed_state_ = inner_->state();
  start();
}

Tree PrefetchInput::state() const { return consumed_state_; }

void PrefetchInput::restore_state(const Tree& state) {
  halt();
  // The inner input validates the state; on error it is left as it was and
  // the stream restarts from the last consumed batch.
  try {
    inner_->restore_state(state);
  } catch (...) {
    try {
      inner_->restore_state(consumed_state_);
    } catch (...) {
      // Keep the first error; the stream goes on from wherever the inner input is.
    }
    start();
    throw;
  }
  consumed_state_ = inner_->state();
  start();
}

std::vector<std::string> PrefetchInput::ids_to_strings(const Array& ids, const Array& lengths) const {
  return inner_->ids_to_strings(ids, lengths);
}

}  // namespace pax::data

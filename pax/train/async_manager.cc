// AsyncManager: one background thread per write, joined before the next.
#include "pax/train/async_manager.h"

#include <cstdio>
#include <stdexcept>

namespace pax::train {

AsyncManager::~AsyncManager() {
  try {
    if (thread_.joinable()) thread_.join();
  } catch (...) {
    // join() fails only when the write itself destroys its manager (it would
    // wait for itself); the thread then runs to its end on its own.
    if (thread_.joinable()) thread_.detach();
    return;
  }
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "paxcc: an asynchronous checkpoint save failed and was never waited for: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "paxcc: an asynchronous checkpoint save failed and was never waited for\n");
    }
  }
}

void AsyncManager::wait_previous_save() {
  if (thread_.joinable()) thread_.join();
  failed_.store(false, std::memory_order_relaxed);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncManager::rethrow_if_failed() {
  if (failed_.load(std::memory_order_acquire)) wait_previous_save();
}

void AsyncManager::run(std::function<void()> work) {
  wait_previous_save();
  std::lock_guard handing_over(handing_over_);
  thread_ = std::thread([this, work = std::move(work)] {
    { std::lock_guard wait_for_the_handle(handing_over_); }
    try {
      work();
    } catch (...) {
      error_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  });
}

}  // namespace pax::train

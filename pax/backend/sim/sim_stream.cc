// The sim stream thread and its queue.
#include "pax/backend/sim/sim_stream.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "pax/backend/sim/sim_memory.h"
#include "pax/core/device.h"
#include "pax/core/error.h"

namespace pax::sim {
namespace {

thread_local bool t_on_stream = false;
std::atomic<uint64_t> g_host_waits{0};

class Stream {
 public:
  explicit Stream(int index) : index_(index), thread_([this] { loop(); }) {}

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
      ++queued_;
    }
    work_cv_.notify_one();
  }

  // Waits for the queued work, its failures dropped.
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ >= queued_; });
    error_ = nullptr;
  }

  uint64_t record() {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_;
  }

  void wait(uint64_t event) {
    g_host_waits.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ >= event; });
    if (error_) {
      std::exception_ptr e = std::exchange(error_, nullptr);
      std::rethrow_exception(e);
    }
  }

  // Drains the queue and ends the thread (at exit, before static objects
  // the tasks may use are destroyed).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    t_on_stream = true;
    const DefaultDeviceScope on_device(Device{DeviceKind::sim, index_});
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      const bool skip = error_ != nullptr;
      lock.unlock();
      if (!skip) {
        try {
          // Open while work is queued back to back; closed whenever the
          // stream is idle, which is when the host may look.
          if (!open_) set_accessible(open_ = true);
          task();
        } catch (...) {
          std::lock_guard<std::mutex> error_lock(mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
      lock.lock();
      if (queue_.empty() && open_) set_accessible(open_ = false);
      lock.unlock();
      task = nullptr;  // releases the buffers it held, before the host hears it ran
      lock.lock();
      ++done_;
      done_cv_.notify_all();
    }
  }

  const int index_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t queued_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  bool open_ = false;  // the device memory is accessible (stream thread only)
  std::thread thread_;
};

Stream& stream(int index) {
  PAX_CHECK(index == 0, "sim device ", index, " is not present; present: sim:0");
  // Leaked, and stopped at exit: the thread must not outlive what its tasks use.
  static Stream* s = [] {
    auto* created = new Stream(0);
    std::atexit([] { stream(0).stop(); });
    return created;
  }();
  return *s;
}

}  // namespace

// A thread that queued work waits for it when it ends. exit() runs the
// calling thread's thread_local destructors before static destructors, so
// the stream is idle before the libraries its tasks use (oneDNN's caches)
// are torn down, also when a program never read its last results.
struct DrainAtThreadExit {
  int index;
  ~DrainAtThreadExit() { stream(index).drain(); }
};

void enqueue(int index, std::function<void()> task) {
  if (t_on_stream) {
    task();
    return;
  }
  thread_local DrainAtThreadExit drain_at_exit{index};
  (void)drain_at_exit;
  stream(index).enqueue(std::move(task));
}

uint64_t record(int index) { return stream(index).record(); }

void wait(int index, uint64_t event) {
  if (t_on_stream) return;  // its own work has run
  stream(index).wait(event);
}

void synchronize(int index) { wait(index, record(index)); }

bool on_stream() { return t_on_stream; }

uint64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

}  // namespace pax::sim

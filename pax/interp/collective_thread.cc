// The communication thread (see collective_thread.h): a FIFO of started
// collectives, one thread that runs them, and the time figures.
#include "pax/interp/collective_thread.h"

#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "pax/core/env_switch.h"
#include "pax/core/stop.h"
#include "pax/interp/process_axis.h"

namespace pax {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Times {
  std::mutex mu;
  CommunicationTimes t;
};
Times& times() {
  static Times* t = new Times;  // never destroyed: the thread may outlive statics
  return *t;
}

void add_times(double communication, double waiting, int64_t collectives) {
  Times& t = times();
  std::lock_guard<std::mutex> lock(t.mu);
  t.t.communication_seconds += communication;
  t.t.waiting_seconds += waiting;
  t.t.collectives += collectives;
}

thread_local bool t_on_collective_thread = false;
// Collectives running on this thread now: one that runs inside another (a
// loop's fetch program runs its gathers) counts within the outer one.
thread_local int t_running = 0;

}  // namespace

class CollectiveThread {
 public:
  static CollectiveThread& get() {
    static CollectiveThread* thread = new CollectiveThread;  // never destroyed (see times())
    return *thread;
  }

  void submit(PendingCollectivePtr pending, std::function<std::vector<Array>()> run) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      std::thread([this] { work(); }).detach();
      started_ = true;
    }
    queue_.push_back({std::move(pending), std::move(run)});
    ++submitted_;
    cv_.notify_all();
  }

  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = submitted_;
    cv_.wait(lock, [&] { return finished_ >= target; });
  }

  // Runs `run` and hands its outputs or failure to `pending`; returns the
  // seconds it took.
  static double run_into(PendingCollective& pending, const std::function<std::vector<Array>()>& run) {
    const Clock::time_point start = Clock::now();
    std::vector<Array> outputs;
    std::exception_ptr error;
    ++t_running;
    try {
      outputs = run();
    } catch (...) {
      error = std::current_exception();
    }
    --t_running;
    const double seconds = seconds_since(start);
    if (t_running == 0) add_times(seconds, 0, 1);
    std::lock_guard<std::mutex> lock(pending.mu_);
    pending.outputs_ = std::move(outputs);
    pending.error_ = error;
    pending.finished_ = true;
    pending.cv_.notify_all();
    return seconds;
  }

 private:
  struct Job {
    PendingCollectivePtr pending;
    std::function<std::vector<Array>()> run;
  };

  void work() {
    // Stop signals are for the thread that waits on them, never this one.
    block_stop_signals_in_this_thread();
    // Short sleeps between polls (dist::ProcessGroup) end on time: no timer
    // slack beyond a microsecond.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    t_on_collective_thread = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty(); });
      Job job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      run_into(*job.pending, job.run);
      job = Job{};  // its inputs are released here, not under the lock
      lock.lock();
      ++finished_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool started_ = false;
  uint64_t submitted_ = 0, finished_ = 0;
};

std::vector<Array> PendingCollective::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_) {
    const Clock::time_point start = Clock::now();
    cv_.wait(lock, [&] { return finished_; });
    add_times(0, seconds_since(start), 0);
  }
  if (error_) std::rethrow_exception(error_);
  return outputs_;
}

bool PendingCollective::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::atomic<bool>& overlap_switch() {
  static std::atomic<bool> on = env_switch("PAX_OVERLAP_COLLECTIVES", true);
  return on;
}

bool overlap_collectives() { return overlap_switch().load(); }
void disable_overlap_collectives() { overlap_switch().store(false); }

namespace {
thread_local int64_t t_collective_position = -1;
}
int64_t current_collective_position() { return t_collective_position; }
CollectivePosition::CollectivePosition(int64_t position) : saved_(t_collective_position) {
  t_collective_position = position;
}
CollectivePosition::~CollectivePosition() { t_collective_position = saved_; }

bool on_collective_thread() { return t_on_collective_thread; }

PendingCollectivePtr start_collective(std::function<std::vector<Array>()> collective) {
  auto pending = std::make_shared<PendingCollective>();
  if (!overlap_collectives() || t_on_collective_thread || process_axis().size() == 1) {
    // The caller waits for all of it.
    const double seconds = CollectiveThread::run_into(*pending, collective);
    if (t_running == 0) add_times(0, seconds, 0);
  } else {
    CollectiveThread::get().submit(pending, std::move(collective));
  }
  return pending;
}

void finish_started_collectives() {
  if (!t_on_collective_thread) CollectiveThread::get().drain();
}

CommunicationTimes communication_times() {
  Times& t = times();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.t;
}

void reset_communication_times() {
  Times& t = times();
  std::lock_guard<std::mutex> lock(t.mu);
  t.t = CommunicationTimes{};
}

}  // namespace pax

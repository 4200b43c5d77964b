// The stop request and its signal thread (see stop.h).
#include "pax/core/stop.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

#include "pax/core/error.h"

namespace pax {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_listeners{0};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Threads of this process other than the caller (/proc/self/task), or 0
// where /proc cannot be read.
int other_threads() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  int count = 0;
  while (const dirent* e = readdir(dir)) count += e->d_name[0] != '.';
  closedir(dir);
  return count > 0 ? count - 1 : 0;
}

void* signal_thread(void*) {
  using Clock = std::chrono::steady_clock;
  const sigset_t set = stop_signals();
  std::optional<Clock::time_point> requested_at;  // when the first signal requested the stop
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    const Clock::time_point now = Clock::now();
    if (!requested_at && g_listeners.load() > 0) {
      request_stop();
      requested_at = now;
      continue;
    }
    // The same stop delivered again, not a second one (see stop.h).
    if (requested_at && std::chrono::duration<double>(now - *requested_at).count() < kStopRepeatSeconds) continue;
    // A second stop signal, or one that nothing would act on: its default
    // action, which ends the process.
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
  }
  return nullptr;
}

}  // namespace

void request_stop() noexcept { g_stop.store(true, std::memory_order_relaxed); }
bool stop_requested() noexcept { return g_stop.load(std::memory_order_relaxed); }
void clear_stop_request() noexcept { g_stop.store(false, std::memory_order_relaxed); }

StopListener::StopListener() noexcept { g_listeners.fetch_add(1); }
StopListener::~StopListener() { g_listeners.fetch_sub(1); }

void block_stop_signals_in_this_thread() noexcept {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int watch_stop_signals() {
  static std::mutex mu;
  static bool started = false;
  std::lock_guard<std::mutex> lock(mu);
  if (started) return 0;
  const int others = other_threads();
  const sigset_t set = stop_signals();
  int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  PAX_CHECK(rc == 0, "watch_stop_signals: pthread_sigmask failed: ", std::strerror(rc));
  pthread_t thread;
  rc = pthread_create(&thread, nullptr, signal_thread, nullptr);
  if (rc != 0) {
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    PAX_FAIL("watch_stop_signals: cannot start the signal thread: ", std::strerror(rc));
  }
  pthread_detach(thread);
  started = true;
  return others;
}

}  // namespace pax

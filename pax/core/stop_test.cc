// The stop request and the signal thread: a stop signal becomes a request
// while a StopListener exists and ends the process otherwise, a second one
// (after kStopRepeatSeconds) always ends it, and threads started later keep
// the signals blocked. Each
// signal case runs in a forked child, so the test process keeps its own
// signal handling.
#include "pax/core/stop.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace pax {
namespace {

// Polls `done` for up to ten seconds.
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Runs `child` in a forked process and returns its wait status (the child is
// killed if it has not ended within ten seconds).
template <class F>
int in_child(F child) {
  const pid_t pid = fork();
  if (pid == 0) {
    child();
    _exit(0);
  }
  int status = 0;
  if (!eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; })) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "the child did not end";
  }
  return status;
}

// Whether SIGTERM is blocked in a thread started now.
bool blocked_in_new_thread() {
  bool blocked = false;
  std::thread([&] {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    blocked = sigismember(&mask, SIGTERM) == 1;
  }).join();
  return blocked;
}

TEST(StopRequest, SetAndClear) {
  clear_stop_request();
  EXPECT_FALSE(stop_requested());
  request_stop();
  EXPECT_TRUE(stop_requested());
  clear_stop_request();
  EXPECT_FALSE(stop_requested());
}

TEST(StopSignals, ASignalWhileListeningRequestsAStop) {
  const int status = in_child([] {
    watch_stop_signals();
    if (!blocked_in_new_thread()) _exit(3);
    const StopListener listening;
    kill(getpid(), SIGTERM);
    _exit(eventually([] { return stop_requested(); }) ? 7 : 4);
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7) << "3: SIGTERM not blocked in a new thread; 4: no stop request";
}

// A second signal within kStopRepeatSeconds of the first is the same stop
// delivered twice (`timeout` signals the process and then its group): the
// process lives on and saves.
TEST(StopSignals, TheSameStopDeliveredTwiceIsOneRequest) {
  const int status = in_child([] {
    watch_stop_signals();
    const StopListener listening;
    kill(getpid(), SIGTERM);
    kill(getpid(), SIGTERM);
    if (!eventually([] { return stop_requested(); })) _exit(4);
    kill(getpid(), SIGTERM);  // a moment later: still the same stop
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    _exit(7);
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7) << "4: no stop request";
}

TEST(StopSignals, ASecondSignalEndsTheProcess) {
  const int status = in_child([] {
    watch_stop_signals();
    const StopListener listening;
    kill(getpid(), SIGINT);
    if (!eventually([] { return stop_requested(); })) _exit(4);
    std::this_thread::sleep_for(std::chrono::duration<double>(kStopRepeatSeconds + 0.1));
    kill(getpid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(StopSignals, WithoutAListenerASignalEndsTheProcess) {
  const int status = in_child([] {
    watch_stop_signals();
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace pax

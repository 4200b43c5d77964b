// Crash safety: a child process (this test binary re-executed with a filter
// on CheckpointCrash.Child) saves checkpoints in a loop and is killed with
// SIGKILL at random moments, 60 times, alternating the functional API
// (with overwrites and pruning) and an async CheckpointManager. The child
// reports each step it knows to be committed; the kill comes a random time
// after one to three such reports, so every round makes progress and most
// kills land inside a save. After every kill each listed checkpoint must
// restore and hold exactly the values saved for its step, and the latest step
// must be at least the last one reported committed.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/fs_util.h"

extern char** environ;

namespace pax::train {
namespace {

constexpr const char* kDirEnv = "PAX_CHECKPOINT_CRASH_DIR";
constexpr const char* kModeEnv = "PAX_CHECKPOINT_CRASH_MODE";
constexpr const char* kReady = "CHECKPOINT_CRASH_CHILD_READY";
constexpr const char* kDurable = "CHECKPOINT_CRASH_COMMITTED ";
constexpr int kRounds = 60;

// About 1.2 MB per step, every value a function of the step.
Tree crash_tree(int64_t step) {
  const uint32_t seed = uint32_t(step) * 101u;
  return Tree::dict(
      {{"w", testing::random_array({256, 1024}, DType::f32, seed)},
       {"b", testing::random_array({8192}, DType::bf16, seed + 1)},
       {"m", testing::random_array({4096}, DType::f64, seed + 2)},
       {"count", scalar(int64_t(step))},
       {"layers",
        Tree::list({Tree::dict({{"k", testing::random_array({64}, DType::i32, seed + 3, -9, 9)}}), Tree()})}});
}

std::string input_state(int64_t step) { return "{\"position\": " + std::to_string(step * 64) + "}"; }

int64_t next_step(const std::string& dir) {
  const std::vector<int64_t> steps = available_steps(dir);
  return steps.empty() ? 1 : steps.back() + 1;
}

void report_durable(int64_t step) {
  const std::string line = std::string(kDurable) + std::to_string(step) + "\n";
  if (::write(STDOUT_FILENO, line.data(), line.size()) != ssize_t(line.size())) std::abort();
}

// The child: only runs when the parent names a directory.
TEST(CheckpointCrash, Child) {
  const char* dir = std::getenv(kDirEnv);
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of CheckpointCrash.KilledAtRandomMoments";
  const std::string mode = std::getenv(kModeEnv) ? std::getenv(kModeEnv) : "";
  const std::string ready = std::string(kReady) + "\n";
  ASSERT_EQ(::write(STDOUT_FILENO, ready.data(), ready.size()), ssize_t(ready.size()));
  if (mode == "manager") {
    CheckpointManager mgr(dir, {.max_to_keep = 3, .keep_period = 10, .async = true});
    std::optional<int64_t> previous;
    for (int64_t step = next_step(dir);; ++step) {
      mgr.save(step, {.trees = {{kTargetItemName, crash_tree(step)}}, .json = {{"input", input_state(step)}}});
      // save() waited for the previous background write before starting this one.
      if (previous) report_durable(*previous);
      previous = step;
    }
  }
  for (int64_t step = next_step(dir);; ++step) {
    const Tree t = crash_tree(step);
    save_checkpoint(dir, t, step, {.keep = 2, .keep_every_n_steps = 7});
    report_durable(step);
    if (step % 3 == 0) save_checkpoint(dir, t, step, {.keep = 2, .overwrite = true, .keep_every_n_steps = 7});
  }
}

// The child's stdout, line by line; a silent or closed pipe is an error.
class ChildOutput {
 public:
  explicit ChildOutput(int fd) : fd_(fd) {}
  ~ChildOutput() { ::close(fd_); }
  std::string next_line() {
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0) throw std::runtime_error("the child printed nothing for 60 s");
      char buf[256];
      const ssize_t got = ::read(fd_, buf, sizeof(buf));
      if (got <= 0) throw std::runtime_error("the child exited early; its output ended with: " + buffer_);
      buffer_.append(buf, size_t(got));
    }
  }
  // The step of the next "committed" report (other lines are gtest's).
  int64_t next_committed() {
    for (;;) {
      const std::string line = next_line();
      if (line.rfind(kDurable, 0) == 0) return std::stoll(line.substr(std::strlen(kDurable)));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

// A running child: killed (SIGKILL) and reaped when it goes out of scope,
// so a failing assertion or exception in the parent never leaves it saving
// checkpoints forever.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) kill_and_reap();
  }
  pid_t pid() const { return pid_; }
  // SIGKILL, then waits for it; returns its wait status.
  int kill_and_reap() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }
  ChildOutput& output() { return *output_; }
  std::unique_ptr<ChildOutput> output_;

 private:
  pid_t pid_;
};

// Starts the child with its stdout on a pipe and returns once it is ready.
std::unique_ptr<Child> spawn_child(const std::string& dir, const std::string& mode) {
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  exe[n] = '\0';
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<std::string> env_strings{std::string(kDirEnv) + "=" + dir, std::string(kModeEnv) + "=" + mode};
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> env;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  std::string filter = "--gtest_filter=CheckpointCrash.Child";
  char* argv[] = {exe, filter.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe, &actions, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("posix_spawn failed");
  }
  auto child = std::make_unique<Child>(pid);
  child->output_ = std::make_unique<ChildOutput>(fds[0]);
  while (child->output().next_line() != kReady) {
  }
  return child;
}

// A parent that fails while its child runs (a throw here; a failed ASSERT
// returns the same way) still kills and reaps the child.
TEST(CheckpointCrash, ChildIsReapedWhenTheParentFails) {
  testing::TempDir dir;
  pid_t pid = -1;
  try {
    std::unique_ptr<Child> child = spawn_child(dir.path(), "functional");
    pid = child->pid();
    child->output().next_committed();
    throw std::runtime_error("the parent fails");
  } catch (const std::runtime_error&) {
  }
  ASSERT_GT(pid, 0);
  // Reaped: the pid no longer names a process (not even a zombie).
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(CheckpointCrash, KilledAtRandomMoments) {
  testing::TempDir dir;
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> reports(1, 3);
  std::uniform_int_distribution<int> delay_us(0, 30000);
  int64_t latest = 0;
  int interrupted = 0;  // rounds whose kill left a tmp_ directory: it hit a save or a deletion
  for (int round = 0; round < kRounds; ++round) {
    const std::string mode = round % 2 ? "manager" : "functional";
    std::unique_ptr<Child> child = spawn_child(dir.path(), mode);
    int64_t committed = 0;
    for (int r = reports(rng); r > 0; --r) committed = child->output().next_committed();
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    const int status = child->kill_and_reap();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "round " << round << ": the child ended on its own (status " << status << ")";

    for (const std::string& name : fs::list_dir(dir.path())) {
      if (name.rfind("tmp_", 0) == 0) {
        ++interrupted;
        break;
      }
    }
    const std::vector<int64_t> steps = available_steps(dir.path());
    ASSERT_FALSE(steps.empty()) << "round " << round << " (" << mode << "): no committed checkpoint";
    ASSERT_GE(steps.back(), std::max(latest, committed))
        << "round " << round << " (" << mode << "): the latest step went back";
    latest = steps.back();
    for (int64_t s : steps) {
      const std::string path = checkpoint_path_of(dir.path(), kDefaultCheckpointPrefix, s);
      const CheckpointItems got = read_checkpoint(path, {{kTargetItemName, crash_tree(s)}});
      ASSERT_TRUE(testing::trees_identical(got.trees.at(kTargetItemName), crash_tree(s)))
          << "round " << round << ", step " << s;
      if (got.json.count("input")) ASSERT_EQ(got.json.at("input"), input_state(s)) << "step " << s;
    }
    // What a restarted training loop does: restore the latest into its state.
    ASSERT_TRUE(testing::trees_identical(restore_checkpoint(dir.path(), crash_tree(0)), crash_tree(latest)));
  }
  // Where the kills landed depends on the machine's speed; that some hit a
  // save or a deletion shows the test exercised the protocol.
  EXPECT_GT(interrupted, 0);
  std::printf("%d rounds, latest step %lld, %d kills interrupted a save or deletion\n", kRounds,
              static_cast<long long>(latest), interrupted);
  // The next start clears what the kills left half-written.
  remove_tmp_checkpoints(dir.path(), kDefaultCheckpointPrefix);
  for (const std::string& name : fs::list_dir(dir.path())) {
    EXPECT_TRUE(parse_checkpoint_dir_name(name, kDefaultCheckpointPrefix).has_value()) << name;
    EXPECT_TRUE(is_committed_checkpoint(dir / name)) << name;
  }
}

}  // namespace
}  // namespace pax::train

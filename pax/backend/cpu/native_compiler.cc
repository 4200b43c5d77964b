// The system compiler, the on-disk cache of shared libraries and the
// compiler thread (see native_compiler.h).
#include "pax/backend/cpu/native_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "pax/backend/cpu/kernel_cache_file.h"
#include "pax/core/error.h"
#include "pax/core/stop.h"
#include "pax/core/trace.h"

extern char** environ;

namespace pax::cpu {
namespace {

namespace fs = std::filesystem;

constexpr double kCompileTimeoutSeconds = 900;

std::mutex& stats_mutex() {
  static std::mutex m;
  return m;
}
NativeBuildStats& stats() {
  static NativeBuildStats s;
  return s;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// `name` resolved through PATH (as is when it contains a slash); "" if absent.
std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  std::stringstream path(env("PATH"));
  std::string dir;
  while (std::getline(path, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// run_process's answer when the child's status is lost (SIGCHLD ignored):
// the caller judges by what the child wrote.
constexpr int kStatusUnknown = -2;

// The build in flight, so that the process's exit can end it: its compiler
// (killed, not left to run on as an orphan) and its temporary files.
std::atomic<pid_t> g_child{-1};
std::atomic<bool> g_exiting{false};
std::mutex g_temp_mutex;
std::vector<std::string> g_temp_files;

void end_build_in_flight() {
  g_exiting = true;
  const pid_t child = g_child.exchange(-1);
  if (child > 0) ::kill(child, SIGKILL);
  std::lock_guard<std::mutex> lock(g_temp_mutex);
  for (const std::string& f : g_temp_files) ::unlink(f.c_str());
}

void track_temp_files(std::vector<std::string> files) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(end_build_in_flight); });
  std::lock_guard<std::mutex> lock(g_temp_mutex);
  g_temp_files = std::move(files);
}

// Runs argv[0] (a path) with stdout and stderr to `log`, signals unblocked
// and at their defaults in the child. Returns its exit status, or -1 when it
// could not start, was killed, or ran past the timeout. The compiler runs at
// the training threads' priority: at a lower one it starved for a minute
// behind them on a 2-core machine while the loops ran interpreted (the main
// job took 4 s longer over its first 150 steps than at equal priority).
int run_process(const std::vector<std::string>& args, const std::string& log) {
  // Whatever stands at the log's name is replaced, never opened: the child's
  // open of a FIFO there would block it until the timeout.
  std::string why;
  if (!remove_kernel_cache_file(log, &why)) return -1;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK,
                                   0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, stops;
  sigemptyset(&none);
  sigemptyset(&stops);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&stops, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &stops);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return -1;
  g_child = pid;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      g_child = -1;
      // The process is exiting: its static objects may be going; touch none.
      while (g_exiting) std::this_thread::sleep_for(std::chrono::seconds(1));
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (done < 0 && errno != EINTR) {
      // ECHILD: SIGCHLD is ignored, so the child was reaped without a status.
      g_child = -1;
      return errno == ECHILD ? kStatusUnknown : -1;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kCompileTimeoutSeconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      g_child = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The temporary directory, or /tmp when $TMPDIR names none.
fs::path temp_dir() {
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  return ec ? fs::path("/tmp") : dir;
}

struct Compiler {
  std::string path;      // "" when none answered
  std::string identity;  // its path and the first line of `--version`
};

const Compiler& compiler() {
  static const Compiler c = [] {
    Compiler found;
    if (compile_mode() == CompileMode::off) return found;
    std::vector<std::string> tried;
    for (const std::string& candidate : {env("PAX_CXX"), env("CXX"), std::string("c++"), std::string("g++")}) {
      if (candidate.empty()) continue;
      tried.push_back(candidate);
      const std::string path = find_program(candidate);
      if (path.empty()) {
        if (candidate == env("PAX_CXX")) break;  // an explicit choice is not second-guessed
        continue;
      }
      const std::string log = (temp_dir() / ("paxcc-cxx-version-" + std::to_string(::getpid()))).string();
      const int status = run_process({path, "--version"}, log);
      std::string why;
      const std::string text = read_kernel_cache_file(log, 1 << 16, &why).value_or("");
      const std::string line = text.substr(0, text.find('\n'));
      remove_kernel_cache_file(log, &why);
      if ((status == 0 || status == kStatusUnknown) && !line.empty()) {
        found = {path, path + " | " + line};
        return found;
      }
      if (candidate == env("PAX_CXX")) break;
    }
    std::string list;
    for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
    notice_once("no-compiler", "no C++ compiler answered (tried " + list +
                                   "): fused loops run interpreted, which is slower; install g++ or set PAX_CXX");
    return found;
  }();
  return c;
}

// 128 bits of two independent 64-bit hashes (FNV-1a and a multiply-xorshift
// mix), as 32 hex digits. Hits are also checked against the stored source.
std::string hash_hex(const std::string& text) {
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0xff51afd7ed558ccdull;
    b ^= b >> 29;
  }
  b ^= text.size();
  b *= 0xc4ceb9fe1a85ec53ull;
  b ^= b >> 32;
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  return out;
}

// Temporary files of builds that a process did not live to finish.
void remove_stale_temp_files(const fs::path& dir) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tmp-", 0) != 0) continue;
    const auto written = e.last_write_time(ec);
    if (!ec && now - written > std::chrono::hours(1)) fs::remove(e.path(), ec);
  }
}

// The library at `so` when it loads and names `key`; else nullptr and, in
// *why, what went wrong (a predicate to follow the path).
std::shared_ptr<NativeLibrary> load(const fs::path& so, const std::string& key, std::string* why = nullptr) {
  void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();  // read once: it clears the message
    if (why) *why = std::string("cannot be loaded (dlopen: ") + (err ? err : "failed") + ")";
    return nullptr;
  }
  auto lib = std::make_shared<NativeLibrary>(handle, so.string());
  const char* stored = static_cast<const char*>(lib->symbol("pax_native_key"));
  if (!stored || key != stored) {
    if (why) *why = "is not this build (it names another key)";
    return nullptr;
  }
  return lib;
}

// An exclusive lock on `path` for the scope (none when it cannot be opened,
// or when something other than a regular file stands there).
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd_ >= 0 && (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// The format of the cache's entries, part of every key: entries of another
// format (a library without a checksum record) are never looked at.
constexpr const char* kCacheFormat = "paxcc kernel cache 2: <key>.so, <key>.cc, <key>.sum";

// A generated source larger than this is not one of this build's.
constexpr size_t kMaxSourceBytes = size_t(256) << 20;

// The files of a cache entry: the library, its source and its checksum record.
struct Entry {
  Entry(const fs::path& dir, const std::string& key)
      : so(dir / (key + ".so")), cc(dir / (key + ".cc")), record(dir / (key + ".sum")) {}
  fs::path so, cc, record;
};

// The entry's library when it is there, whole and this build. Otherwise
// nullptr, and in *damage what is wrong when something stands at the
// library's name ("" for a plain miss). Nothing that is not a regular file is
// opened, and the library is loaded only after its size and checksum match
// its record: dlopen of a truncated library dies of SIGBUS.
std::shared_ptr<NativeLibrary> look_up(const Entry& e, const std::string& key, const std::string& full_source,
                                       std::string* damage) {
  damage->clear();
  // Nothing there (or nothing that can be seen): a miss.
  struct stat st;
  if (::lstat(e.so.c_str(), &st) != 0) return nullptr;
  std::string why;
  const std::optional<std::string> source = read_kernel_cache_file(e.cc.string(), kMaxSourceBytes, &why);
  if (!source) {
    *damage = "has no source beside it (" + e.cc.string() + " " + why + ")";
    return nullptr;
  }
  if (*source != full_source) {
    *damage = "was built from another source (" + e.cc.string() + ")";
    return nullptr;
  }
  *damage = check_kernel_library(e.so.string(), e.record.string(), key);
  if (!damage->empty()) return nullptr;
  return load(e.so, key, damage);
}

// This process's own directory for builds that the cache cannot take: made
// on first use, emptied at exit but for the logs of failed builds, which
// notices name.
std::mutex g_fallback_mutex;
std::string g_fallback_dir;

void remove_fallback_dir() {
  // Not waited for: the exit must not hang on the compiler thread.
  std::unique_lock<std::mutex> lock(g_fallback_mutex, std::try_to_lock);
  if (!lock.owns_lock() || g_fallback_dir.empty()) return;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(g_fallback_dir, ec)) {
    if (e.path().extension() != ".log") fs::remove(e.path(), ec);
  }
  ::rmdir(g_fallback_dir.c_str());  // kept while it holds a log
}

// The fallback directory; "" and *why when none can be made.
std::string fallback_dir(std::string* why) {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  if (!g_fallback_dir.empty()) return g_fallback_dir;
  std::string path = (temp_dir() / "paxcc-kernels-XXXXXX").string();
  if (!::mkdtemp(path.data())) {
    *why = "cannot make a directory in " + temp_dir().string() + ": " + std::strerror(errno);
    return "";
  }
  g_fallback_dir = path;
  std::atexit(remove_fallback_dir);
  return path;
}

// How a build of an entry ended: its library, or why not.
struct BuildResult {
  std::shared_ptr<NativeLibrary> lib;
  std::string failure;        // "" on success
  bool cannot_write = false;  // the directory refused the files
  bool log_kept = false;      // the compiler's output is in <dir>/<key>.log
  double seconds = 0;         // spent in the compiler
};

// Compiles `full_source` with `args` into the entry `key` of `dir`. The
// library, its source and then its record are written under temporary
// names and renamed into place, the record last: a library without a record
// that matches it is never loaded.
BuildResult build_entry(const fs::path& dir, const std::string& key, std::vector<std::string> args,
                        const std::string& full_source) {
  BuildResult r;
  const Entry entry(dir, key);
  const std::string tag = std::to_string(::getpid()) + "-" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) % 100000);
  const fs::path tmp_cc = dir / ("tmp-" + key + "-" + tag + ".cc");
  const fs::path tmp_so = dir / ("tmp-" + key + "-" + tag + ".so");
  const fs::path tmp_record = dir / ("tmp-" + key + "-" + tag + ".sum");
  const fs::path log = dir / (key + ".log");
  std::string why;
  auto fail = [&](const std::string& failure) {
    for (const fs::path& p : {tmp_cc, tmp_so, tmp_record}) remove_kernel_cache_file(p.string(), &why);
    r.failure = failure;
    return r;
  };
  // Removed by the process's exit only while this build is in flight (the
  // log too: it is the output of a compiler that the exit kills).
  track_temp_files({tmp_cc.string(), tmp_so.string(), tmp_record.string(), log.string()});
  struct Untrack {
    ~Untrack() { track_temp_files({}); }
  } untrack;
  if (!write_kernel_cache_file(tmp_cc.string(), full_source, &why) ||
      !remove_kernel_cache_file(tmp_so.string(), &why)) {
    r.cannot_write = true;
    return fail(why);
  }
  args.insert(args.end(), {"-o", tmp_so.string(), tmp_cc.string()});
  const auto start = std::chrono::steady_clock::now();
  const int status = run_process(args, log.string());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // With the status lost, a written library counts (its record and its key
  // are checked as for any other).
  const std::optional<std::string> library = read_kernel_cache_file(tmp_so.string(), size_t(1) << 30, &why);
  const bool wrote = status == kStatusUnknown && library && !library->empty();
  if (status != 0 && !wrote) {
    r.log_kept = true;
    return fail(status < 0 ? "the compiler was killed or timed out" : "the compiler failed");
  }
  if (!library) {
    r.log_kept = true;
    return fail("the compiler's output " + tmp_so.string() + " " + why);
  }
  if (!write_kernel_cache_file(tmp_record.string(), kernel_library_record(key, *library), &why)) {
    r.cannot_write = true;
    return fail(why);
  }
  std::error_code ec;
  for (const auto& [from, to] : {std::pair{tmp_so, entry.so}, {tmp_cc, entry.cc}, {tmp_record, entry.record}}) {
    fs::rename(from, to, ec);
    if (ec) {
      r.cannot_write = true;
      return fail("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
    }
  }
  remove_kernel_cache_file(log.string(), &why);
  // Checked as a hit is: the files in place are the ones loaded.
  r.lib = look_up(entry, key, full_source, &why);
  if (!r.lib) r.failure = "the library just built " + why;
  return r;
}

// The compiler thread: a queue of jobs run in order.
class JobQueue {
 public:
  void push(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ++queued_;
    if (!started_) {
      // Detached: a build in flight must not hold up the process's exit.
      try {
        std::thread([this] { work(); }).detach();
        started_ = true;
      } catch (const std::system_error&) {
        // No thread to be had (a process limit): this job is dropped (its
        // loops run interpreted) and the next push tries again.
        jobs_.pop_back();
        --queued_;
        notice_once("no-thread", "cannot start the compiler thread: fused loops run interpreted");
        return;
      }
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = queued_;
    cv_.wait(lock, [&] { return finished_ >= target; });
  }

 private:
  void work() {
    // Stop signals are for the thread that waits on them, never this one.
    block_stop_signals_in_this_thread();
    trace::set_thread_name("compile");
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      try {
        const trace::Span span("compile", "background compile");
        job();
      } catch (const std::exception& e) {
        notice_once(std::string("job:") + e.what(), std::string("a compile job failed: ") + e.what());
      }
      lock.lock();
      ++finished_;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  uint64_t queued_ = 0, finished_ = 0;
  bool started_ = false;
};

JobQueue& queue() {
  static JobQueue* q = new JobQueue;  // never destroyed: its thread may outlive main
  return *q;
}

}  // namespace

NativeLibrary::~NativeLibrary() {
  if (handle_) ::dlclose(handle_);
}

void* NativeLibrary::symbol(const std::string& name) const { return ::dlsym(handle_, name.c_str()); }

CompileMode compile_mode() {
  const std::string mode = env("PAX_COMPILE");
  if (mode.empty() || mode == "async") return CompileMode::async;
  if (mode == "sync") return CompileMode::sync;
  if (mode == "off") return CompileMode::off;
  PAX_FAIL("PAX_COMPILE='", mode, "' is not a compile mode; valid: async (the default), sync, off");
}

bool native_compiler_available() { return compile_mode() != CompileMode::off && !compiler().path.empty(); }

std::string native_cache_dir() {
  std::string dir = env("PAX_CACHE_DIR");
  if (dir.empty()) {
    const std::string xdg = env("XDG_CACHE_HOME"), home = env("HOME");
    if (!xdg.empty()) dir = xdg + "/paxcc/kernels";
    else if (!home.empty()) dir = home + "/.cache/paxcc/kernels";
    else dir = (temp_dir() / "paxcc-kernels").string();
  }
  return dir;
}

std::shared_ptr<NativeLibrary> build_native(const std::string& source, const std::vector<std::string>& flags) {
  const Compiler& cxx = compiler();
  if (cxx.path.empty()) return nullptr;
  std::vector<std::string> args{cxx.path, "-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-w"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::string key_text = std::string(kCacheFormat) + "\n" + cxx.identity;
  for (const std::string& a : args) key_text += "\n" + a;
  const std::string key = hash_hex(key_text + "\n" + source);
  // The library names its key, so a file that is not this build is never used.
  const std::string full_source = source + "\nextern \"C\" const char pax_native_key[] = \"" + key + "\";\n";
  auto count = [](int NativeBuildStats::*field) {
    std::lock_guard<std::mutex> guard(stats_mutex());
    ++(stats().*field);
  };

  const fs::path dir = native_cache_dir();
  std::string unwritable = kernel_cache_dir_unwritable(dir.string());
  if (unwritable.empty()) {
    static std::once_flag swept;
    std::call_once(swept, [&] { remove_stale_temp_files(dir); });
  }
  const Entry entry(dir, key);
  std::string damage;
  // Hits load from a cache that cannot be written too.
  if (auto lib = look_up(entry, key, full_source, &damage)) {
    count(&NativeBuildStats::cache_hits);
    return lib;
  }
  // Damage is judged under the lock: another process's build may be between
  // its renames, and holds the lock until it is done.
  std::optional<FileLock> lock;
  if (unwritable.empty()) {
    lock.emplace(dir / (key + ".lock"));
    if (auto lib = look_up(entry, key, full_source, &damage)) {
      count(&NativeBuildStats::cache_hits);
      return lib;
    }
  }
  bool in_cache = unwritable.empty();
  if (!damage.empty()) {
    count(&NativeBuildStats::damaged);
    std::string why = "the cache is not writable";
    for (const fs::path& p : {entry.so, entry.cc, entry.record}) {
      in_cache = in_cache && remove_kernel_cache_file(p.string(), &why);
    }
    notice_once("damaged:" + entry.so.string(),
                "the kernel cache entry " + entry.so.string() + " " + damage +
                    (in_cache ? ": removed, and rebuilt"
                              : ": it cannot be removed (" + why + "), so it is rebuilt outside the cache"));
  }
  fs::path build_dir = dir;
  for (int attempt = 0;; ++attempt) {
    if (!in_cache) {
      std::string why;
      const std::string fallback = fallback_dir(&why);
      if (!unwritable.empty()) {
        notice_once(
            "unwritable:" + dir.string(),
            "the kernel cache " + dir.string() + " is not writable (" + unwritable + ")" +
                (fallback.empty()
                     ? " and no other directory can take the build (" + why + "): fused loops run interpreted"
                     : ": generated code is built in " + fallback + " for this run only, and build logs go there"));
      }
      if (fallback.empty()) {
        count(&NativeBuildStats::failed);
        if (unwritable.empty()) {
          notice_once("no-build-dir", "no directory can take generated code (" + why + "): it runs interpreted");
        }
        return nullptr;
      }
      build_dir = fallback;
    }
    BuildResult r = build_entry(build_dir, key, args, full_source);
    if (r.lib) {
      std::lock_guard<std::mutex> guard(stats_mutex());
      ++stats().compiled;
      stats().compile_seconds += r.seconds;
      return r.lib;
    }
    if (r.cannot_write && in_cache && attempt == 0) {
      // Full, read-only or otherwise refusing: built elsewhere for this run.
      in_cache = false;
      unwritable = r.failure;
      continue;
    }
    count(&NativeBuildStats::failed);
    const std::string log = r.log_kept ? "; log " + (build_dir / (key + ".log")).string() : "";
    notice_once("build:" + key, "building generated code failed (" + r.failure + log + "): that code runs interpreted");
    return nullptr;
  }
}

void run_compile_job(std::function<void()> job) {
  if (compile_mode() != CompileMode::async) return job();
  queue().push(std::move(job));
}

void wait_for_compile_jobs() { queue().wait(); }

NativeBuildStats native_build_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex());
  return stats();
}

std::string native_build_summary() {
  const NativeBuildStats s = native_build_stats();
  if (s.compiled + s.cache_hits + s.failed == 0) return "";
  char line[512];
  std::snprintf(
      line, sizeof(line), "generated code: %d source%s compiled in %.1f s, %d loaded from the cache%s%s in %s",
      s.compiled, s.compiled == 1 ? "" : "s", s.compile_seconds, s.cache_hits,
      s.failed ? (", " + std::to_string(s.failed) + " failed").c_str() : "",
      s.damaged
          ? (", " + std::to_string(s.damaged) + " damaged cache entr" + (s.damaged == 1 ? "y" : "ies") + " rebuilt")
                .c_str()
          : "",
      native_cache_dir().c_str());
  return line;
}

}  // namespace pax::cpu

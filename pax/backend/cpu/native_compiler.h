// Building generated C++ into shared libraries with the system compiler,
// caching them on disk and loading them (dlopen), as PyTorch Inductor's C++
// code cache does.
//
// A library is keyed by a hash of its source, the compiler's identity (its
// path and `--version` line) and the flags: a later run, or another process,
// that asks for the same source loads the cached file and compiles nothing.
// The cache lives in $PAX_CACHE_DIR (default $XDG_CACHE_HOME/paxcc/kernels,
// or ~/.cache/paxcc/kernels); each entry is <key>.so beside <key>.cc, its
// source, which a hit must match byte for byte, and <key>.sum, the record of
// the library's size and checksum, which it must match before it is loaded
// (kernel_cache_file.h). Files are written under temporary names and renamed
// into place, the record last; processes that build the same entry at once
// wait on a lock file, so one compiles and the others load its result.
//
// The cache cannot hurt a run. Only regular files are opened there (never a
// FIFO, a device, a directory or a symbolic link). An entry that is damaged
// (truncated, overwritten, without its record, not a regular file) is named
// in one notice, removed and rebuilt. A cache that cannot be written gives
// one notice naming it, and builds go to a directory of the process's own
// under $TMPDIR, where the build logs go too; when no build can be made,
// loops run interpreted.
//
// PAX_COMPILE chooses when generated code is built:
//   async (default)  on a background thread; callers go on meanwhile (their
//                    loops run interpreted until the code is loaded)
//   sync             at once, before the caller goes on (tests, benchmarks)
//   off              never (everything runs interpreted)
// The compiler is $PAX_CXX, else $CXX, else c++ or g++ from PATH. When none
// answers, or a build fails, one notice goes to stderr and callers keep
// their interpreted path.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pax::cpu {

// A loaded shared library; unloaded when the last reference goes.
class NativeLibrary {
 public:
  NativeLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~NativeLibrary();
  NativeLibrary(const NativeLibrary&) = delete;
  NativeLibrary& operator=(const NativeLibrary&) = delete;
  // The address of an exported symbol, or nullptr.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_;
  std::string path_;
};

enum class CompileMode { async, sync, off };

// PAX_COMPILE (pax::Error for a value other than async, sync or off).
CompileMode compile_mode();

// Whether generated code can be built: PAX_COMPILE is not off and a compiler
// answered (asked once; the notice is printed then when none did).
bool native_compiler_available();

// The library of `source` compiled with `flags` (beside -O2 -fPIC -shared),
// from the cache or built now on this thread; nullptr, with one notice to
// stderr, when the build or the load fails.
std::shared_ptr<NativeLibrary> build_native(const std::string& source, const std::vector<std::string>& flags);

// Runs `job` on the compiler thread, after the jobs queued before it
// (PAX_COMPILE=async), or now on this thread (sync).
void run_compile_job(std::function<void()> job);

// Waits until every job queued so far has run.
void wait_for_compile_jobs();

struct NativeBuildStats {
  int compiled = 0;            // sources compiled by this process
  int cache_hits = 0;          // sources loaded from the cache
  int failed = 0;              // builds or loads that failed
  int damaged = 0;             // damaged cache entries found (and rebuilt)
  double compile_seconds = 0;  // spent in the compiler
};
NativeBuildStats native_build_stats();

// The cache directory in use (created on first build).
std::string native_cache_dir();

// One line on this process's builds for a run's log ("generated code: 1
// source compiled in 4.2 s, 2 loaded from the cache in <dir>"); "" when
// nothing was built or loaded.
std::string native_build_summary();

}  // namespace pax::cpu

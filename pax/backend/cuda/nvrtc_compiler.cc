// NVRTC compiles, the CUBIN cache, the compiler threads and the loader (see
// nvrtc_compiler.h).
#include "pax/backend/cuda/nvrtc_compiler.h"

#include <nvrtc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "pax/backend/cpu/kernel_cache_file.h"
#include "pax/backend/cpu/native_compiler.h"
#include "pax/backend/cuda/cublaslt_gemm.h"
#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/core/error.h"
#include "pax/core/stop.h"

namespace pax::cuda {
namespace {

// NVRTC, loaded with dlopen at the first compile: linked, its 100 MB would
// be mapped into every program that never compiles a kernel.
struct Nvrtc {
  decltype(&::nvrtcVersion) version;
  decltype(&::nvrtcCreateProgram) create;
  decltype(&::nvrtcCompileProgram) compile;
  decltype(&::nvrtcGetProgramLogSize) log_size;
  decltype(&::nvrtcGetProgramLog) log;
  decltype(&::nvrtcGetCUBINSize) cubin_size;
  decltype(&::nvrtcGetCUBIN) cubin;
  decltype(&::nvrtcDestroyProgram) destroy;
  decltype(&::nvrtcGetErrorString) error_string;
};

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    const std::string library = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
    const std::vector<void*> f = load_symbols(
        library,
        {"nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
         "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram", "nvrtcGetErrorString"},
        nullptr, "generated kernels");
    Nvrtc out;
    out.version = reinterpret_cast<decltype(out.version)>(f[0]);
    out.create = reinterpret_cast<decltype(out.create)>(f[1]);
    out.compile = reinterpret_cast<decltype(out.compile)>(f[2]);
    out.log_size = reinterpret_cast<decltype(out.log_size)>(f[3]);
    out.log = reinterpret_cast<decltype(out.log)>(f[4]);
    out.cubin_size = reinterpret_cast<decltype(out.cubin_size)>(f[5]);
    out.cubin = reinterpret_cast<decltype(out.cubin)>(f[6]);
    out.destroy = reinterpret_cast<decltype(out.destroy)>(f[7]);
    out.error_string = reinterpret_cast<decltype(out.error_string)>(f[8]);
    return out;
  }();
  return n;
}

namespace fs = std::filesystem;

// Part of every key: entries of another layout are never looked at.
constexpr const char* kCacheFormat = "paxcc cubin cache 1: <key>.cubin, <key>.cu, <key>.cubin.sum";
// Larger files are not ones this code wrote.
constexpr size_t kMaxCubinBytes = size_t(256) << 20;
constexpr size_t kMaxSourceBytes = size_t(256) << 20;
// Lines of the source an error quotes.
constexpr int kQuotedLines = 12;

std::mutex& stats_mutex() {
  static std::mutex m;
  return m;
}
NvrtcStats& stats() {
  static NvrtcStats s;
  return s;
}
void count(int NvrtcStats::*field) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  ++(stats().*field);
}

void check_nvrtc(nvrtcResult r, const char* call) {
  PAX_CHECK(r == NVRTC_SUCCESS, "NVRTC: ", call, " failed: ", nvrtc().error_string(r));
}

// The first lines of a source, for an error.
std::string head(const std::string& source) {
  size_t at = 0;
  for (int line = 0; line < kQuotedLines && at != std::string::npos; ++line) {
    at = source.find('\n', at);
    if (at != std::string::npos) ++at;
  }
  return at == std::string::npos ? source : source.substr(0, at) + "...\n";
}

// The CUBIN of `source` from NVRTC.
std::string nvrtc_compile(const std::string& source, int arch, const std::vector<std::string>& options) {
  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtc().create(&prog, source.c_str(), "pax_kernel.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtc().destroy(p); }
  } destroy{&prog};
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const nvrtcResult r = nvrtc().compile(prog, int(opts.size()), opts.data());
  size_t log_size = 0;
  std::string log;
  if (nvrtc().log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (nvrtc().log(prog, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    PAX_FAIL("NVRTC cannot compile a generated kernel for sm_", arch, " (", nvrtc().error_string(r), "):\n", log,
             "\nits source begins:\n", head(source));
  }
  size_t size = 0;
  check_nvrtc(nvrtc().cubin_size(prog, &size), "nvrtcGetCUBINSize");
  PAX_CHECK(size > 0, "NVRTC compiled a kernel for sm_", arch, " into an empty CUBIN");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtc().cubin(prog, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

// 128 bits of two independent 64-bit checksums, as 32 hex digits. Hits are
// also checked against the stored options and source.
std::string hash_hex(const std::string& text) {
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", (unsigned long long)cpu::kernel_cache_checksum(text),
                (unsigned long long)cpu::kernel_cache_checksum("cubin key\n" + text));
  return out;
}

// The files of a cache entry.
struct Entry {
  Entry(const fs::path& dir, const std::string& key)
      : cubin(dir / (key + ".cubin")), cu(dir / (key + ".cu")), record(dir / (key + ".cubin.sum")) {}
  fs::path cubin, cu, record;
};

// The entry's CUBIN when it is there, whole and this build's; otherwise
// nullopt and, in *damage, what is wrong when something stands at its name
// ("" for a plain miss).
std::optional<std::string> look_up(const Entry& e, const std::string& key, const std::string& text,
                                   std::string* damage) {
  damage->clear();
  struct stat st;
  if (::lstat(e.cubin.c_str(), &st) != 0) return std::nullopt;
  std::string why;
  const std::optional<std::string> stored = cpu::read_kernel_cache_file(e.cu.string(), kMaxSourceBytes, &why);
  if (!stored) {
    *damage = "has no source beside it (" + e.cu.string() + " " + why + ")";
    return std::nullopt;
  }
  if (*stored != text) {
    *damage = "was built from another source (" + e.cu.string() + ")";
    return std::nullopt;
  }
  *damage = cpu::check_kernel_library(e.cubin.string(), e.record.string(), key);
  if (!damage->empty()) return std::nullopt;
  std::optional<std::string> bytes = cpu::read_kernel_cache_file(e.cubin.string(), kMaxCubinBytes, &why);
  const std::optional<std::string> record = cpu::read_kernel_cache_file(e.record.string(), 4096, &why);
  if (!bytes || !record || *record != cpu::kernel_library_record(key, *bytes)) {
    *damage = "changed while it was read";
    return std::nullopt;
  }
  return bytes;
}

// Writes the entry: each file under a temporary name, renamed into place,
// the record last (a CUBIN without a record that matches it is never read).
// "" when done, else why not.
std::string store(const fs::path& dir, const Entry& e, const std::string& key, const std::string& text,
                  const std::string& cubin) {
  const std::string tag = std::to_string(::getpid()) + "-" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) % 1000000);
  const fs::path tmp_cubin = dir / ("tmp-" + key + "-" + tag + ".cubin");
  const fs::path tmp_cu = dir / ("tmp-" + key + "-" + tag + ".cu");
  const fs::path tmp_record = dir / ("tmp-" + key + "-" + tag + ".cubin.sum");
  std::string why;
  auto fail = [&](const std::string& failure) {
    for (const fs::path& p : {tmp_cubin, tmp_cu, tmp_record}) cpu::remove_kernel_cache_file(p.string(), &why);
    return failure;
  };
  if (!cpu::write_kernel_cache_file(tmp_cubin.string(), cubin, &why) ||
      !cpu::write_kernel_cache_file(tmp_cu.string(), text, &why) ||
      !cpu::write_kernel_cache_file(tmp_record.string(), cpu::kernel_library_record(key, cubin), &why)) {
    return fail(why);
  }
  std::error_code ec;
  for (const auto& [from, to] : {std::pair{tmp_cubin, e.cubin}, {tmp_cu, e.cu}, {tmp_record, e.record}}) {
    fs::rename(from, to, ec);
    if (ec) return fail("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
  }
  return "";
}

// The compile itself, through the disk cache.
CubinPtr build(const std::string& source, int arch, const std::vector<std::string>& options, const std::string& key,
               const std::string& text) {
  auto cubin = std::make_shared<Cubin>();
  cubin->arch = arch;
  cubin->key = key;
  const fs::path dir = cpu::native_cache_dir();
  const std::string cannot_write = cpu::kernel_cache_dir_unwritable(dir.string());
  const Entry entry(dir, key);
  std::string damage;
  if (std::optional<std::string> bytes = look_up(entry, key, text, &damage)) {
    count(&NvrtcStats::cache_hits);
    cubin->bytes = std::move(*bytes);
    cubin->from_cache = true;
    return cubin;
  }
  if (!damage.empty()) {
    count(&NvrtcStats::damaged);
    std::string why;
    bool removed = cannot_write.empty();
    for (const fs::path& p : {entry.cubin, entry.cu, entry.record}) {
      removed = removed && cpu::remove_kernel_cache_file(p.string(), &why);
    }
    cpu::notice_once(
        "damaged:" + entry.cubin.string(),
        "the kernel cache entry " + entry.cubin.string() + " " + damage +
            (removed ? ": removed, and rebuilt" : ": it cannot be removed, so the kernel is compiled anew"));
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    cubin->bytes = nvrtc_compile(source, arch, options);
  } catch (...) {
    count(&NvrtcStats::failed);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex());
    ++stats().compiled;
    stats().compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const std::string failure = cannot_write.empty() ? store(dir, entry, key, text, cubin->bytes) : cannot_write;
  if (!failure.empty()) {
    cpu::notice_once("unwritable:" + dir.string(), "the kernel cache " + dir.string() +
                                                       " does not take CUDA kernels (" + failure +
                                                       "): they are compiled for this run only");
  }
  return cubin;
}

// Compiles in flight, by key: a second request for one waits on the first.
std::mutex g_inflight_mutex;
std::map<std::string, std::shared_future<CubinPtr>>& inflight() {
  static auto* m = new std::map<std::string, std::shared_future<CubinPtr>>;  // compiler threads may outlive main
  return *m;
}

// The compiler threads: jobs run in the order they came, on up to four
// threads (NVRTC compiles are independent of each other).
class CompilePool {
 public:
  void push(std::function<void()> job) {
    std::unique_lock<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    const size_t want = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
    if (threads_ < want && jobs_.size() > idle_) {
      try {
        std::thread([this] { work(); }).detach();  // a compile in flight must not hold up the exit
        ++threads_;
      } catch (const std::system_error&) {
        // No thread to be had (a process limit): without any, the job runs
        // on the caller's thread.
        if (threads_ == 0) {
          std::function<void()> now = std::move(jobs_.back());
          jobs_.pop_back();
          lock.unlock();
          now();
          return;
        }
      }
    }
    cv_.notify_one();
  }

 private:
  void work() {
    block_stop_signals_in_this_thread();
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      --idle_;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();  // errors go to the job's future
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t threads_ = 0, idle_ = 0;
};

CompilePool& pool() {
  static auto* p = new CompilePool;  // never destroyed: its threads may outlive main
  return *p;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtc().version(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_options(int arch) {
  PAX_CHECK(arch >= 10 && arch < 1000, "NVRTC: sm_", arch, " is not an architecture (90 for sm_90)");
  return {"--gpu-architecture=sm_" + std::to_string(arch),
          "-default-device",
          "--std=c++17",
          "--fmad=false",
          "--ftz=false",
          "--prec-div=true",
          "--prec-sqrt=true"};
}

CubinPtr compile_cubin(const std::string& source, int arch) {
  const std::vector<std::string> options = nvrtc_options(arch);
  // The text an entry is keyed by and checked against: NVRTC's version, the
  // options and the source.
  std::string text = std::string("// ") + kCacheFormat + "\n// nvrtc " + nvrtc_version() + "\n//";
  for (const std::string& o : options) text += " " + o;
  text += "\n" + source;
  const std::string key = hash_hex(text);
  std::promise<CubinPtr> promise;
  {
    std::unique_lock<std::mutex> lock(g_inflight_mutex);
    if (auto it = inflight().find(key); it != inflight().end()) {
      std::shared_future<CubinPtr> running = it->second;
      lock.unlock();
      return running.get();
    }
    inflight().emplace(key, promise.get_future().share());
  }
  auto done = [&] {
    std::lock_guard<std::mutex> lock(g_inflight_mutex);
    inflight().erase(key);
  };
  try {
    CubinPtr cubin = build(source, arch, options, key, text);
    promise.set_value(cubin);
    done();
    return cubin;
  } catch (...) {
    promise.set_exception(std::current_exception());
    done();
    throw;
  }
}

bool CubinFuture::ready() const {
  return f_.valid() && f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CubinFuture compile_cubin_async(std::string source, int arch) {
  auto promise = std::make_shared<std::promise<CubinPtr>>();
  CubinFuture future(promise->get_future().share());
  auto job = [promise, source = std::move(source), arch] {
    try {
      promise->set_value(compile_cubin(source, arch));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  };
  if (cpu::compile_mode() == cpu::CompileMode::async) {
    pool().push(std::move(job));
  } else {
    job();
  }
  return future;
}

NvrtcStats nvrtc_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex());
  return stats();
}

CudaKernelLibrary::CudaKernelLibrary(const Cubin& cubin) {
  PAX_CHECK(!cubin.bytes.empty(), "CUDA kernels: an empty CUBIN cannot be loaded");
  PAX_CUDA_CHECK(cudaLibraryLoadData(&library_, cubin.bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
}

CudaKernelLibrary::~CudaKernelLibrary() {
  if (library_) cudaLibraryUnload(library_);
}

cudaKernel_t CudaKernelLibrary::kernel(const std::string& name) const {
  cudaKernel_t fn = nullptr;
  PAX_CUDA_CHECK(cudaLibraryGetKernel(&fn, library_, name.c_str()));
  return fn;
}

void launch_kernel(cudaKernel_t fn, const CudaKernelSource& kernel, std::span<void* const> pointers,
                   cudaStream_t stream) {
  PAX_CHECK(int(pointers.size()) + 1 == kernel.num_params, "CUDA kernels: ", kernel.name, " takes ",
            kernel.num_params - 1, " pointers, got ", pointers.size());
  PAX_CHECK(kernel.grid_blocks >= 1 && kernel.grid_blocks <= INT32_MAX, "CUDA kernels: ", kernel.name, " needs ",
            kernel.grid_blocks, " blocks (1 to 2147483647)");
  std::vector<void*> values(pointers.begin(), pointers.end());
  long long size = kernel.size;
  std::vector<void*> args;
  for (void*& v : values) args.push_back(&v);
  args.push_back(&size);
  // A cudaKernel_t stands for the kernel where the runtime takes a function.
  PAX_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(fn), dim3(unsigned(kernel.grid_blocks)),
                                  dim3(unsigned(kernel.block_threads)), args.data(), 0, stream));
}

}  // namespace pax::cuda

// Generated kernels (cuda_kernels_source.h) compiled by NVRTC to CUBIN for
// the device's own architecture, cached on disk, compiled in the background,
// and loaded with the runtime's library API.
//
// NVRTC needs no GPU and no driver: every kernel compiles on any machine
// with the toolkit's libnvrtc, which is how the tests check them without a
// device. The options (nvrtc_options) make the device compute what the CPU
// computes: --fmad=false (no a * b + c contracted into an FMA, the
// -ffp-contract=off of the CPU's build), IEEE division and square root,
// denormals kept. The kernels include no header (the dialect's prelude
// defines its bf16 conversions), so nothing depends on where the toolkit's
// headers are at run time.
//
// The disk cache shares the CPU's kernel cache directory
// (cpu::native_cache_dir(): $PAX_CACHE_DIR, else
// $XDG_CACHE_HOME/paxcc/kernels or ~/.cache/paxcc/kernels) and its file
// handling (cpu/kernel_cache_file.h). An entry is keyed by its source, the
// architecture, the options and NVRTC's version: <key>.cubin, <key>.cu (the
// options and the source, which a hit must match byte for byte) and
// <key>.cubin.sum (the CUBIN's size and checksum, written last). A damaged
// entry is named in one notice and rebuilt; a cache that cannot be written
// gives one notice, and kernels are then compiled for the run only.
//
// PAX_COMPILE chooses when compile_cubin_async compiles: async (default) on
// a pool of compiler threads, so that a program starts before its kernels
// are built; sync and off at once (the device has no interpreter to run a
// loop meanwhile, so off cannot leave kernels unbuilt).
#pragma once

#include <cuda_runtime_api.h>

#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pax::cuda {

struct CudaKernelSource;  // cuda_kernels_source.h

// NVRTC's version, "13.0".
std::string nvrtc_version();

// The options of a compile for sm_<arch> (arch 90: sm_90).
std::vector<std::string> nvrtc_options(int arch);

// A compiled kernel library.
struct Cubin {
  std::string bytes;  // the CUBIN (an ELF image)
  int arch = 0;
  std::string key;          // its cache key
  bool from_cache = false;  // loaded from the disk cache
};
using CubinPtr = std::shared_ptr<const Cubin>;

// `source` compiled for sm_<arch>, from the disk cache or by NVRTC now, on
// this thread. Compiles of the same source and architecture that are in
// flight at once are one compile. pax::Error with NVRTC's log and the first
// lines of the source when it does not compile.
CubinPtr compile_cubin(const std::string& source, int arch);

// A compile in progress (or done).
class CubinFuture {
 public:
  CubinFuture() = default;
  explicit CubinFuture(std::shared_future<CubinPtr> f) : f_(std::move(f)) {}
  bool valid() const { return f_.valid(); }
  bool ready() const;
  // Waits for the compile; rethrows its error.
  CubinPtr get() const { return f_.get(); }

 private:
  std::shared_future<CubinPtr> f_;
};

// compile_cubin on the compiler threads (PAX_COMPILE=async), or now.
CubinFuture compile_cubin_async(std::string source, int arch);

struct NvrtcStats {
  int compiled = 0;            // sources NVRTC compiled in this process
  int cache_hits = 0;          // CUBINs loaded from the disk cache
  int failed = 0;              // compiles that failed
  int damaged = 0;             // damaged cache entries found (and rebuilt)
  double compile_seconds = 0;  // spent in NVRTC
};
NvrtcStats nvrtc_stats();

// A loaded CUBIN (cudaLibraryLoadData): its kernels stay valid while it
// lives. Needs a CUDA device.
class CudaKernelLibrary {
 public:
  explicit CudaKernelLibrary(const Cubin& cubin);
  ~CudaKernelLibrary();
  CudaKernelLibrary(const CudaKernelLibrary&) = delete;
  CudaKernelLibrary& operator=(const CudaKernelLibrary&) = delete;
  // The kernel named `name` (cudaLibraryGetKernel); pax::Error if absent.
  cudaKernel_t kernel(const std::string& name) const;

 private:
  cudaLibrary_t library_ = nullptr;
};

// Launches a generated kernel with the shape it was rendered with:
// `pointers` are its inputs' and outputs' device addresses in parameter
// order (cuda_kernels_source.h); the domain's size follows them.
void launch_kernel(cudaKernel_t fn, const CudaKernelSource& kernel, std::span<void* const> pointers,
                   cudaStream_t stream);

}  // namespace pax::cuda

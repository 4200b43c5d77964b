// Probing the CUDA devices once per process, without failing where there is
// no driver.
#include "pax/backend/cuda/cuda_devices.h"

#include <mutex>
#include <vector>

#include "pax/backend/cuda/cuda_check.h"

namespace pax::cuda {

void fail_cuda_call(cudaError_t err, const char* call, const char* file, int line) {
  PAX_FAIL("CUDA call ", call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") at ", file, ":",
           line);
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  PAX_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_) PAX_CUDA_CHECK(cudaSetDevice(device_));
}

namespace {

struct Probe {
  int count = 0;
  std::string reason;
  std::vector<DeviceInfo> infos;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe out;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      // No driver, a driver older than the runtime, or no device: not an
      // error for a program that may run on the CPU.
      out.reason = std::string("no CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
      cudaGetLastError();  // clears the sticky error of the probe
      return out;
    }
    if (n == 0) {
      out.reason = "no CUDA device (the driver reports none)";
      return out;
    }
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp prop{};
      PAX_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
      DeviceInfo info;
      info.name = prop.name;
      info.arch = prop.major * 10 + prop.minor;
      info.multiprocessors = prop.multiProcessorCount;
      info.memory_bytes = int64_t(prop.totalGlobalMem);
      int clock = 0, mem_clock = 0;
      cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, i);
      cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, i);
      info.clock_khz = clock;
      info.memory_clock_khz = mem_clock;
      info.memory_bus_bits = prop.memoryBusWidth;
      out.infos.push_back(std::move(info));
    }
    out.count = n;
    return out;
  }();
  return p;
}

}  // namespace

int device_count() { return probe().count; }

const std::string& absence_reason() { return probe().reason; }

const DeviceInfo& device_info(int index) {
  const Probe& p = probe();
  PAX_CHECK(index >= 0 && index < p.count, "cuda:", index, " is not present; CUDA devices: ", p.count);
  return p.infos[size_t(index)];
}

std::string arch_name(int arch) { return "sm_" + std::to_string(arch); }

}  // namespace pax::cuda

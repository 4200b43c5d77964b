// The CUDA devices of this machine, probed once through the runtime API. A
// machine without a driver or without a GPU has none: the probe never
// throws, and says why (paxcc --list_devices prints it).
#pragma once

#include <cstdint>
#include <string>

namespace pax::cuda {

struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int arch = 0;      // compute capability as major * 10 + minor (90 for sm_90)
  int multiprocessors = 0;
  int64_t memory_bytes = 0;  // global memory
  int clock_khz = 0;         // the SMs' peak clock
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
};

// The number of CUDA devices present (0 without a driver or a GPU).
int device_count();
// Why there are none ("no CUDA driver (cudaErrorInsufficientDriver: ...)"),
// or "" when there are.
const std::string& absence_reason();
// Properties of device `index` (< device_count()).
const DeviceInfo& device_info(int index);

// "sm_90": the architecture NVRTC compiles for on that device.
std::string arch_name(int arch);

}  // namespace pax::cuda

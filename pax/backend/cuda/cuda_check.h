// Checked calls into the CUDA runtime: a failing call is a pax::Error that
// names the call, the runtime's error name and its message. DeviceGuard makes
// a device current for the calls in its scope.
#pragma once

#include <cuda_runtime_api.h>

#include "pax/core/error.h"

namespace pax::cuda {

[[noreturn]] void fail_cuda_call(cudaError_t err, const char* call, const char* file, int line);

// Makes `device` current for the calls in its scope and restores the
// thread's previous device after them.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace pax::cuda

#define PAX_CUDA_CHECK(call)                                                 \
  do {                                                                       \
    const cudaError_t pax_cuda_err_ = (call);                                \
    if (pax_cuda_err_ != cudaSuccess) {                                      \
      ::pax::cuda::fail_cuda_call(pax_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)

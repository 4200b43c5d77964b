// Checked calls into the CUDA runtime: a failing call is a pax::Error that
// names the call, the runtime's error name and its message.
#pragma once

#include <cuda_runtime_api.h>

#include "pax/core/error.h"

namespace pax::cuda {

[[noreturn]] void fail_cuda_call(cudaError_t err, const char* call, const char* file, int line);

}  // namespace pax::cuda

#define PAX_CUDA_CHECK(call)                                                 \
  do {                                                                       \
    const cudaError_t pax_cuda_err_ = (call);                                \
    if (pax_cuda_err_ != cudaSuccess) {                                      \
      ::pax::cuda::fail_cuda_call(pax_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)

// The CUDA backend's table (pax/backend/backend.h) and the state it keeps per
// device: one stream, the caching allocator over cudaMalloc, pinned staging
// buffers for copies from the host, events, and the kernel context handed to
// kernels (the stream, the library handles, stream-ordered scratch).
//
// Each device's state is made at its first use and lives to the end of the
// process. All work of a device runs in order on its one stream, so memory
// freed by the host goes back to the allocator at once: later work on the
// stream can only run after the work that used it.
#pragma once

#include <cuda_runtime_api.h>

#include "pax/backend/backend.h"
#include "pax/backend/cuda/caching_allocator.h"
#include "pax/backend/cuda/cuda_memory_provider.h"
#include "pax/backend/cuda/pinned_staging.h"

namespace pax::cuda {

struct DeviceState {
  explicit DeviceState(int index);
  int index;
  cudaStream_t stream = nullptr;
  CudaMemoryProvider memory_provider;
  CachingAllocator allocator;
  CudaPinnedProvider pinned_provider;
  PinnedStaging staging;
  KernelContext kernel_context;
};

// The state of cuda:`index` (made at first use; pax::Error when the device
// is not present).
DeviceState& device_state(int index);

const Backend& cuda_backend();

}  // namespace pax::cuda

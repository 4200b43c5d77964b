// The CUDA runtime calls of the memory providers (see cuda_memory_provider.h).
#include "pax/backend/cuda/cuda_memory_provider.h"

#include <cuda_runtime_api.h>

#include "pax/backend/cuda/cuda_check.h"

namespace pax::cuda {
namespace {

cudaEvent_t as_event(EventId id) { return reinterpret_cast<cudaEvent_t>(id); }
cudaStream_t as_stream(StreamId id) { return reinterpret_cast<cudaStream_t>(id); }

}  // namespace

CudaEventPool::~CudaEventPool() {
  for (EventId e : free_) cudaEventDestroy(as_event(e));
}

EventId CudaEventPool::record(StreamId stream) {
  EventId id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    }
  }
  DeviceGuard guard(device_);
  if (id == 0) {
    cudaEvent_t event = nullptr;
    PAX_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    id = reinterpret_cast<EventId>(event);
  }
  PAX_CUDA_CHECK(cudaEventRecord(as_event(id), as_stream(stream)));
  return id;
}

bool CudaEventPool::done(EventId event) {
  const cudaError_t err = cudaEventQuery(as_event(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not a failure: clears it from the thread's last error
    return false;
  }
  PAX_CUDA_CHECK(err);
  return true;
}

void CudaEventPool::wait(EventId event) { PAX_CUDA_CHECK(cudaEventSynchronize(as_event(event))); }

void CudaEventPool::release(EventId event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

void* CudaMemoryProvider::allocate_segment(size_t bytes) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // the caller empties its cache and retries
    return nullptr;
  }
  PAX_CUDA_CHECK(err);
  return p;
}

void CudaMemoryProvider::free_segment(void* ptr, size_t) {
  DeviceGuard guard(device_);
  PAX_CUDA_CHECK(cudaFree(ptr));
}

void CudaMemoryProvider::synchronize() {
  DeviceGuard guard(device_);
  PAX_CUDA_CHECK(cudaDeviceSynchronize());
}

MemoryProvider::DeviceMemory CudaMemoryProvider::device_memory() {
  // Called while building an out-of-memory error: it must not throw another.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device_) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {free_bytes, total_bytes};
}

void* CudaPinnedProvider::allocate_pinned(size_t bytes) {
  DeviceGuard guard(device_);
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  PAX_CUDA_CHECK(err);
  return p;
}

void CudaPinnedProvider::free_pinned(void* ptr, size_t) { PAX_CUDA_CHECK(cudaFreeHost(ptr)); }

}  // namespace pax::cuda

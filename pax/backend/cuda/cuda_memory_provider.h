// The CUDA runtime under the caching allocator and the pinned staging pool:
// cudaMalloc / cudaFree segments, cudaHostAlloc / cudaFreeHost buffers and
// events recycled in a pool, one provider per device. The policies above
// them (caching_allocator.h, pinned_staging.h) are plain C++ and tested
// over fakes; this file is the thin part that needs a GPU.
#pragma once

#include <mutex>
#include <vector>

#include "pax/backend/cuda/caching_allocator.h"
#include "pax/backend/cuda/pinned_staging.h"

namespace pax::cuda {

// cudaEvent_t's of one device, created without timing (cheaper to record
// and query) and reused once released. EventId is the cudaEvent_t.
class CudaEventPool {
 public:
  explicit CudaEventPool(int device) : device_(device) {}
  // Destroys the pooled events; errors are ignored (the runtime may be
  // unloading at exit).
  ~CudaEventPool();
  CudaEventPool(const CudaEventPool&) = delete;
  CudaEventPool& operator=(const CudaEventPool&) = delete;

  // An event recorded on `stream` (a cudaStream_t of this device, 0 for the
  // default stream).
  EventId record(StreamId stream);
  bool done(EventId event);
  void wait(EventId event);
  void release(EventId event);

 private:
  const int device_;
  std::mutex mu_;
  std::vector<EventId> free_;
};

// Device memory of cuda:`device` for a CachingAllocator.
class CudaMemoryProvider final : public MemoryProvider {
 public:
  explicit CudaMemoryProvider(int device) : device_(device), events_(device) {}
  // nullptr on cudaErrorMemoryAllocation (the error is cleared).
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  EventId record_event(StreamId stream) override { return events_.record(stream); }
  bool event_done(EventId event) override { return events_.done(event); }
  void release_event(EventId event) override { events_.release(event); }
  void synchronize() override;            // cudaDeviceSynchronize
  DeviceMemory device_memory() override;  // cudaMemGetInfo; {} where it fails

 private:
  const int device_;
  CudaEventPool events_;
};

// Pinned host memory, with events on the streams of cuda:`device`, for a
// PinnedStaging pool of that device.
class CudaPinnedProvider final : public PinnedProvider {
 public:
  explicit CudaPinnedProvider(int device) : device_(device), events_(device) {}
  // Portable pinned memory (usable with every device); nullptr on
  // cudaErrorMemoryAllocation (the error is cleared).
  void* allocate_pinned(size_t bytes) override;
  void free_pinned(void* ptr, size_t bytes) override;
  EventId record_event(StreamId stream) override { return events_.record(stream); }
  bool event_done(EventId event) override { return events_.done(event); }
  void wait_event(EventId event) override { events_.wait(event); }
  void release_event(EventId event) override { events_.release(event); }

 private:
  const int device_;
  CudaEventPool events_;
};

}  // namespace pax::cuda

// Pinned (page-locked) host buffers that host<->device copies go through: a
// copy from pageable memory cannot run asynchronously, so the bytes are
// first copied into a pinned buffer and the device copy is queued from
// there. A buffer is reused once the event recorded after its copy has
// completed; copies larger than a buffer go in chunks. Plain C++ over an
// abstract PinnedProvider and an injected copy function, so that the policy
// runs in tests without a GPU (cuda_memory_provider.h has the real one).
//
// The backend's from_host is stage_to_device(): it returns as soon as the
// last chunk's copy is queued, and the caller's bytes may be changed or
// freed from then on. to_host is stage_from_device(): it returns once the
// bytes are in the caller's memory.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pax/backend/cuda/caching_allocator.h"  // StreamId, EventId

namespace pax::cuda {

// Pinned host memory and the events of one device's streams. Calls come
// with the pool's mutex held, except wait_event().
class PinnedProvider {
 public:
  virtual ~PinnedProvider() = default;
  // `bytes` of pinned host memory (cudaHostAlloc), or nullptr when none can
  // be had; any other failure throws.
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* ptr, size_t bytes) = 0;
  // An event that completes once the work queued so far on `stream` has run.
  virtual EventId record_event(StreamId stream) = 0;
  // Whether `event` has completed (never blocks).
  virtual bool event_done(EventId event) = 0;
  // Blocks the calling thread until `event` has completed.
  virtual void wait_event(EventId event) = 0;
  // The pool is done with `event` (the provider may recycle it).
  virtual void release_event(EventId event) = 0;
};

// Queues an asynchronous copy of `n` bytes from `src` to `dst` on `stream`
// (cudaMemcpyAsync with the direction at hand); returns once it is queued.
using StagedCopyFn = std::function<void(void* dst, const void* src, size_t n, StreamId stream)>;

struct PinnedStagingStats {
  size_t pinned_bytes = 0;  // held in buffers
  size_t buffers = 0;       // buffers held
  uint64_t chunks = 0;      // chunk copies queued
  uint64_t reuses = 0;      // buffers taken again after their copy's event
  uint64_t waits = 0;       // times a caller blocked on a buffer's event
};

class PinnedStaging {
 public:
  struct Options {
    size_t buffer_bytes = size_t(4) << 20;  // one buffer, the largest chunk
    size_t limit_bytes = size_t(64) << 20;  // all buffers together
  };

  // `provider` must outlive the pool. limit_bytes >= buffer_bytes > 0.
  PinnedStaging(PinnedProvider& provider, Options options);
  // Forgets its buffers without freeing them (at exit the CUDA context may
  // already be gone); call trim() first to give them back.
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Host -> device: for each chunk of at most buffer_bytes, copies the bytes
  // of `src` into a pinned buffer, calls copy(dst + offset, buffer, chunk,
  // stream) and records an event on `stream` after it. Returns without
  // waiting for the copies; `src` is not read after it returns. A buffer is
  // taken (in this order) idle, or after its event has completed, or newly
  // allocated within the limit, or else by waiting for the oldest copy.
  void stage_to_device(void* dst, const void* src, size_t n, StreamId stream, const StagedCopyFn& copy);
  // Device -> host: queues copy(buffer, src + offset, chunk, stream) for the
  // chunks, as many at once as buffers can be had, and copies each into
  // `dst` once its event completes. Returns when all of `dst` is written.
  void stage_from_device(void* dst, const void* src, size_t n, StreamId stream, const StagedCopyFn& copy);
  // Frees the buffers that no copy uses any more.
  void trim();

  PinnedStagingStats stats() const;
  const Options& options() const { return options_; }

 private:
  struct Buffer {
    enum class State { idle, in_flight, busy };
    char* ptr = nullptr;
    State state = State::idle;
    EventId event = 0;   // while in flight
    uint64_t order = 0;  // when it went in flight, to wait for the oldest
  };

  Buffer* try_acquire_locked();
  Buffer* acquire();
  Buffer* try_acquire();
  void put_in_flight(Buffer* buffer, EventId event);
  void give_back(Buffer* buffer);

  PinnedProvider& provider_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable returned_;  // a busy buffer became idle or in flight
  std::vector<std::unique_ptr<Buffer>> buffers_;
  uint64_t next_order_ = 0;
  PinnedStagingStats stats_;
};

}  // namespace pax::cuda

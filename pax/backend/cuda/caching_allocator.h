// The CUDA device's memory allocator: a caching allocator in the manner of
// PyTorch's CUDACachingAllocator, written as a policy over an abstract
// MemoryProvider so that it is plain C++ (no CUDA header here) and its
// policy runs in tests over a fake provider without a GPU.
//
// Policy:
// - Sizes are rounded up to multiples of 512 bytes (kMinBlockSize).
// - Requests of at most 1 MiB (kSmallSize) come from a pool of small blocks
//   carved out of 2 MiB segments (kSmallBuffer); larger ones from a pool of
//   large blocks: a 20 MiB segment (kLargeBuffer) for requests under 10 MiB
//   (kMinLargeAlloc), otherwise a segment of the size rounded up to 2 MiB
//   (kRoundLarge).
// - A request takes the smallest free block of its pool on its stream that
//   fits (best fit); a larger block is split when the rest is worth keeping
//   (>= 512 bytes in the small pool, > 1 MiB in the large one).
// - free() returns a block to its stream's pool at once: work queued later on
//   that stream runs after the work that used the block, so reuse there is
//   safe without waiting. A free block merges with free neighbours of its
//   segment.
// - A block used on other streams (record_use) is held back at free() until
//   an event recorded then on each of those streams completes; such pending
//   frees are looked at on the next allocate().
// - When the provider has no memory left, every pending free is waited for
//   (provider synchronize) and every segment that is wholly free is returned
//   to the provider; then the segment allocation is tried once more before
//   an out-of-memory pax::Error that names the size, the purpose, what is in
//   use and cached, and the device's memory.
//
// The backend holds one CachingAllocator per device over that device's
// provider (cuda_memory_provider.h), and calls register_allocator_stats()
// for each so that PAX_CUDA_ALLOCATOR_STATS=1 prints their statistics at
// exit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pax::cuda {

// A stream, opaque to the allocator: the cudaStream_t cast to an integer, 0
// for the default (legacy) stream.
using StreamId = uint64_t;
// An event recorded on a stream, opaque: the provider's own handle.
using EventId = uint64_t;

// The device memory an allocator sits on. One provider serves one device.
// Every call is made with the allocator's mutex held, so an implementation
// needs no locking of its own for calls from one allocator.
class MemoryProvider {
 public:
  virtual ~MemoryProvider() = default;
  // A new segment of `bytes` device memory (cudaMalloc), or nullptr when the
  // device has no memory left for it; any other failure throws.
  virtual void* allocate_segment(size_t bytes) = 0;
  // Returns a segment that allocate_segment() gave, with the same size.
  virtual void free_segment(void* ptr, size_t bytes) = 0;
  // An event that completes once the work queued so far on `stream` has run.
  virtual EventId record_event(StreamId stream) = 0;
  // Whether `event` has completed (never blocks).
  virtual bool event_done(EventId event) = 0;
  // The allocator is done with `event` (the provider may recycle it).
  virtual void release_event(EventId event) = 0;
  // Waits until all work queued on every stream of the device has run.
  virtual void synchronize() = 0;
  // The device's memory for error messages: total (its limit) and free now
  // (cudaMemGetInfo); 0 where not known.
  struct DeviceMemory {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
  };
  virtual DeviceMemory device_memory() { return {}; }
};

struct CachingAllocatorStats {
  size_t allocated_bytes = 0;        // held by live allocations (block sizes)
  size_t reserved_bytes = 0;         // in segments obtained from the provider
  size_t peak_allocated_bytes = 0;   // the most allocated_bytes has been
  size_t peak_reserved_bytes = 0;    // the most reserved_bytes has been
  uint64_t allocations = 0;          // allocate() calls that succeeded
  uint64_t cache_hits = 0;           // of those, served from cached blocks
  uint64_t segment_allocations = 0;  // allocate_segment() calls that succeeded
  uint64_t segment_frees = 0;        // segments returned to the provider
  uint64_t oom_retries = 0;          // cache emptied after the provider ran out
  uint64_t ooms = 0;                 // out-of-memory errors thrown
};

class CachingAllocator {
 public:
  // PyTorch's sizes (see the file comment).
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t(1) << 20;
  static constexpr size_t kSmallBuffer = size_t(2) << 20;
  static constexpr size_t kLargeBuffer = size_t(20) << 20;
  static constexpr size_t kMinLargeAlloc = size_t(10) << 20;
  static constexpr size_t kRoundLarge = size_t(2) << 20;

  // `provider` must outlive the allocator; `device` is the index in
  // messages ("cuda:0").
  CachingAllocator(MemoryProvider& provider, int device);
  // Forgets its blocks without returning segments to the provider (at exit
  // the CUDA context may already be gone); call empty_cache() first to give
  // memory back.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  struct Allocation {
    void* ptr = nullptr;  // device address; nullptr for a 0-byte request
    size_t size = 0;      // the block's size (>= the request, 512-multiple)
    StreamId stream = 0;  // the stream it belongs to
  };

  // `bytes` of device memory for use on `stream`. `purpose` says what it is
  // for in the out-of-memory error ("the output of 'dot_general'"); when
  // empty, the thread's pax::AllocationPurpose scopes are used. A request of
  // 0 bytes gives {nullptr, 0, stream}. Throws pax::Error when the device has
  // no memory for it even after emptying the cache.
  Allocation allocate(size_t bytes, StreamId stream, std::string_view purpose = {});
  // Returns the allocation at `ptr` (nullptr: nothing). Work queued on its
  // stream before this call may still use it: only later work on the same
  // stream gets the block, or any stream once the events of record_use()
  // have completed. A pointer that is not a live allocation is a pax::Error.
  void free(void* ptr);
  // The allocation at `ptr` is used by work on `stream` as well (a copy or
  // kernel queued there): free() then holds the block back until that work
  // has run. No effect for its own stream.
  void record_use(void* ptr, StreamId stream);
  // Waits for pending frees and returns every wholly free segment to the
  // provider.
  void empty_cache();

  CachingAllocatorStats stats() const;
  // Sets the peaks to the present values.
  void reset_peak_stats();
  // "cuda:0 allocator: allocated 1.2 GB (peak 3.4 GB), reserved 4.1 GB (peak
  // 4.1 GB) in 12 segments; 5678 allocations, 5600 from the cache; 16
  // segment allocations, 4 frees; 1 retry after emptying the cache, 0
  // out-of-memory errors".
  std::string stats_string() const;
  int device() const { return device_; }

  // The rounded size and the segment size for a request of `bytes` (bytes > 0).
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Pool& pool_for(size_t rounded) { return rounded <= kSmallSize ? small_ : large_; }
  Block* best_fit(Pool& pool, StreamId stream, size_t size);
  Block* new_segment(Pool& pool, StreamId stream, size_t segment);
  void free_block(Block* block);
  bool merge(Block* dst, Block* src);
  void process_pending(bool wait_all);
  void release_free_segments();
  void release_free_segments(Pool& pool);
  [[noreturn]] void fail_out_of_memory(size_t bytes, size_t segment, std::string_view purpose);
  std::string stats_string_locked() const;

  MemoryProvider& provider_;
  const int device_;
  mutable std::mutex mu_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> live_;  // allocated and pending blocks
  // Freed blocks waiting on their events, in the order of their frees.
  std::vector<Block*> pending_;
  size_t segments_ = 0;
  CachingAllocatorStats stats_;
};

// PAX_CUDA_ALLOCATOR_STATS: whether the statistics are printed at exit
// (pax::env_switch: unset, "", "0", "false", "no" or "off" turn it off).
bool allocator_stats_requested();
// Adds `allocator` to the ones whose statistics allocator_stats_report()
// gives, and (once per process, when allocator_stats_requested()) installs
// a handler that prints that report to stderr at exit. An allocator
// destroyed before then leaves its last statistics in the report.
void register_allocator_stats(CachingAllocator& allocator);
// One line per registered allocator (CachingAllocator::stats_string()),
// after a header line; "" when none is registered.
std::string allocator_stats_report();

}  // namespace pax::cuda

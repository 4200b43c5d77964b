// The caching allocator's policy (see caching_allocator.h): pools of free
// blocks ordered for best fit, splitting and merging within segments,
// stream-ordered and event-guarded reuse, and the retry after emptying the
// cache.
#include "pax/backend/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "pax/core/buffer.h"
#include "pax/core/env_switch.h"
#include "pax/core/error.h"

namespace pax::cuda {

// A run of device memory inside a segment: allocated, free (in its pool) or
// pending (freed, waiting on events before it may be reused). The blocks of
// one segment form a list through prev/next in address order.
struct CachingAllocator::Block {
  enum class State { allocated, pending, free };
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;
  bool small = false;  // which pool it belongs to
  State state = State::free;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamId> uses;   // other streams it is used on (record_use)
  std::vector<EventId> events;  // recorded on those at free(), while pending
};

// By stream, then size, then address: the first block at or after
// {stream, size, nullptr} is the smallest that fits on that stream.
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->stream, a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->stream, b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  // Requests between 1 and 10 MiB share 20 MiB segments, which keeps them
  // from fragmenting the device into many odd-sized segments.
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

CachingAllocator::CachingAllocator(MemoryProvider& provider, int device) : provider_(provider), device_(device) {}

CachingAllocator::Allocation CachingAllocator::allocate(size_t bytes, StreamId stream, std::string_view purpose) {
  if (bytes == 0) return {nullptr, 0, stream};
  // Rounding must not wrap around; nothing this large exists on a device.
  constexpr size_t kMaxRequest = size_t(1) << 60;
  PAX_CHECK(bytes <= kMaxRequest, "cuda:", device_, ": cannot allocate ", bytes, " bytes",
            purpose.empty() ? "" : " for ", purpose, " (at most ", kMaxRequest, " bytes)");
  std::lock_guard<std::mutex> lock(mu_);
  process_pending(/*wait_all=*/false);
  const size_t size = round_size(bytes);
  Pool& pool = pool_for(size);
  Block* block = best_fit(pool, stream, size);
  if (block == nullptr) {
    const size_t segment = segment_size(size);
    block = new_segment(pool, stream, segment);
    if (block == nullptr) {
      // The device is full: wait for the pending frees (one of them may fit)
      // and give back every segment nothing uses, then try once more.
      ++stats_.oom_retries;
      process_pending(/*wait_all=*/true);
      block = best_fit(pool, stream, size);
      if (block == nullptr) {
        release_free_segments();
        block = new_segment(pool, stream, segment);
      }
      if (block == nullptr) fail_out_of_memory(bytes, segment, purpose);
    }
  }
  if (block->state == Block::State::free) {
    pool.erase(block);
    ++stats_.cache_hits;
  }
  // The rest of the block is worth keeping as a block of its own when it can
  // serve a request of its pool: any in the small pool, more than a small
  // request in the large one (smaller rests would only fragment it).
  const size_t rest = block->size - size;
  if (block->small ? rest >= kMinBlockSize : rest > kSmallSize) {
    auto* tail = new Block;
    tail->ptr = block->ptr + size;
    tail->size = rest;
    tail->stream = stream;
    tail->small = block->small;
    tail->prev = block;
    tail->next = block->next;
    if (block->next != nullptr) block->next->prev = tail;
    block->next = tail;
    block->size = size;
    pool.insert(tail);
  }
  block->state = Block::State::allocated;
  live_[block->ptr] = block;
  ++stats_.allocations;
  stats_.allocated_bytes += block->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return {block->ptr, block->size, stream};
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  PAX_CHECK(it != live_.end() && it->second->state == Block::State::allocated, "cuda:", device_, ": free of ", ptr,
            ", which is not a live allocation of this device's allocator (freed twice, or from another device)");
  Block* block = it->second;
  std::vector<EventId> events;
  events.reserve(block->uses.size());
  for (StreamId s : block->uses) events.push_back(provider_.record_event(s));
  live_.erase(it);
  stats_.allocated_bytes -= block->size;
  block->uses.clear();
  if (events.empty()) {
    free_block(block);
  } else {
    block->events = std::move(events);
    block->state = Block::State::pending;
    pending_.push_back(block);
  }
}

void CachingAllocator::record_use(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  PAX_CHECK(it != live_.end(), "cuda:", device_, ": record_use of ", ptr,
            ", which is not a live allocation of this device's allocator");
  Block* block = it->second;
  if (stream == block->stream) return;
  if (std::find(block->uses.begin(), block->uses.end(), stream) == block->uses.end()) block->uses.push_back(stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_pending(/*wait_all=*/true);
  release_free_segments();
}

CachingAllocator::Block* CachingAllocator::best_fit(Pool& pool, StreamId stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

CachingAllocator::Block* CachingAllocator::new_segment(Pool& pool, StreamId stream, size_t segment) {
  void* p = provider_.allocate_segment(segment);
  if (p == nullptr) return nullptr;
  auto* block = new Block;
  block->ptr = static_cast<char*>(p);
  block->size = segment;
  block->stream = stream;
  block->small = &pool == &small_;
  block->state = Block::State::allocated;  // not in the pool: the caller takes it
  ++segments_;
  ++stats_.segment_allocations;
  stats_.reserved_bytes += segment;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

void CachingAllocator::free_block(Block* block) {
  block->state = Block::State::free;
  merge(block, block->prev);
  merge(block, block->next);
  (block->small ? small_ : large_).insert(block);
}

bool CachingAllocator::merge(Block* dst, Block* src) {
  if (src == nullptr || src->state != Block::State::free) return false;
  (src->small ? small_ : large_).erase(src);
  if (src == dst->prev) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev != nullptr) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
  return true;
}

void CachingAllocator::process_pending(bool wait_all) {
  if (pending_.empty()) return;
  if (wait_all) provider_.synchronize();
  std::vector<Block*> still;
  for (Block* block : pending_) {
    std::vector<EventId>& events = block->events;
    events.erase(std::remove_if(events.begin(), events.end(),
                                [&](EventId e) {
                                  if (!wait_all && !provider_.event_done(e)) return false;
                                  provider_.release_event(e);
                                  return true;
                                }),
                 events.end());
    if (events.empty()) {
      free_block(block);
    } else {
      still.push_back(block);
    }
  }
  pending_ = std::move(still);
}

void CachingAllocator::release_free_segments() {
  release_free_segments(small_);
  release_free_segments(large_);
}

void CachingAllocator::release_free_segments(Pool& pool) {
  for (auto it = pool.begin(); it != pool.end();) {
    Block* block = *it;
    // A free block without neighbours is a whole segment (free neighbours
    // would have merged into it).
    if (block->prev != nullptr || block->next != nullptr) {
      ++it;
      continue;
    }
    provider_.free_segment(block->ptr, block->size);
    --segments_;
    ++stats_.segment_frees;
    stats_.reserved_bytes -= block->size;
    it = pool.erase(it);
    delete block;
  }
}

void CachingAllocator::fail_out_of_memory(size_t bytes, size_t segment, std::string_view purpose) {
  ++stats_.ooms;
  const std::string what = purpose.empty() ? AllocationPurpose::describe_current() : "for " + std::string(purpose);
  const MemoryProvider::DeviceMemory memory = provider_.device_memory();
  std::string device_limit;
  if (memory.total_bytes > 0) {
    device_limit = ", device limit " + format_bytes(double(memory.total_bytes)) + " (" +
                   format_bytes(double(memory.free_bytes)) + " free)";
  }
  const size_t size = round_size(bytes);
  PAX_FAIL("out of memory on cuda:", device_, ": allocating ", format_bytes(double(bytes)),
           segment > size ? " (in a new " + format_bytes(double(segment)) + " segment)" : std::string(),
           what.empty() ? "" : " ", what, " failed; in use ", format_bytes(double(stats_.allocated_bytes)), ", cached ",
           format_bytes(double(stats_.reserved_bytes - stats_.allocated_bytes)),
           " (free blocks of partly used segments)", device_limit,
           " (set PAX_CUDA_ALLOCATOR_STATS=1 to print the allocator's statistics at exit)");
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::string CachingAllocator::stats_string() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_string_locked();
}

std::string CachingAllocator::stats_string_locked() const {
  const CachingAllocatorStats& s = stats_;
  return detail::concat(
      "cuda:", device_, " allocator: allocated ", format_bytes(double(s.allocated_bytes)), " (peak ",
      format_bytes(double(s.peak_allocated_bytes)), "), reserved ", format_bytes(double(s.reserved_bytes)), " (peak ",
      format_bytes(double(s.peak_reserved_bytes)), ") in ", segments_, segments_ == 1 ? " segment; " : " segments; ",
      s.allocations, " allocations, ", s.cache_hits, " from the cache; ", s.segment_allocations,
      " segment allocations, ", s.segment_frees, " frees; ", s.oom_retries, s.oom_retries == 1 ? " retry" : " retries",
      " after emptying the cache, ", s.ooms, " out-of-memory errors");
}

// The allocators whose statistics the exit report prints. An allocator that
// goes away first leaves its last line behind.
namespace {

struct StatsEntry {
  const CachingAllocator* live = nullptr;
  std::string last;
};

std::mutex g_stats_mu;

std::vector<StatsEntry>& stats_entries() {
  // Never destroyed: the exit handler may run after static destructors.
  static auto* entries = new std::vector<StatsEntry>;
  return *entries;
}

void print_stats_at_exit() {
  const std::string report = allocator_stats_report();
  if (!report.empty()) std::fputs(report.c_str(), stderr);
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    for (StatsEntry& e : stats_entries()) {
      if (e.live == this) {
        e.last = stats_string();
        e.live = nullptr;
      }
    }
  }
  for (auto& [ptr, block] : live_) delete block;
  for (Block* block : pending_) delete block;
  for (Block* block : small_) delete block;
  for (Block* block : large_) delete block;
}

bool allocator_stats_requested() { return env_switch("PAX_CUDA_ALLOCATOR_STATS", false); }

void register_allocator_stats(CachingAllocator& allocator) {
  static const bool printer_installed = [] {
    if (allocator_stats_requested()) std::atexit(print_stats_at_exit);
    return true;
  }();
  (void)printer_installed;
  std::lock_guard<std::mutex> lock(g_stats_mu);
  for (const StatsEntry& e : stats_entries())
    if (e.live == &allocator) return;
  stats_entries().push_back({&allocator, ""});
}

std::string allocator_stats_report() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  if (stats_entries().empty()) return "";
  std::string out = "paxcc CUDA allocator statistics (PAX_CUDA_ALLOCATOR_STATS):\n";
  for (const StatsEntry& e : stats_entries()) out += "  " + (e.live ? e.live->stats_string() : e.last) + "\n";
  return out;
}

}  // namespace pax::cuda

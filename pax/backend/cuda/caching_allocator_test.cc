// The caching allocator's policy over a fake provider: host memory with a
// settable capacity, and events whose completion the test decides.
#include "pax/backend/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;

class FakeProvider : public MemoryProvider {
 public:
  explicit FakeProvider(size_t capacity = kGiB) : capacity(capacity) {}
  ~FakeProvider() override {
    for (auto& [p, size] : segments) std::free(p);
  }

  void* allocate_segment(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    ++allocate_calls;
    if (used + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    segments[p] = bytes;
    used += bytes;
    return p;
  }
  void free_segment(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    auto it = segments.find(ptr);
    ASSERT_TRUE(it != segments.end()) << "free_segment of an unknown segment";
    ASSERT_EQ(it->second, bytes) << "free_segment with another size";
    segments.erase(it);
    used -= bytes;
    std::free(ptr);
  }
  EventId record_event(StreamId stream) override {
    std::lock_guard<std::mutex> lock(mu);
    const EventId id = next_event++;
    event_stream[id] = stream;
    return id;
  }
  bool event_done(EventId event) override {
    std::lock_guard<std::mutex> lock(mu);
    return done.count(event) > 0;
  }
  void release_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(event_stream.count(event)) << "release of an unknown event";
    EXPECT_FALSE(released.count(event)) << "event released twice";
    released.insert(event);
  }
  void synchronize() override {
    std::lock_guard<std::mutex> lock(mu);
    ++synchronize_calls;
    for (auto& [id, stream] : event_stream) done.insert(id);
  }
  DeviceMemory device_memory() override { return {capacity - used, capacity}; }

  // The work queued so far on `stream` has run.
  void complete_stream(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, s] : event_stream)
      if (s == stream) done.insert(id);
  }

  std::mutex mu;
  size_t capacity;
  size_t used = 0;
  std::map<void*, size_t> segments;
  int allocate_calls = 0;
  int synchronize_calls = 0;
  EventId next_event = 1;
  std::map<EventId, StreamId> event_stream;
  std::set<EventId> done, released;
};

constexpr StreamId kStream1 = 0x1000, kStream2 = 0x2000, kStream3 = 0x3000;

char* at(const CachingAllocator::Allocation& a) { return static_cast<char*>(a.ptr); }

TEST(CachingAllocator, RoundsSizesTo512ByteMultiples) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(3 * kMiB + 1), 3 * kMiB + 512);
  // Segments: 2 MiB for small requests, 20 MiB up to 10 MiB, then 2 MiB multiples.
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * kMiB + 512), 12 * kMiB);

  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(1, kStream1);
  const auto b = alloc.allocate(700, kStream1);
  EXPECT_EQ(a.size, 512u);
  EXPECT_EQ(b.size, 1024u);
  EXPECT_EQ(at(b), at(a) + 512);
  EXPECT_EQ(alloc.stats().allocated_bytes, 1536u);
  const auto none = alloc.allocate(0, kStream1);
  EXPECT_EQ(none.ptr, nullptr);
  alloc.free(a.ptr);
  alloc.free(b.ptr);
  alloc.free(nullptr);
}

TEST(CachingAllocator, SmallRequestsShareOneTwoMiBSegment) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  std::vector<CachingAllocator::Allocation> all;
  for (size_t bytes : {size_t(100), 4 * kKiB, 64 * kKiB, kMiB}) all.push_back(alloc.allocate(bytes, kStream1));
  EXPECT_EQ(provider.allocate_calls, 1);
  ASSERT_EQ(provider.segments.size(), 1u);
  EXPECT_EQ(provider.segments.begin()->second, 2 * kMiB);
  char* base = static_cast<char*>(provider.segments.begin()->first);
  for (const auto& a : all) {
    EXPECT_GE(at(a), base);
    EXPECT_LE(at(a) + a.size, base + 2 * kMiB);
  }
  // Packed one after the other.
  EXPECT_EQ(at(all[1]), at(all[0]) + 512);
  EXPECT_EQ(at(all[2]), at(all[1]) + 4 * kKiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 2 * kMiB);
  for (const auto& a : all) alloc.free(a.ptr);
}

TEST(CachingAllocator, LargeRequestsComeFromLargeSegments) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  // 12 MiB: a segment of its own size.
  const auto big = alloc.allocate(12 * kMiB, kStream1);
  EXPECT_EQ(provider.allocate_calls, 1);
  EXPECT_EQ(provider.segments.at(big.ptr), 12 * kMiB);
  EXPECT_EQ(big.size, 12 * kMiB);
  // A small request does not take from the large pool.
  const auto small = alloc.allocate(kKiB, kStream1);
  EXPECT_EQ(provider.allocate_calls, 2);
  EXPECT_EQ(provider.segments.at(small.ptr), 2 * kMiB);
  // 3 MiB: a 20 MiB segment, which the next 3 MiB request shares.
  const auto m1 = alloc.allocate(3 * kMiB, kStream1);
  const auto m2 = alloc.allocate(3 * kMiB, kStream1);
  EXPECT_EQ(provider.allocate_calls, 3);
  EXPECT_EQ(provider.segments.at(m1.ptr), 20 * kMiB);
  EXPECT_EQ(at(m2), at(m1) + 3 * kMiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, 34 * kMiB);
  for (const auto& a : {big, small, m1, m2}) alloc.free(a.ptr);
}

TEST(CachingAllocator, TakesTheSmallestFreeBlockThatFits) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  // Free blocks of 1, 4 and 2 KiB kept apart by live 512-byte blocks.
  const auto a = alloc.allocate(kKiB, kStream1);
  const auto sep1 = alloc.allocate(512, kStream1);
  const auto c = alloc.allocate(4 * kKiB, kStream1);
  const auto sep2 = alloc.allocate(512, kStream1);
  const auto e = alloc.allocate(2 * kKiB, kStream1);
  const auto sep3 = alloc.allocate(512, kStream1);
  alloc.free(a.ptr);
  alloc.free(c.ptr);
  alloc.free(e.ptr);
  const uint64_t hits = alloc.stats().cache_hits;
  EXPECT_EQ(alloc.allocate(2 * kKiB, kStream1).ptr, e.ptr);
  EXPECT_EQ(alloc.allocate(1500, kStream1).ptr, c.ptr);  // of 1 and 4 KiB, only 4 fits
  EXPECT_EQ(alloc.allocate(kKiB, kStream1).ptr, a.ptr);
  EXPECT_EQ(provider.allocate_calls, 1);
  EXPECT_EQ(alloc.stats().cache_hits, hits + 3);
  (void)sep1, (void)sep2, (void)sep3;
}

TEST(CachingAllocator, SplitsBlocksAndMergesFreeNeighbours) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(4 * kKiB, kStream1);
  const auto b = alloc.allocate(4 * kKiB, kStream1);
  const auto c = alloc.allocate(4 * kKiB, kStream1);
  EXPECT_EQ(at(b), at(a) + 4 * kKiB);
  alloc.free(b.ptr);
  alloc.free(a.ptr);
  // a and b are one 8 KiB block now: a request of their total takes it.
  const auto ab = alloc.allocate(8 * kKiB, kStream1);
  EXPECT_EQ(ab.ptr, a.ptr);
  EXPECT_EQ(provider.allocate_calls, 1);
  // Everything freed merges back into the whole segment, which
  // empty_cache() can then return.
  alloc.free(ab.ptr);
  alloc.free(c.ptr);
  alloc.empty_cache();
  EXPECT_TRUE(provider.segments.empty());
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_EQ(alloc.stats().segment_frees, 1u);
}

TEST(CachingAllocator, SplitsLargeBlocksOnlyWhenTheRestExceedsOneMiB) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  // 19 MiB + 512 B in a 20 MiB segment: a rest under 1 MiB stays with it.
  const auto a = alloc.allocate(19 * kMiB + 512, kStream1);
  EXPECT_EQ(a.size, 20 * kMiB);
  // 9 MiB in a 20 MiB segment: the 11 MiB rest is a block of its own.
  const auto b = alloc.allocate(9 * kMiB, kStream1);
  EXPECT_EQ(b.size, 9 * kMiB);
  const auto c = alloc.allocate(11 * kMiB, kStream1);
  EXPECT_EQ(at(c), at(b) + 9 * kMiB);
  EXPECT_EQ(provider.allocate_calls, 2);
  for (const auto& x : {a, b, c}) alloc.free(x.ptr);
}

TEST(CachingAllocator, ReusesAFreedBlockOnItsStreamAtOnce) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(12 * kMiB, kStream1);
  alloc.free(a.ptr);
  // Same stream: no event, no wait, the same block.
  const auto b = alloc.allocate(12 * kMiB, kStream1);
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_TRUE(provider.event_stream.empty());
  EXPECT_EQ(provider.allocate_calls, 1);
  // Another stream does not get a block its work on stream 1 may still use.
  const auto c = alloc.allocate(12 * kMiB, kStream2);
  alloc.free(b.ptr);
  const auto d = alloc.allocate(12 * kMiB, kStream2);
  EXPECT_NE(c.ptr, a.ptr);
  EXPECT_NE(d.ptr, a.ptr);
  EXPECT_EQ(provider.allocate_calls, 3);
  alloc.free(c.ptr);
  alloc.free(d.ptr);
}

TEST(CachingAllocator, RecordUseHoldsABlockUntilItsEventCompletes) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(12 * kMiB, kStream1);
  alloc.record_use(a.ptr, kStream2);
  alloc.record_use(a.ptr, kStream2);  // once per stream
  alloc.record_use(a.ptr, kStream1);  // its own: nothing to wait for
  alloc.free(a.ptr);
  ASSERT_EQ(provider.event_stream.size(), 1u);
  EXPECT_EQ(provider.event_stream.begin()->second, kStream2);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
  // Stream 2's copy may still read it: a new segment.
  const auto b = alloc.allocate(12 * kMiB, kStream1);
  EXPECT_NE(b.ptr, a.ptr);
  EXPECT_EQ(provider.allocate_calls, 2);
  provider.complete_stream(kStream2);
  // Now it is back in stream 1's pool (and its event released).
  const auto c = alloc.allocate(12 * kMiB, kStream1);
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_EQ(provider.allocate_calls, 2);
  EXPECT_EQ(provider.released.size(), 1u);
  alloc.free(b.ptr);
  alloc.free(c.ptr);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetries) {
  FakeProvider provider(30 * kMiB);
  CachingAllocator alloc(provider, 0);
  // Two 12 MiB segments cached on other streams, one of them held back by
  // an event that has not completed.
  const auto a = alloc.allocate(12 * kMiB, kStream1);
  const auto b = alloc.allocate(12 * kMiB, kStream2);
  alloc.record_use(b.ptr, kStream1);
  alloc.free(a.ptr);
  alloc.free(b.ptr);
  EXPECT_EQ(provider.used, 24 * kMiB);
  const auto c = alloc.allocate(20 * kMiB, kStream3, "the output of 'dot_general'");
  ASSERT_NE(c.ptr, nullptr);
  EXPECT_EQ(provider.synchronize_calls, 1);
  EXPECT_EQ(provider.used, 20 * kMiB);
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.segment_frees, 2u);
  EXPECT_EQ(s.ooms, 0u);
  EXPECT_EQ(s.reserved_bytes, 20 * kMiB);
  alloc.free(c.ptr);
}

TEST(CachingAllocator, OutOfMemoryAfterTheRetryNamesSizeAndPurpose) {
  FakeProvider provider(kGiB);
  CachingAllocator alloc(provider, 3);
  const auto held = alloc.allocate(100 * kMiB, kStream1);
  try {
    alloc.allocate(3 * kGiB, kStream1, "the output of 'dot_general'");
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on cuda:3: allocating 3.2 GB for the output of 'dot_general' failed"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("in use 104.9 MB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("device limit 1.1 GB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("PAX_CUDA_ALLOCATOR_STATS=1"), std::string::npos) << msg;
  }
  // Without a purpose, the thread's AllocationPurpose scopes say it.
  try {
    AllocationPurpose purpose("the parameters of 'lm'");
    alloc.allocate(2 * kGiB, kStream1);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allocating 2.1 GB for the parameters of 'lm' failed"), std::string::npos)
        << e.what();
  }
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.ooms, 2u);
  EXPECT_EQ(s.oom_retries, 2u);
  EXPECT_EQ(s.allocated_bytes, 100 * kMiB);
  alloc.free(held.ptr);
}

TEST(CachingAllocator, CountsStatistics) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 1);
  const auto a = alloc.allocate(1000, kStream1);       // new 2 MiB segment
  const auto b = alloc.allocate(12 * kMiB, kStream1);  // new 12 MiB segment
  alloc.free(a.ptr);
  const auto c = alloc.allocate(1000, kStream1);  // cache hit
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024 + 12 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 1024 + 12 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 14 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 14 * kMiB);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.segment_allocations, 2u);
  alloc.free(b.ptr);
  alloc.empty_cache();
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.peak_allocated_bytes, 1024 + 12 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 14 * kMiB);
  EXPECT_EQ(s.segment_frees, 1u);
  alloc.reset_peak_stats();
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, 1024u);
  EXPECT_EQ(alloc.stats().peak_reserved_bytes, 2 * kMiB);
  const std::string text = alloc.stats_string();
  EXPECT_NE(text.find("cuda:1 allocator: allocated 1.0 KB (peak 1.0 KB), reserved 2.1 MB (peak 2.1 MB) in 1 segment"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("3 allocations, 1 from the cache; 2 segment allocations, 1 frees"), std::string::npos) << text;
  alloc.free(c.ptr);
}

TEST(CachingAllocator, RejectsFreeingWhatItDidNotAllocate) {
  FakeProvider provider;
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(1000, kStream1);
  alloc.free(a.ptr);
  EXPECT_THROW(alloc.free(a.ptr), Error);
  int x = 0;
  EXPECT_THROW(alloc.free(&x), Error);
  EXPECT_THROW(alloc.record_use(&x, kStream2), Error);
}

TEST(CachingAllocator, ThreadsAllocatingAndFreeingLeaveNothingAllocated) {
  FakeProvider provider(256 * kMiB);
  CachingAllocator alloc(provider, 0);
  constexpr int kThreads = 8, kSteps = 3000;
  std::vector<std::thread> threads;
  std::atomic<int> corrupted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<CachingAllocator::Allocation> held;
      const StreamId stream = (t % 2 == 0) ? kStream1 : kStream2;
      for (int i = 0; i < kSteps; ++i) {
        if (held.size() < 8 && rng() % 3 != 0) {
          const size_t bytes = rng() % 4 != 0 ? 1 + rng() % (64 * kKiB) : kMiB + rng() % (4 * kMiB);
          auto a = alloc.allocate(bytes, stream);
          // Each thread's blocks carry its mark at both ends and in the
          // middle: an overlap between live blocks would overwrite another's.
          for (size_t j : {size_t(0), bytes / 2, bytes - 1}) at(a)[j] = char('a' + t);
          a.size = bytes;
          held.push_back(a);
        } else if (!held.empty()) {
          const size_t k = rng() % held.size();
          const auto a = held[k];
          for (size_t j : {size_t(0), a.size / 2, a.size - 1})
            if (at(a)[j] != char('a' + t)) ++corrupted;
          if (rng() % 4 == 0) alloc.record_use(a.ptr, kStream3);
          alloc.free(a.ptr);
          if (rng() % 16 == 0) provider.complete_stream(kStream3);
          held.erase(held.begin() + long(k));
        }
      }
      for (const auto& a : held) alloc.free(a.ptr);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_TRUE(provider.segments.empty());
}

TEST(CachingAllocator, StatsReportListsRegisteredAllocators) {
  FakeProvider provider;
  {
    CachingAllocator alloc(provider, 7);
    register_allocator_stats(alloc);
    register_allocator_stats(alloc);  // once
    const auto a = alloc.allocate(1000, kStream1);
    std::string report = allocator_stats_report();
    EXPECT_NE(report.find("PAX_CUDA_ALLOCATOR_STATS"), std::string::npos) << report;
    EXPECT_NE(report.find("cuda:7 allocator: allocated 1.0 KB"), std::string::npos) << report;
    EXPECT_EQ(report.find("cuda:7"), report.rfind("cuda:7")) << report;
    alloc.free(a.ptr);
  }
  // Gone, its last figures stay.
  const std::string report = allocator_stats_report();
  EXPECT_NE(report.find("cuda:7 allocator: allocated 0 B (peak 1.0 KB)"), std::string::npos) << report;
}

TEST(CachingAllocator, StatsAreRequestedByTheEnvironment) {
  const char* old = std::getenv("PAX_CUDA_ALLOCATOR_STATS");
  const std::string saved = old ? old : "";
  unsetenv("PAX_CUDA_ALLOCATOR_STATS");
  EXPECT_FALSE(allocator_stats_requested());
  setenv("PAX_CUDA_ALLOCATOR_STATS", "0", 1);
  EXPECT_FALSE(allocator_stats_requested());
  setenv("PAX_CUDA_ALLOCATOR_STATS", "1", 1);
  EXPECT_TRUE(allocator_stats_requested());
  if (old) {
    setenv("PAX_CUDA_ALLOCATOR_STATS", saved.c_str(), 1);
  } else {
    unsetenv("PAX_CUDA_ALLOCATOR_STATS");
  }
}

}  // namespace
}  // namespace pax::cuda

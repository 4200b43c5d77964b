// The pinned staging pool over a fake provider: host memory for "pinned"
// buffers, events whose completion the test decides, and copy functions
// that stand in for cudaMemcpyAsync.
#include "pax/backend/cuda/pinned_staging.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

class FakePinned : public PinnedProvider {
 public:
  explicit FakePinned(size_t capacity = size_t(1) << 30) : capacity(capacity) {}
  ~FakePinned() override {
    for (auto& [p, size] : buffers) std::free(p);
  }
  void* allocate_pinned(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    ++allocate_calls;
    if (used + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    buffers[p] = bytes;
    used += bytes;
    return p;
  }
  void free_pinned(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(buffers.at(ptr), bytes);
    buffers.erase(ptr);
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
  void wait_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu);
    ++waits;
    done.insert(event);  // the host blocked until the device got there
  }
  void release_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_FALSE(released.count(event)) << "event released twice";
    released.insert(event);
  }
  void complete_all() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, s] : event_stream) done.insert(id);
  }

  std::mutex mu;
  size_t capacity;
  size_t used = 0;
  std::map<void*, size_t> buffers;
  int allocate_calls = 0;
  int waits = 0;
  EventId next_event = 1;
  std::map<EventId, StreamId> event_stream;
  std::set<EventId> done, released;
};

struct Copy {
  void* dst;
  const void* src;
  size_t n;
  StreamId stream;
};

// Records each queued copy and performs it at once.
struct CopyNow {
  std::vector<Copy> copies;
  StagedCopyFn fn() {
    return [this](void* dst, const void* src, size_t n, StreamId stream) {
      copies.push_back({dst, src, n, stream});
      std::memcpy(dst, src, n);
    };
  }
};

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char((i * 31 + size_t(seed)) % 251);
  return v;
}

constexpr StreamId kStream = 0x1000;

TEST(PinnedStaging, SplitsACopyIntoBufferSizedChunks) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 4096});
  const std::vector<char> src = pattern(2560, 1);
  std::vector<char> device(2560, 0);
  CopyNow copy;
  staging.stage_to_device(device.data(), src.data(), src.size(), kStream, copy.fn());
  ASSERT_EQ(copy.copies.size(), 3u);
  EXPECT_EQ(copy.copies[0].n, 1024u);
  EXPECT_EQ(copy.copies[1].n, 1024u);
  EXPECT_EQ(copy.copies[2].n, 512u);
  EXPECT_EQ(copy.copies[1].dst, device.data() + 1024);
  EXPECT_EQ(copy.copies[2].dst, device.data() + 2048);
  for (const Copy& c : copy.copies) {
    EXPECT_EQ(c.stream, kStream);
    EXPECT_TRUE(provider.buffers.count(const_cast<void*>(c.src))) << "copied from a pinned buffer";
  }
  EXPECT_EQ(device, src);
  // One event after each chunk's copy; none waited for.
  EXPECT_EQ(provider.event_stream.size(), 3u);
  EXPECT_EQ(provider.waits, 0);
  EXPECT_EQ(staging.stats().chunks, 3u);
  EXPECT_EQ(staging.stats().buffers, 3u);
}

TEST(PinnedStaging, ReturnsBeforeTheCopyRunsAndNeedsNoMoreOfTheSource) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 4096});
  std::vector<char> src = pattern(3000, 2);
  const std::vector<char> expected = src;
  std::vector<char> device(3000, 0);
  std::vector<Copy> queued;
  staging.stage_to_device(device.data(), src.data(), src.size(), kStream,
                          [&](void* dst, const void* from, size_t n, StreamId s) {
                            queued.push_back({dst, from, n, s});
                          });
  // The caller's bytes change before the "device" runs the copies.
  std::fill(src.begin(), src.end(), char(0));
  for (const Copy& c : queued) std::memcpy(c.dst, c.src, c.n);
  EXPECT_EQ(device, expected);
}

TEST(PinnedStaging, ReusesABufferOnlyAfterItsEvent) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 2048});
  std::vector<char> device(512);
  const std::vector<char> src = pattern(512, 3);
  CopyNow copy;
  staging.stage_to_device(device.data(), src.data(), 512, kStream, copy.fn());
  staging.stage_to_device(device.data(), src.data(), 512, kStream, copy.fn());
  // The first copy's event has not completed: the second went through another buffer.
  ASSERT_EQ(copy.copies.size(), 2u);
  EXPECT_NE(copy.copies[0].src, copy.copies[1].src);
  EXPECT_EQ(provider.allocate_calls, 2);
  provider.complete_all();
  staging.stage_to_device(device.data(), src.data(), 512, kStream, copy.fn());
  EXPECT_TRUE(copy.copies[2].src == copy.copies[0].src || copy.copies[2].src == copy.copies[1].src);
  EXPECT_EQ(provider.allocate_calls, 2);
  EXPECT_EQ(provider.waits, 0);
  EXPECT_EQ(staging.stats().reuses, 1u);
  EXPECT_EQ(provider.released.size(), 1u);
}

TEST(PinnedStaging, WaitsForTheOldestCopyAtTheLimit) {
  FakePinned provider;
  // One buffer only: each later chunk waits for the copy before it.
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 1024});
  const std::vector<char> src = pattern(3072, 4);
  std::vector<char> device(3072, 0);
  CopyNow copy;
  staging.stage_to_device(device.data(), src.data(), src.size(), kStream, copy.fn());
  EXPECT_EQ(device, src);
  EXPECT_EQ(provider.allocate_calls, 1);
  EXPECT_EQ(provider.waits, 2);
  EXPECT_EQ(staging.stats().waits, 2u);
  EXPECT_EQ(staging.stats().pinned_bytes, 1024u);
  for (const Copy& c : copy.copies) EXPECT_EQ(c.src, copy.copies[0].src);
}

TEST(PinnedStaging, CopiesFromTheDeviceInChunks) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 2048});
  const std::vector<char> device = pattern(4500, 5);
  std::vector<char> host(4500, 0);
  CopyNow copy;
  staging.stage_from_device(host.data(), device.data(), device.size(), kStream, copy.fn());
  EXPECT_EQ(host, device);
  ASSERT_EQ(copy.copies.size(), 5u);
  EXPECT_EQ(copy.copies[4].n, 4500u - 4096u);
  EXPECT_EQ(copy.copies[3].src, device.data() + 3072);
  // Two buffers in turn, each waited for before its bytes are read.
  EXPECT_EQ(provider.allocate_calls, 2);
  EXPECT_EQ(provider.waits, 5);
  std::set<const void*> used;
  for (const Copy& c : copy.copies) used.insert(c.dst);
  EXPECT_EQ(used.size(), 2u);
  // Done: the buffers are idle for the next copy.
  staging.stage_to_device(host.data(), device.data(), 100, kStream, copy.fn());
  EXPECT_EQ(provider.allocate_calls, 2);
}

TEST(PinnedStaging, ThreadsShareTheBuffers) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 256, .limit_bytes = 1024});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<char> src = pattern(3000, t);
      for (int i = 0; i < 20; ++i) {
        std::vector<char> device(3000, 0), back(3000, 0);
        auto copy_now = [](void* dst, const void* from, size_t n, StreamId) { std::memcpy(dst, from, n); };
        staging.stage_to_device(device.data(), src.data(), src.size(), StreamId(t + 1), copy_now);
        staging.stage_from_device(back.data(), device.data(), device.size(), StreamId(t + 1), copy_now);
        if (back != src) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(staging.stats().pinned_bytes, 1024u);
}

TEST(PinnedStaging, TrimFreesBuffersNoCopyUses) {
  FakePinned provider;
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 4096});
  const std::vector<char> src = pattern(2048, 6);
  std::vector<char> device(2048);
  CopyNow copy;
  staging.stage_to_device(device.data(), src.data(), src.size(), kStream, copy.fn());
  staging.trim();  // both still copying
  EXPECT_EQ(provider.buffers.size(), 2u);
  provider.complete_all();
  staging.trim();
  EXPECT_TRUE(provider.buffers.empty());
  EXPECT_EQ(staging.stats().pinned_bytes, 0u);
  EXPECT_EQ(provider.released.size(), 2u);
}

TEST(PinnedStaging, ReportsBadOptionsAndMissingPinnedMemory) {
  FakePinned provider(100);
  EXPECT_THROW(PinnedStaging(provider, {.buffer_bytes = 2048, .limit_bytes = 1024}), Error);
  EXPECT_THROW(PinnedStaging(provider, {.buffer_bytes = 0, .limit_bytes = 1024}), Error);
  PinnedStaging staging(provider, {.buffer_bytes = 1024, .limit_bytes = 4096});
  char dst[16], src[16] = {};
  CopyNow copy;
  try {
    staging.stage_to_device(dst, src, sizeof src, kStream, copy.fn());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of pinned host memory: allocating a 1.0 KB staging buffer"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pax::cuda

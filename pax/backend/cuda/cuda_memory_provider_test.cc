// The CUDA runtime providers on a real device; without one (no driver or no
// GPU) every test here skips.
#include "pax/backend/cuda/cuda_memory_provider.h"

#include <gtest/gtest.h>

#include <string>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

#define PAX_SKIP_WITHOUT_CUDA_DEVICE() \
  if (device_count() == 0) GTEST_SKIP() << absence_reason()

TEST(CudaMemoryProvider, AllocatesFreesAndRecordsEvents) {
  PAX_SKIP_WITHOUT_CUDA_DEVICE();
  CudaMemoryProvider provider(0);
  void* p = provider.allocate_segment(size_t(2) << 20);
  ASSERT_NE(p, nullptr);
  provider.free_segment(p, size_t(2) << 20);
  // More than any device has: nullptr, and the error does not linger.
  EXPECT_EQ(provider.allocate_segment(size_t(1) << 50), nullptr);
  const EventId e = provider.record_event(0);
  provider.synchronize();
  EXPECT_TRUE(provider.event_done(e));
  provider.release_event(e);
  const EventId again = provider.record_event(0);  // the released event, recycled
  EXPECT_EQ(again, e);
  provider.synchronize();
  provider.release_event(again);
  const MemoryProvider::DeviceMemory memory = provider.device_memory();
  EXPECT_GT(memory.total_bytes, 0u);
  EXPECT_LE(memory.free_bytes, memory.total_bytes);
}

TEST(CudaMemoryProvider, CachingAllocatorOverTheDevice) {
  PAX_SKIP_WITHOUT_CUDA_DEVICE();
  CudaMemoryProvider provider(0);
  CachingAllocator alloc(provider, 0);
  const auto a = alloc.allocate(1000, 0, "a test buffer");
  const auto b = alloc.allocate(12 << 20, 0, "a test buffer");
  ASSERT_NE(a.ptr, nullptr);
  ASSERT_NE(b.ptr, nullptr);
  alloc.free(a.ptr);
  alloc.free(b.ptr);
  try {
    alloc.allocate(size_t(1) << 50, 0, "a test buffer");
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on cuda:0: allocating 1125.9 TB for a test buffer failed"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("device limit"), std::string::npos) << msg;
  }
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
}

TEST(CudaPinnedProvider, AllocatesAndFreesPinnedMemory) {
  PAX_SKIP_WITHOUT_CUDA_DEVICE();
  CudaPinnedProvider provider(0);
  void* p = provider.allocate_pinned(size_t(1) << 20);
  ASSERT_NE(p, nullptr);
  static_cast<char*>(p)[0] = 1;  // host memory
  const EventId e = provider.record_event(0);
  provider.wait_event(e);
  EXPECT_TRUE(provider.event_done(e));
  provider.release_event(e);
  provider.free_pinned(p, size_t(1) << 20);
}

}  // namespace
}  // namespace pax::cuda

// Host caching allocator. Requests are rounded to size classes (powers of two up
// to 1 MiB, then multiples of 1 MiB); freed blocks go to a per-class free list
// and are handed out again on the next request of the same class. Large blocks
// are 2 MiB aligned and advised for transparent huge pages. Also the record
// of the last failed operator new (its size and purpose; operator_new.cc
// reports to it), for the error that reports a std::bad_alloc.
#include "pax/core/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "pax/core/error.h"
#include "pax/core/scaled_number.h"

namespace pax {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kHugeAlign = size_t(2) << 20;

size_t size_class(size_t n) { return allocation_size_class(n); }

}  // namespace

size_t allocation_size_class(size_t n) {
  if (n <= kAlign) return kAlign;
  if (n <= kSmallLimit) {
    size_t c = kAlign;
    while (c < n) c <<= 1;
    return c;
  }
  return (n + kSmallLimit - 1) / kSmallLimit * kSmallLimit;
}

namespace {

thread_local const AllocationPurpose* t_purpose = nullptr;

// The last failed operator new, written where nothing may allocate (fixed
// storage, a spin lock) and read by whichever thread reports the
// std::bad_alloc: on a parallel_for worker it is not the one that failed.
std::atomic_flag g_failed_lock = ATOMIC_FLAG_INIT;
size_t g_failed_bytes = 0;
char g_failed_purpose[512];

class FailedLock {
 public:
  FailedLock() noexcept {
    while (g_failed_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~FailedLock() { g_failed_lock.clear(std::memory_order_release); }
};

std::atomic<MemoryLimitDescriber> g_memory_limit_describer{nullptr};

class HostAllocator {
 public:
  HostAllocator() {
    stats_.cache_limit = size_t(4) << 30;
    if (const char* env = std::getenv("PAX_ALLOCATOR_CACHE_MB")) {
      stats_.cache_limit = size_t(std::strtoull(env, nullptr, 10)) << 20;
    }
  }
  ~HostAllocator() { trim(); }

  void* allocate(size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.allocations;
      stats_.bytes_in_use += capacity;
      auto it = free_.find(capacity);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= capacity;
        ++stats_.cache_hits;
        return p;
      }
    }
    size_t align = capacity >= 2 * kHugeAlign ? kHugeAlign : kAlign;
    void* p = nullptr;
    if (posix_memalign(&p, align, capacity) != 0) {
      // Free the cache and try once more before giving up.
      trim();
      if (posix_memalign(&p, align, capacity) != 0) {
        size_t in_use = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.bytes_in_use -= capacity;
          in_use = stats_.bytes_in_use;
        }
        const std::string purpose = AllocationPurpose::describe_current();
        const std::string limit = describe_memory_limit();
        PAX_FAIL("out of host memory allocating ", format_bytes(double(capacity)), purpose.empty() ? "" : " ", purpose,
                 " (", format_bytes(double(in_use)), " in use by arrays)", limit.empty() ? "" : "; the limit is ",
                 limit);
      }
    }
    if (align == kHugeAlign) madvise(p, capacity, MADV_HUGEPAGE);
    return p;
  }

  void release(void* p, size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= capacity;
    if (stats_.bytes_cached + capacity > stats_.cache_limit) {
      std::free(p);
      return;
    }
    free_[capacity].push_back(p);
    stats_.bytes_cached += capacity;
  }

  void trim() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) std::free(p);
    }
    free_.clear();
    stats_.bytes_cached = 0;
  }

  HostAllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.cache_limit = bytes;
      if (stats_.bytes_cached <= bytes) return;
    }
    trim();
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  HostAllocatorStats stats_;
};

HostAllocator& host_allocator() {
  // Leaked on purpose: buffers held by static Arrays may be released after
  // static destructors have run.
  static HostAllocator* a = new HostAllocator();
  return *a;
}

alignas(kAlign) unsigned char g_empty_block[kAlign];

}  // namespace

std::shared_ptr<Buffer> Buffer::allocate(size_t nbytes) {
  const Device host{DeviceKind::cpu, 0};
  if (nbytes == 0) {
    return std::shared_ptr<Buffer>(new Buffer(g_empty_block, 0, 0, host, nullptr));
  }
  size_t capacity = size_class(nbytes);
  void* p = host_allocator().allocate(capacity);
  return std::shared_ptr<Buffer>(new Buffer(p, nbytes, capacity, host, nullptr));
}

std::shared_ptr<Buffer> Buffer::allocate_on(Device device, size_t nbytes) {
  if (device.kind == DeviceKind::cpu) return allocate(nbytes);
  return device_memory(device.kind).allocate(nbytes, device.index);
}

std::shared_ptr<Buffer> Buffer::wrap(void* data, size_t nbytes, size_t capacity, Device device, Release release) {
  return std::shared_ptr<Buffer>(new Buffer(data, nbytes, capacity, device, release));
}

std::shared_ptr<Buffer> Buffer::placeholder(size_t nbytes, Device device) {
  return std::shared_ptr<Buffer>(new Buffer(nullptr, nbytes, 0, device, nullptr));
}

void Buffer::take_memory_of(Buffer& other) {
  PAX_CHECK(capacity_ == 0 && data_ == nullptr && other.nbytes_ == nbytes_ && other.device_ == device_,
            "Buffer::take_memory_of: a placeholder of ", nbytes_, " bytes on ", device_, " cannot take ", other.nbytes_,
            " bytes on ", other.device_);
  std::swap(data_, other.data_);
  std::swap(capacity_, other.capacity_);
  std::swap(release_, other.release_);
}

Buffer::~Buffer() {
  if (capacity_ == 0) return;
  if (release_) {
    release_(data_, capacity_, device_);
  } else {
    host_allocator().release(data_, capacity_);
  }
}

std::string format_bytes(double bytes) {
  return format_scaled(bytes, {{1e12, " TB"}, {1e9, " GB"}, {1e6, " MB"}, {1e3, " KB"}}, 1, " B");
}

namespace detail {
// Declared in parallel.h, which hands a caller's purpose to its workers (and
// is not included here: its OpenMP pragmas are for layers built with OpenMP).
const AllocationPurpose*& thread_allocation_purpose() { return t_purpose; }
}  // namespace detail

AllocationPurpose::AllocationPurpose(std::string what) : what_(std::move(what)), outer_(t_purpose) { t_purpose = this; }

AllocationPurpose::~AllocationPurpose() { t_purpose = outer_; }

void AllocationPurpose::describe_current_to(char* out, size_t size) noexcept {
  if (size == 0) return;
  out[0] = '\0';
  if (t_purpose == nullptr) return;
  size_t used = 0;
  auto append = [&](const char* text) {
    if (used + 1 >= size) return;
    const int n = std::snprintf(out + used, size - used, "%s", text);
    used = std::min(size - 1, used + size_t(std::max(n, 0)));
  };
  append(t_purpose->what_.c_str());
  for (const AllocationPurpose* p = t_purpose->outer_; p != nullptr; p = p->outer_) {
    append(p == t_purpose->outer_ ? " (while " : ", ");
    append(p->what_.c_str());
  }
  if (t_purpose->outer_ != nullptr) append(")");
}

std::string AllocationPurpose::describe_current() {
  if (t_purpose == nullptr) return "";
  std::string text = "for " + t_purpose->what_;
  std::string outer;
  for (const AllocationPurpose* p = t_purpose->outer_; p != nullptr; p = p->outer_)
    outer += (outer.empty() ? "" : ", ") + p->what_;
  return outer.empty() ? text : text + " (while " + outer + ")";
}

void note_failed_allocation() {
  detail::record_failed_allocation(0);
  throw std::bad_alloc();
}

std::string failed_allocation_purpose() {
  // Copied out before the string allocates: an operator new failing under
  // the lock would wait on it for ever.
  char purpose[sizeof g_failed_purpose];
  {
    FailedLock lock;
    std::memcpy(purpose, g_failed_purpose, sizeof purpose);
  }
  return purpose;
}

size_t failed_allocation_bytes() {
  FailedLock lock;
  return g_failed_bytes;
}

std::string describe_memory_limit() {
  const MemoryLimitDescriber describe = g_memory_limit_describer.load();
  return describe == nullptr ? "" : describe();
}

MemoryLimitDescriber set_memory_limit_describer(MemoryLimitDescriber describe) {
  return g_memory_limit_describer.exchange(describe);
}

namespace detail {

void record_failed_allocation(size_t bytes) noexcept {
  FailedLock lock;
  if (bytes != 0) g_failed_bytes = bytes;
  AllocationPurpose::describe_current_to(g_failed_purpose, sizeof g_failed_purpose);
}

}  // namespace detail

HostAllocatorStats host_allocator_stats() { return host_allocator().stats(); }
void host_allocator_trim() { host_allocator().trim(); }
void set_host_allocator_cache_limit(size_t bytes) { host_allocator().set_limit(bytes); }

}  // namespace pax

// Buffer: a block of device memory owned by one or more Arrays, and the host
// caching allocator behind it (64-byte aligned; freed blocks are kept for reuse
// so that steady-state training allocates nothing from the OS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pax {

enum class DeviceKind : uint8_t { cpu };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};

class Buffer {
 public:
  // Allocates `nbytes` (uninitialised). Zero bytes gives a valid, aligned,
  // never-dereferenced pointer.
  static std::shared_ptr<Buffer> allocate(size_t nbytes, Device device = {});
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Buffer(void* data, size_t nbytes, size_t capacity, Device device)
      : data_(data), nbytes_(nbytes), capacity_(capacity), device_(device) {}
  void* data_;
  size_t nbytes_;
  size_t capacity_;  // size of the block actually held (a size class)
  Device device_;
};

struct HostAllocatorStats {
  size_t bytes_in_use = 0;  // held by live buffers (size-class rounded)
  size_t bytes_cached = 0;  // freed blocks kept for reuse
  size_t cache_limit = 0;   // cached bytes beyond this go back to the OS
  uint64_t allocations = 0;
  uint64_t cache_hits = 0;
};

// Names what this thread's allocations are for while it lives (scopes nest):
// a failed allocation then says so, e.g. "out of host memory allocating
// 6.2 GB for the intermediates of 'train_step' (while training step 7)".
class AllocationPurpose {
 public:
  explicit AllocationPurpose(std::string what);
  ~AllocationPurpose();
  AllocationPurpose(const AllocationPurpose&) = delete;
  AllocationPurpose& operator=(const AllocationPurpose&) = delete;
  // "for X (while Y)" for the scopes open on this thread, or "".
  static std::string describe_current();
  // "X (while Y)" (no "for"), cut to fit `size` with its terminating NUL;
  // allocates nothing, for a failed allocation to use.
  static void describe_current_to(char* out, size_t size) noexcept;

 private:
  std::string what_;
  const AllocationPurpose* outer_;
};

// A std::new_handler (std::set_new_handler) that keeps the purpose open at a
// failed operator new for failed_allocation_purpose(), then throws
// std::bad_alloc as the default would. pax's operator new (operator_new.cc) keeps
// the size and the purpose of a failed request itself, handler or not.
void note_failed_allocation();
// What the last failed operator new was for: "X" or "X (while Y, Z)" for the
// scopes open on the thread that asked (on a parallel_for worker, its
// caller's); "" if none was open.
std::string failed_allocation_purpose();
// The bytes the last failed operator new asked for; 0 if none failed (or
// operator new is another's, e.g. a preloaded allocator's).
size_t failed_allocation_bytes();

namespace detail {
// Called by pax's operator new (operator_new.cc) when malloc fails; `bytes`
// 0 where the size is not known (the new handler).
void record_failed_allocation(size_t bytes) noexcept;
}  // namespace detail

// The memory limit that applies to this process, as a phrase ("the
// address-space limit (ulimit -v / RLIMIT_AS) of 150.0 MB"), for errors about
// memory. The CPU backend installs pax::cpu::memory_limit_description
// (backend/cpu/host_memory.h) when it loads; "" while none is installed.
using MemoryLimitDescriber = std::string (*)();
std::string describe_memory_limit();
// Installs `describe` (nullptr: none) and returns the one it replaces.
MemoryLimitDescriber set_memory_limit_describer(MemoryLimitDescriber describe);

// "12.3 GB", "45.6 MB", "789.0 KB" or "12 B" (decimal units).
std::string format_bytes(double bytes);

HostAllocatorStats host_allocator_stats();
// Returns every cached block to the OS.
void host_allocator_trim();
// Limits the cached bytes (default 4 GiB, or $PAX_ALLOCATOR_CACHE_MB).
void set_host_allocator_cache_limit(size_t bytes);

}  // namespace pax

// Buffer: a block of device memory owned by one or more Arrays, and the host
// caching allocator behind the CPU's buffers (64-byte aligned; freed blocks
// are kept for reuse so that steady-state training allocates nothing from the
// OS). Another platform's backend wraps its own memory (Buffer::wrap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pax/core/device.h"

namespace pax {

class Buffer {
 public:
  // Allocates `nbytes` of host memory (uninitialised), a buffer of the CPU
  // device; kernels' scratch comes from here too. Zero bytes gives a valid,
  // aligned, never-dereferenced pointer.
  static std::shared_ptr<Buffer> allocate(size_t nbytes);
  // `nbytes` (uninitialised) on `device`, from its backend's allocator.
  static std::shared_ptr<Buffer> allocate_on(Device device, size_t nbytes);
  // Returns a block of `capacity` bytes to the allocator it came from.
  using Release = void (*)(void* data, size_t capacity, Device device);
  // A buffer over memory a backend allocated; `release` gets it back.
  static std::shared_ptr<Buffer> wrap(void* data, size_t nbytes, size_t capacity, Device device, Release release);
  // A buffer of `nbytes` on `device` that holds no memory yet: a backend
  // that runs work asynchronously hands it out as a result and gives it its
  // memory (take_memory_of) when the work runs, in order with its other work.
  static std::shared_ptr<Buffer> placeholder(size_t nbytes, Device device);
  // Moves the memory of `other` (same size and device) into this placeholder;
  // `other` is left holding none.
  void take_memory_of(Buffer& other);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Buffer(void* data, size_t nbytes, size_t capacity, Device device, Release release)
      : data_(data), nbytes_(nbytes), capacity_(capacity), device_(device), release_(release) {}
  void* data_;
  size_t nbytes_;
  size_t capacity_;  // size of the block actually held (a size class)
  Device device_;
  Release release_;  // nullptr: the host cache
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

// The block size a caching allocator hands out for `nbytes`: powers of two
// from 64 bytes up to 1 MiB, then whole MiB (the host cache's classes; the
// sim device's allocator uses them too).
size_t allocation_size_class(size_t nbytes);

// "12.3 GB", "45.6 MB", "789.0 KB" or "12 B" (decimal units).
std::string format_bytes(double bytes);

HostAllocatorStats host_allocator_stats();
// Returns every cached block to the OS.
void host_allocator_trim();
// Limits the cached bytes (default 4 GiB, or $PAX_ALLOCATOR_CACHE_MB).
void set_host_allocator_cache_limit(size_t bytes);

}  // namespace pax

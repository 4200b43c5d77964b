// The device interface: a small table of functions per backend (as in
// ggml-backend). The CPU backend is the only one today; a CUDA backend adds
// its own table and its kernels in each primitive's PrimDef.
#pragma once

#include <cstddef>
#include <memory>

#include "pax/backend/kernel.h"
#include "pax/core/buffer.h"
#include "pax/ir/prims.h"

namespace pax {

struct Backend {
  const char* name;  // "cpu"
  DeviceKind kind;
  // Uninitialised device memory for `nbytes` (64-byte aligned on the CPU).
  std::shared_ptr<Buffer> (*allocate)(size_t nbytes);
  // Device-local copy of `nbytes`.
  void (*copy)(void* dst, const void* src, size_t nbytes);
  // The kernel that runs `prim` on this device, or nullptr when it has none.
  KernelFn (*kernel)(Prim prim);
  // Waits until queued work has finished (the CPU runs synchronously).
  void (*synchronize)();
  // Worker threads used by kernels (OpenMP on the CPU, shared with oneDNN).
  int (*num_threads)();
  void (*set_num_threads)(int n);
};

const Backend& cpu_backend();

// Shorthands for the CPU thread count.
inline int num_threads() { return cpu_backend().num_threads(); }
inline void set_num_threads(int n) { cpu_backend().set_num_threads(n); }

}  // namespace pax

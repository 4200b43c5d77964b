// The device interface: a table of functions per backend (as in
// ggml-backend). Everything below the backends (eager execution, control
// flow, the compiler) reaches a device only through this table, so a backend
// is one folder that registers its table (the CPU's: pax/backend/cpu/).
//
// The table has three parts: memory and threads; the kernels that run one
// primitive on concrete buffers (kernel.h's calling convention); and what
// the backend-neutral compiler (pax/compile) asks of it, ending in the hook
// that turns a jaxpr into an Executable the backend runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pax/backend/kernel.h"
#include "pax/core/buffer.h"
#include "pax/ir/elementwise_ops.h"
#include "pax/ir/executable.h"
#include "pax/ir/prims.h"

namespace pax {

struct LoopProgram;  // pax/compile/loop_program.h

struct Backend {
  const char* name;  // "cpu"
  DeviceKind kind;

  // --- Memory and threads ---
  // Uninitialised device memory for `nbytes` (64-byte aligned on the CPU).
  std::shared_ptr<Buffer> (*allocate)(size_t nbytes);
  // Device-local copy of `nbytes`.
  void (*copy)(void* dst, const void* src, size_t nbytes);
  // Waits until queued work has finished (the CPU runs synchronously).
  void (*synchronize)();
  // Worker threads used by kernels (OpenMP on the CPU, shared with oneDNN).
  int (*num_threads)();
  void (*set_num_threads)(int n);

  // --- Kernels ---
  // The kernel that runs `prim` on this device, or nullptr when it has none.
  KernelFn (*kernel)(Prim prim);

  // --- What the compiler asks ---
  // Whether the kernel of `eqn` (in `jaxpr`) computes it as typed; false
  // where the compiler should rewrite it (a 16-bit product the device cannot
  // multiply becomes converts around an f32 product: compile/passes/widen.cc).
  bool (*supports_op)(const Jaxpr& jaxpr, const Eqn& eqn);
  // Whether a fused loop may end in a reduction of the domain seen as
  // (outer, n, inner) of `dtype` values.
  bool (*fusable_reduction)(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner);
  // Whether a fused loop may run one tile of rows at a time inside a row
  // sweep (compile/row_sweep.h): each element's result may not depend on
  // where the loop's blocks start.
  bool (*tileable_loop)(const LoopProgram& program);
  // Whether a row sweep may reduce (op) rows of `n` `dtype` values into
  // `out_dtype`, one tile of rows at a time, with the bits of the unfused
  // reduction.
  bool (*row_reduction_in_sweep)(ReduceOp op, DType dtype, DType out_dtype, int64_t n);
  // Compiles a jaxpr into an executable of this backend (pax/compile/lower.h
  // gives the backend-neutral part).
  std::shared_ptr<Executable> (*compile)(JaxprPtr jaxpr, const CompileOptions& options);
};

// Makes `backend` the default (the one eager execution, jit and allocation
// use). A backend library registers its table when it is loaded; the last
// registration wins.
void register_backend(const Backend& backend);

// The default backend; throws pax::Error when no backend library is linked.
const Backend& default_backend();

// Shorthands for the default backend's thread count.
inline int num_threads() { return default_backend().num_threads(); }
inline void set_num_threads(int n) { default_backend().set_num_threads(n); }

}  // namespace pax

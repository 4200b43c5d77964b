// The device interface: a table of functions per platform (as in
// ggml-backend). Everything below the backends (eager execution, control
// flow, the compiler) reaches a device only through this table, so a backend
// is one folder that registers its table (the CPU's: pax/backend/cpu/, the
// test device's: pax/backend/sim/). Several backends serve at once, each
// for the devices of its platform.
//
// The table has four parts: memory, streams and threads; the kernels that
// run one primitive on concrete buffers (kernel.h's calling convention) and
// how they are launched; control flow a device runs itself; and compiling:
// which operations it supports as typed, and the hook that turns a jaxpr
// into an Executable the backend runs.
//
// A device runs its work in order on one stream. Work may finish after the
// call that queued it returns: a result's buffer is ready when the work
// queued before an event has run, and host reads (DeviceMemory::to_host)
// wait for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "pax/backend/kernel.h"
#include "pax/core/buffer.h"
#include "pax/ir/elementwise_ops.h"
#include "pax/ir/executable.h"
#include "pax/ir/prims.h"

namespace pax {

struct Backend {
  const char* name;  // "cpu", "sim"
  DeviceKind kind;

  // --- What it is ---
  // One line on device `index` ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs,
  // 79.1 GiB"), and why the platform has no device when it has none.
  std::string (*describe)(int index);
  std::string (*absence_reason)();
  // The peak FLOP/s of device `index` for matmuls computed in compute_dtype,
  // described in `how` ("989.4 TFLOP/s bf16 dense (H100 SXM / H200
  // datasheet)"), MFU's denominator; nullptr: the CPU's table
  // (pax/train/peak_flops.h) applies.
  double (*peak_flops)(int index, DType compute_dtype, std::string* how);

  // --- Memory, streams and threads ---
  // Allocation (a caching allocator; memory freed by the host is reused by
  // work queued later on the device's stream), copies to and from the host
  // and between buffers; installed into the array core (pax/core/device.h).
  DeviceMemory memory;
  // An event: the number of the work queued on `device` so far. wait_event
  // returns once that work has run (the CPU runs synchronously: no-ops).
  uint64_t (*record_event)(int device);
  void (*wait_event)(int device, uint64_t event);
  // Waits until the work queued on `device` has finished, and reports (as
  // pax::Error) the first failure of work that ran after the call queueing
  // it had returned.
  void (*synchronize)(int device);
  // Worker threads used by kernels (OpenMP on the CPU, shared with oneDNN).
  int (*num_threads)();
  void (*set_num_threads)(int n);

  // --- Kernels ---
  // The kernel that runs `prim` on this device, or nullptr when it has none.
  KernelFn (*kernel)(Prim prim);
  // Runs `kernel` over `inputs` into `outputs` (allocated on `device`) on
  // the device's stream; holds the arrays until it has run.
  void (*launch)(int device, KernelFn kernel, const Params& params, std::vector<Array> inputs,
                 std::vector<Array> outputs);

  // --- Control flow on the device ---
  // while_loop where the device reads its own predicate (no host round trip
  // per iteration): the final carry of `body` applied while `cond` holds;
  // nullptr: the host reads each predicate.
  std::vector<Array> (*run_while)(int device, std::shared_ptr<Executable> cond, std::shared_ptr<Executable> body,
                                  std::vector<Array> cond_consts, std::vector<Array> body_consts,
                                  std::vector<Array> carry);
  // cond where the device reads the index (clamped to the branches) and
  // runs that branch on `operands`; nullptr: the host reads the index.
  std::vector<Array> (*run_cond)(int device, Array index, std::vector<std::shared_ptr<Executable>> branches,
                                 std::vector<Array> operands);

  // --- Compiling ---
  // Whether the kernel of `eqn` (in `jaxpr`) computes it as typed; false
  // where the compiler should rewrite it (a 16-bit product the device cannot
  // multiply becomes converts around an f32 product: compile/passes/widen.cc).
  // What the compiler asks about fused loops is the compile hook's own
  // business (pax/compile/lowering_target.h).
  bool (*supports_op)(const Jaxpr& jaxpr, const Eqn& eqn);
  // Compiles a jaxpr into an executable that runs on `device` of this
  // backend (pax/compile/lower.h gives the backend-neutral part).
  std::shared_ptr<Executable> (*compile)(JaxprPtr jaxpr, const CompileOptions& options, Device device);
};

// Makes `backend` serve the devices of its platform (installing its memory
// functions into the array core). A backend library registers its table
// when it is loaded.
void register_backend(const Backend& backend);

// The backend of `device`'s platform; throws pax::Error when none is linked.
const Backend& backend_for(Device device);
// The backend of `kind`, or nullptr when none is linked.
const Backend* find_backend(DeviceKind kind);
// Every platform paxcc knows, a line per device present and a line for each
// platform without one (why: no device, or not built in), as paxcc
// --list_devices prints it.
std::string device_report();
const Backend& backend_for(DeviceKind kind);

// The backend of the default device (pax/core/device.h).
const Backend& default_backend();

// Where an operation on `inputs` runs, by JAX's rule: the device of the
// committed inputs (two devices among them are a pax::Error naming both, for
// `what`), else the default device (where uncommitted arrays are made), and
// whether the results are committed (any input is). Tracers are skipped.
struct Placement {
  Device device;
  bool committed = false;
};
// When an uncommitted input lives elsewhere, `moved` receives the inputs
// with those brought to the device; otherwise it is left empty and the
// inputs are used as they are (the common case: nothing is copied).
Placement place_operands(std::span<const Array> inputs, std::vector<Array>& moved, const char* what);
// The same, moving within `inputs`.
Device place_operands(std::vector<Array>& inputs, const char* what);

// Brings the arguments of an executable of `device` there: uncommitted ones
// are moved, a committed one elsewhere is a pax::Error naming both devices.
void bring_arguments(std::vector<Array>& args, Device device, const char* what);

// Compiles `jaxpr` for `device`.
std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options, Device device);

// Shorthands for the default backend's thread count.
inline int num_threads() { return default_backend().num_threads(); }
inline void set_num_threads(int n) { default_backend().set_num_threads(n); }

}  // namespace pax

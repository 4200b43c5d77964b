// The CPU backend: its function table (registered for the cpu platform when
// the library is loaded) and its kernel lookup.
#pragma once

#include <memory>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/compile/lowering_target.h"

namespace pax::cpu {

// The CPU's table (see Backend).
const Backend& cpu_backend();
// What the CPU's compile hook answers the compiler (its fused loops).
const LoweringTarget& cpu_lowering_target();

// Compiles `jaxpr` into a CPU executable (Backend::compile).
std::shared_ptr<Executable> compile_for_cpu(JaxprPtr jaxpr, const CompileOptions& options, Device device);
// Compiles `jaxpr` into an executable that runs the CPU's kernels and fused
// loops over buffers of `memory`'s platform on `device` (the CPU's, or the
// sim device's, whose backend runs it on its stream thread), with `context`
// (the device's kernel context: their scratch memory comes from it).
std::shared_ptr<Executable> compile_cpu_program(JaxprPtr jaxpr, const CompileOptions& options, const Backend& memory,
                                                Device device, const KernelContext& context);

}  // namespace pax::cpu

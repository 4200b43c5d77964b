// The CPU backend: its function table (registered as the default backend
// when the library is loaded) and its kernel lookup.
#pragma once

#include <memory>

#include "pax/backend/backend.h"

namespace pax::cpu {

// The CPU's table (see Backend).
const Backend& cpu_backend();

// The CPU kernel of `prim`, or nullptr.
KernelFn cpu_kernel(Prim prim);

// Compiles `jaxpr` into a CPU executable (Backend::compile).
std::shared_ptr<Executable> compile_for_cpu(JaxprPtr jaxpr, const CompileOptions& options);

}  // namespace pax::cpu

// The CPU backend: its function table (registered as the default backend
// when the library is loaded) and its kernel lookup.
#pragma once

#include <memory>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/kernels.h"

namespace pax::cpu {

// The CPU's table (see Backend).
const Backend& cpu_backend();

// Compiles `jaxpr` into a CPU executable (Backend::compile).
std::shared_ptr<Executable> compile_for_cpu(JaxprPtr jaxpr, const CompileOptions& options);

}  // namespace pax::cpu

// Programs on a CUDA device. Today an executable runs its program's
// equations one at a time through the device's kernels (each queued on the
// device's stream, so the host does not wait between them); the compiled
// executable (generated fused kernels, the memory plan's arena) replaces it
// as the generated kernels land.
#pragma once

#include <memory>

#include "pax/ir/executable.h"

namespace pax::cuda {

std::shared_ptr<Executable> compile_for_cuda(JaxprPtr jaxpr, const CompileOptions& options, Device device);

}  // namespace pax::cuda

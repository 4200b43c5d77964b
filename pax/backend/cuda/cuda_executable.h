// Programs on a CUDA device: the backend-neutral lowering run on the
// device's stream, fused groups and row sweeps as generated kernels
// (cuda_executable.cc), intermediates in an arena kept from call to call,
// donated arguments' buffers reused by outputs.
#pragma once

#include <memory>

#include "pax/ir/executable.h"

namespace pax::cuda {

std::shared_ptr<Executable> compile_for_cuda(JaxprPtr jaxpr, const CompileOptions& options, Device device);

}  // namespace pax::cuda

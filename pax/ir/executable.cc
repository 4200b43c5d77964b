// Program: a jit_call's jaxpr and its executables, compiled on first use on
// each device.
#include "pax/ir/executable.h"

#include "pax/backend/backend.h"

namespace pax {

std::shared_ptr<Executable> Program::executable(Device device) const {
  // Held while compiling, so that concurrent first calls compile once.
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [d, exe] : executables_)
    if (d == device) return exe;
  std::shared_ptr<Executable> exe = compile(jaxpr_, options_, device);
  executables_.emplace_back(device, exe);
  return exe;
}

std::string Program::str() const { return name_ + "=" + jaxpr_->str(); }

}  // namespace pax

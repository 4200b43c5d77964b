// Program: a jit_call's jaxpr and its executable, compiled on first use.
#include "pax/ir/executable.h"

namespace pax {

std::shared_ptr<Executable> Program::executable() const {
  std::call_once(once_, [this] { executable_ = compile(jaxpr_, options_); });
  return executable_;
}

std::string Program::str() const { return name_ + "=" + jaxpr_->str(); }

}  // namespace pax

// The sharding plan's description for messages.
#include "pax/nn/sharding_plan.h"

#include <string>

namespace pax::nn {

std::string ShardingPlan::describe_splits() const {
  std::string out;
  auto add = [&out](const TensorParallelOptions& axis, const char* what) {
    if (!axis.enabled()) return;
    out += (out.empty() ? "" : " and ") + ("the mesh's " + axis.axis + " axis of " + std::to_string(axis.size)) + " (" +
           what + ")";
  };
  if (fsdp.enabled()) add({.axis = fsdp.axis, .size = fsdp.size}, "fully sharded data parallelism");
  add(tp, "tensor parallelism");
  add(stage, "pipeline parallelism");
  return out;
}

}  // namespace pax::nn

// The cost of a schedule, behind Executable::cost().
#pragma once

#include "pax/ir/executable.h"
#include "pax/compile/fusion.h"

namespace pax {

// Cost of a schedule: fused loops access their inputs and outputs once.
CostAnalysis schedule_cost(const Jaxpr& jaxpr, const StepSchedule& schedule);

}  // namespace pax

// Cost model helpers behind cost_analysis() and Executable::cost().
#pragma once

#include "pax/compile/executable.h"
#include "pax/compile/fusion.h"

namespace pax {

// FLOPs and transcendentals of one equation (bytes left at zero).
CostAnalysis eqn_flops(const Jaxpr& jaxpr, const Eqn& eqn);

// Cost of a schedule: fused loops access their inputs and outputs once.
CostAnalysis schedule_cost(const Jaxpr& jaxpr, const Schedule& schedule);

}  // namespace pax

// The backend-neutral compiler: from a traced jaxpr to what a backend needs
// to run it. lower() binds the constant arguments, runs the passes
// (passes/passes.h), groups elementwise work into fused loops (fusion.h),
// starts collectives early (collective_order.h), finds row sweeps (row_sweep.h), lets products write their transposed
// results, costs the schedule and plans memory (memory_plan.h). A backend's
// compile hook (Backend::compile) calls it and wraps the result in an
// executable of its own (the CPU's: pax/backend/cpu/cpu_executable.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pax/compile/lowering_target.h"
#include "pax/compile/fusion.h"
#include "pax/compile/memory_plan.h"
#include "pax/ir/executable.h"

namespace pax {

struct LoweredProgram {
  JaxprPtr source;        // the program as traced (its inputs and outputs are the executable's)
  size_t skip = 0;        // leading arguments bound as constants (CompileOptions::constant_args)
  Jaxpr jaxpr;            // after the passes, constants bound
  StepSchedule schedule;  // its steps, fused loops and row sweeps
  MemoryPlan plan;        // where every value lives
  // Per step: the element strides its output is written with (a product
  // whose transpose was folded into it; TensorView::strides), or empty.
  std::vector<std::vector<int64_t>> out_strides;
  CostAnalysis cost;  // of the schedule
};

// Lowers `jaxpr` for `target` (which says which products it multiplies
// natively and which loops and reductions it can fuse).
LoweredProgram lower(JaxprPtr jaxpr, const CompileOptions& options, const LoweringTarget& target);

}  // namespace pax

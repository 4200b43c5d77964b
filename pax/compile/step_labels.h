// What a backend's executable calls its steps in PAX_PROFILE's table and in
// traces: a label per step (the operation and the shapes it reads and
// writes) and a category (products, attention, fused loops, ...), and a
// label per row sweep naming the steps it runs together.
#pragma once

#include <string>
#include <vector>

#include "pax/compile/fusion.h"

namespace pax {

struct StepLabels {
  // Per step: "dot_general[dimension_numbers=...] f32[8,256], f32[256,64] ->
  // f32[8,64]" or "fusion{mul, add, tanh} f32[...] -> f32[...]".
  std::vector<std::string> steps;
  // Per step: "gemm", "attention", "fusion", "impl" or "kernel".
  std::vector<const char*> categories;
  // Per row sweep: "sweep{<its steps' labels, '; ' apart>}" (category "sweep").
  std::vector<std::string> sweeps;
};

StepLabels label_steps(const Jaxpr& jaxpr, const StepSchedule& schedule);

}  // namespace pax

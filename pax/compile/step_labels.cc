// Step labels and categories for profiles and traces (step_labels.h).
#include "pax/compile/step_labels.h"

#include "pax/ir/prims.h"

namespace pax {
namespace {

std::string avals_str(const Jaxpr& j, const std::vector<Var>& vars) {
  std::string s;
  for (Var v : vars) s += (s.empty() ? "" : ", ") + j.aval(v).str();
  return s;
}

const char* step_category(const Jaxpr& j, const Step& step) {
  if (step.kind == Step::Kind::fused) return "fusion";
  if (step.kind == Step::Kind::impl) return "impl";
  const Prim p = j.eqns[step.index].prim;
  if (p == Prim::dot_general || p == Prim::conv_general_dilated) return "gemm";
  if (p == Prim::dot_product_attention || p == Prim::dot_product_attention_bwd) return "attention";
  return "kernel";
}

std::string step_label(const Jaxpr& j, const StepSchedule& schedule, const Step& step) {
  std::string name;
  if (step.kind == Step::Kind::fused) {
    for (size_t e : schedule.groups[step.index].eqns)
      name += (name.empty() ? "" : ", ") + std::string(prim_name(j.eqns[e].prim));
    name = "fusion{" + name + "}";
  } else {
    const Eqn& eqn = j.eqns[step.index];
    name = prim_name(eqn.prim);
    // Which axes a product contracts decides its kernel's speed.
    if (eqn.prim == Prim::dot_general) name += "[" + eqn.params.str() + "]";
  }
  return name + " " + avals_str(j, schedule.inputs(j, step)) + " -> " + avals_str(j, schedule.outputs(j, step));
}

}  // namespace

StepLabels label_steps(const Jaxpr& jaxpr, const StepSchedule& schedule) {
  StepLabels out;
  for (const Step& step : schedule.steps) {
    out.steps.push_back(step_label(jaxpr, schedule, step));
    out.categories.push_back(step_category(jaxpr, step));
  }
  for (const RowSweep& sw : schedule.sweeps) {
    std::string label;
    for (size_t k = sw.first; k <= sw.last; ++k)
      if (schedule.steps[k].kind != Step::Kind::alias) label += (label.empty() ? "" : "; ") + out.steps[k];
    out.sweeps.push_back("sweep{" + label + "}");
  }
  return out;
}

}  // namespace pax

// The cost of a schedule (Executable::cost()): FLOPs per equation as the
// jaxpr's cost model counts them, bytes as every step reading its inputs and
// writing its outputs once (a fused loop's values in between move nothing).
#include "pax/compile/cost.h"

namespace pax {
namespace {

double nbytes(const Jaxpr& j, Var v) { return double(j.aval(v).shape.numel()) * double(itemsize(j.aval(v).dtype)); }

void add(CostAnalysis& a, const CostAnalysis& b) {
  a.flops += b.flops;
  a.transcendentals += b.transcendentals;
  a.bytes_accessed += b.bytes_accessed;
}

}  // namespace

CostAnalysis schedule_cost(const Jaxpr& j, const StepSchedule& s) {
  CostAnalysis c;
  for (const Step& step : s.steps) {
    if (step.kind == Step::Kind::alias) continue;
    if (step.kind == Step::Kind::fused) {
      for (size_t m : s.groups[step.index].eqns) add(c, eqn_flops(j, j.eqns[m]));
    } else {
      add(c, eqn_flops(j, j.eqns[step.index]));
    }
    for (Var v : s.inputs(j, step)) c.bytes_accessed += nbytes(j, v);
    for (Var v : s.outputs(j, step)) c.bytes_accessed += nbytes(j, v);
  }
  return c;
}

}  // namespace pax

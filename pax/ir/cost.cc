// The cost model of a jaxpr as traced: FLOPs per equation from prims.def's
// cost column, bytes as every equation reading its inputs and writing its
// outputs (see CostAnalysis in executable.h).
#include "pax/ir/executable.h"

#include <algorithm>
#include <cmath>

#include "pax/core/error.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

double numel(const Jaxpr& j, Var v) { return double(j.aval(v).shape.numel()); }
double nbytes(const Jaxpr& j, Var v) { return numel(j, v) * double(itemsize(j.aval(v).dtype)); }

double product(const Shape& s, const Ints& dims) {
  double n = 1;
  for (int64_t d : dims) n *= double(s[d]);
  return n;
}

void add(CostAnalysis& a, const CostAnalysis& b) {
  a.flops += b.flops;
  a.transcendentals += b.transcendentals;
  a.bytes_accessed += b.bytes_accessed;
}

}  // namespace

namespace {

// Flops of a primitive whose prims.def cost is `special`.
double special_flops(const Jaxpr& j, const Eqn& e, double out, double in) {
  switch (e.prim) {
    case Prim::reduce_window_max:
    case Prim::select_and_gather_add:
    case Prim::select_and_scatter_add: {
      // A comparison per element of each window (over the windowed shape).
      double window = 1;
      for (int64_t k : e.params.ints("window_dimensions")) window *= double(k);
      const Var windowed = e.prim == Prim::select_and_scatter_add ? e.inputs[0] : e.outputs[0];
      return numel(j, windowed) * window;
    }
    case Prim::dot_general: return 2 * out * product(j.aval(e.inputs[0]).shape, e.params.ints("lhs_contracting_dims"));
    case Prim::conv_general_dilated: {
      const Shape& k = j.aval(e.inputs[1]).shape;
      const Ints& spec = e.params.ints("rhs_spec");  // (out features, in features, spatial...)
      return 2 * out * double(k[spec[1]]) * product(k, Ints(spec.begin() + 2, spec.end()));
    }
    case Prim::sort: {
      const double n = double(j.aval(e.inputs[0]).shape[e.params.i("dimension")]);
      return in * std::max(1.0, std::ceil(std::log2(n)));  // comparisons
    }
    case Prim::scatter_add: return numel(j, e.inputs[2]);
    case Prim::dot_product_attention:
    case Prim::dot_product_attention_bwd: {
      // The two products of the forward (logits, output), 2 B N T S H each;
      // the backward's four (dv, dp, dq, dk), as the model's FLOPs count
      // them (the recomputed logits are the kernel's own work).
      const Shape& q = j.aval(e.inputs[0]).shape;
      const double bnth = double(q[0]) * double(q[1]) * double(q[2]) * double(q[3]);
      const double s = double(j.aval(e.inputs[1]).shape[1]);
      return (e.prim == Prim::dot_product_attention ? 4 : 8) * bnth * s;
    }
    default: PAX_FAIL("cost: ", prim_name(e.prim), " has a special cost in prims.def but no formula here");
  }
}

}  // namespace

CostAnalysis eqn_flops(const Jaxpr& j, const Eqn& e) {
  CostAnalysis c;
  const double out = e.outputs.empty() ? 0 : numel(j, e.outputs[0]);
  const double in = e.inputs.empty() ? 0 : numel(j, e.inputs[0]);
  switch (prim_cost(e.prim)) {
    case PrimCost::none: break;
    case PrimCost::transcendental: c.transcendentals = out; break;
    case PrimCost::elementwise: c.flops = out; break;
    case PrimCost::per_input: c.flops = in; break;
    case PrimCost::special: c.flops = special_flops(j, e, out, in); break;
  }
  return c;
}

CostAnalysis cost_analysis(const Jaxpr& j) {
  CostAnalysis c;
  for (const Eqn& e : j.eqns) {
    if (e.prim == Prim::jit_call) {
      add(c, cost_analysis(*e.params.object<Program>("program")->jaxpr()));
      continue;
    }
    add(c, eqn_flops(j, e));
    if (prim_def(e.prim).output_aliases_input >= 0) continue;
    for (Var v : e.inputs) c.bytes_accessed += nbytes(j, v);
    for (Var v : e.outputs) c.bytes_accessed += nbytes(j, v);
  }
  return c;
}

}  // namespace pax

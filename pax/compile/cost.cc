// The cost model (see CostAnalysis in executable.h).
#include "pax/compile/cost.h"

#include <cmath>

#include "pax/prims/registry.h"

namespace pax {
namespace {

double numel(const Jaxpr& j, Var v) { return double(j.aval(v).shape.numel()); }
double nbytes(const Jaxpr& j, Var v) { return numel(j, v) * double(itemsize(j.aval(v).dtype)); }

bool is_transcendental(Prim p) {
  switch (p) {
    case Prim::exp: case Prim::expm1: case Prim::log: case Prim::log1p: case Prim::sqrt: case Prim::rsqrt:
    case Prim::tanh: case Prim::logistic: case Prim::erf: case Prim::erf_inv: case Prim::sin: case Prim::cos:
    case Prim::pow:
      return true;
    default:
      return false;
  }
}

bool is_elementwise(Prim p) {
  return (p >= Prim::neg && p <= Prim::convert_element_type) || (p >= Prim::add && p <= Prim::select_n) ||
         p == Prim::threefry2x32 || p == Prim::random_bits;
}

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

CostAnalysis eqn_flops(const Jaxpr& j, const Eqn& e) {
  CostAnalysis c;
  const double out = e.outputs.empty() ? 0 : numel(j, e.outputs[0]);
  const double in = e.inputs.empty() ? 0 : numel(j, e.inputs[0]);
  if (is_transcendental(e.prim)) {
    c.transcendentals = out;
  } else if (is_elementwise(e.prim)) {
    c.flops = out;
  } else {
    switch (e.prim) {
      case Prim::reduce_window_max: case Prim::select_and_gather_add: case Prim::select_and_scatter_add: {
        // A comparison per element of each window (over the windowed shape).
        double window = 1;
        for (int64_t k : e.params.ints("window_dimensions")) window *= double(k);
        const Var windowed = e.prim == Prim::select_and_scatter_add ? e.inputs[0] : e.outputs[0];
        c.flops = numel(j, windowed) * window;
        break;
      }
      case Prim::dot_general:
        c.flops = 2 * out * product(j.aval(e.inputs[0]).shape, e.params.ints("lhs_contracting_dims"));
        break;
      case Prim::conv_general_dilated: {
        const Shape& k = j.aval(e.inputs[1]).shape;
        const Ints& spec = e.params.ints("rhs_spec");  // (out features, in features, spatial...)
        c.flops = 2 * out * double(k[spec[1]]) * product(k, Ints(spec.begin() + 2, spec.end()));
        break;
      }
      case Prim::reduce_sum: case Prim::reduce_max: case Prim::reduce_min: case Prim::reduce_prod:
      case Prim::reduce_and: case Prim::reduce_or: case Prim::argmax: case Prim::argmin: case Prim::cumsum:
      case Prim::psum: case Prim::pmax: case Prim::pmin: case Prim::top_k:
        c.flops = in;
        break;
      case Prim::sort: {
        const double n = double(j.aval(e.inputs[0]).shape[e.params.i("dimension")]);
        c.flops = in * std::max(1.0, std::ceil(std::log2(n)));  // comparisons
        break;
      }
      case Prim::scatter_add:
        c.flops = numel(j, e.inputs[2]);
        break;
      default:
        break;
    }
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

CostAnalysis schedule_cost(const Jaxpr& j, const Schedule& s) {
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

// Widening 16-bit products the backend has no kernel for: a dot_general of
// bf16 / f16 operands that the backend would run by widening them to f32 on
// every call becomes convert -> f32 dot_general -> convert in the program, so
// the widening joins the fused loop that produces each operand (its f32 copy
// is written once, by that loop, instead of the bf16 value being written,
// read back and widened), a weight used by the forward and the backward
// product is widened once (cse), and the rounding of the result joins the
// loop that consumes it. The values are those of the kernel's own widening:
// widening is exact, the f32 product accumulates in f32 as the 16-bit kernels
// do, and the result is rounded once to the product's dtype.
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {
namespace {

bool is_16bit_float(DType d) { return d == DType::bf16 || d == DType::f16; }

}  // namespace

Jaxpr widen_products(const Jaxpr& j, const NativeProduct& native) {
  Jaxpr out = passes::copy_header(j);
  bool changed = false;
  for (const Eqn& e : j.eqns) {
    if (e.prim != Prim::dot_general || !is_16bit_float(j.aval(e.inputs[0]).dtype) || native(j, e)) {
      out.eqns.push_back(e);
      continue;
    }
    changed = true;
    auto convert = [&](Var x, DType to, Var result) {
      out.eqns.push_back(
          Eqn{Prim::convert_element_type, {x}, {result}, Params{{"new_dtype", to}, {"weak_type", false}}});
    };
    auto widened = [&](Var x) {
      AVal a = j.aval(x);
      a.dtype = DType::f32;
      a.weak_type = false;
      const Var w = out.new_var(a);
      convert(x, DType::f32, w);
      return w;
    };
    const Var lhs = widened(e.inputs[0]), rhs = widened(e.inputs[1]);
    const AVal& result = j.aval(e.outputs[0]);
    Params params = e.params;
    params.set("preferred_element_type", DType::f32);
    if (result.dtype == DType::f32) {
      out.eqns.push_back(Eqn{Prim::dot_general, {lhs, rhs}, e.outputs, std::move(params)});
      continue;
    }
    AVal wide = result;
    wide.dtype = DType::f32;
    const Var product = out.new_var(wide);
    out.eqns.push_back(Eqn{Prim::dot_general, {lhs, rhs}, {product}, std::move(params)});
    convert(product, result.dtype, e.outputs[0]);
  }
  if (!changed) return j;
  out.outvars = j.outvars;
  return out;
}

}  // namespace pax

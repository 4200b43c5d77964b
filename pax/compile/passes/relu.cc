// Folding ReLUs into products: y = select_n(le(x, 0), x, 0) (pax::nn::relu)
// where x = dot_general(...) (or a reshape of one) is read by that ReLU
// alone becomes one dot_general with has_relu, whose kernel applies the
// ReLU to its result
// (cuBLASLt's RELU epilogue is the same idea; the CPU's kernel passes over
// the result right after the product) instead of a loop that reads the
// product back and writes the result and its mask.
//
// The ReLU's backward reads the mask le(x, 0), which would keep x alive.
// le(x, 0) and le(y, 0) are the same for every x (x <= 0 gives y = +0.0;
// x > 0 gives y = x; a NaN gives a NaN, never <= 0), so the mask's other
// readers get le(y, 0), computed where y is, and x is read by the ReLU
// alone. The folded product takes the select's place in the program.
#include <cmath>
#include <vector>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/prims/dot_params.h"

namespace pax {
namespace {

// Whether the constant behind v (a constvar, or a broadcast of one) is a
// zero: of either sign, or with `plus` +0.0 only (the ReLU's result, which
// the kernel writes).
bool is_zero(const Jaxpr& j, const passes::ConstValues& known, const std::vector<int>& producer, Var v,
             bool plus = false) {
  while (true) {
    if (const Array* c = known.get(v)) {
      if (!c->is_concrete() || c->size() > 1) return false;
      const double z = c->astype(DType::f64).item<double>();
      return z == 0.0 && !(plus && std::signbit(z));
    }
    const int p = producer[size_t(v)];
    if (p < 0 || j.eqns[size_t(p)].prim != Prim::broadcast_in_dim) return false;
    v = j.eqns[size_t(p)].inputs[0];
  }
}

}  // namespace

Jaxpr fold_relus_into_products(const Jaxpr& j, const ProductEpilogue& can_fold) {
  const passes::VarUses uses = passes::var_uses(j);
  const auto& [readers, producer] = uses;
  const passes::ConstValues known(j);
  // Per variable: the equations that read it, in program order.
  std::vector<std::vector<size_t>> read_by(j.avals.size());
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    for (Var v : j.eqns[i].inputs) {
      if (read_by[size_t(v)].empty() || read_by[size_t(v)].back() != i) read_by[size_t(v)].push_back(i);
    }
  }
  Jaxpr out = passes::copy_header(j);
  passes::Subst subst(j.avals.size());
  std::vector<bool> removed(j.eqns.size(), false);
  std::vector<std::vector<Eqn>> folded(j.eqns.size());  // per select: what replaces it
  for (size_t i = 0; i < j.eqns.size(); ++i) {
    const Eqn& select = j.eqns[i];
    if (select.prim != Prim::select_n || select.inputs.size() != 3) continue;
    const Var mask = select.inputs[0], x = select.inputs[1], zero = select.inputs[2];
    const int pm = producer[size_t(mask)];
    // The product, and the reshape between it and x if there is one.
    const std::optional<passes::ProductSource> src = passes::product_behind(j, uses, x);
    if (pm < 0 || !src || removed[size_t(pm)] || removed[size_t(src->product)]) continue;
    const int px = src->product, reshape = src->reshape;
    const Eqn& le = j.eqns[size_t(pm)];
    if (le.prim != Prim::le || le.inputs[0] != x || !is_zero(j, known, producer, le.inputs[1])) continue;
    if (!is_floating(j.aval(x).dtype) || !is_zero(j, known, producer, zero, true)) continue;
    // x is read by the mask and the select alone.
    if (read_by[size_t(x)].size() != 2 || readers[size_t(x)] != 2) continue;
    const Eqn& dot = j.eqns[size_t(px)];
    if (dot_has_multiplier(dot.params) || dot_has_relu(dot.params) || !can_fold(j, dot)) continue;
    // The mask's other readers come after the select (they get le(y, 0),
    // computed there); it is not a program output.
    bool later = readers[size_t(mask)] == int(read_by[size_t(mask)].size());
    for (size_t r : read_by[size_t(mask)]) later = later && (r == i || r > i);
    if (!later) continue;
    Eqn f = dot;
    f.params.set("has_relu", true);
    passes::emit_folded_product(j, out, folded[i], std::move(f), select.outputs, reshape >= 0);
    if (reshape >= 0) removed[size_t(reshape)] = true;
    if (readers[size_t(mask)] > 1) {
      const Var mask_of_y = out.new_var(j.aval(mask));
      folded[i].push_back(Eqn{Prim::le, {select.outputs[0], le.inputs[1]}, {mask_of_y}, le.params});
      subst.set(mask, mask_of_y);
    }
    removed[size_t(px)] = true;
    removed[size_t(pm)] = true;
  }
  return passes::splice_eqns(j, std::move(out), removed, folded, &subst);
}

}  // namespace pax

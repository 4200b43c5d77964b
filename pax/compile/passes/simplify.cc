// Algebraic simplification. Each rewrite is exact in IEEE arithmetic, so the
// program computes the same bits as before:
//   x * 1, 1 * x                      -> x
//   x + (-0.0), x - (+0.0)            -> x   (floats: -0 + +0 is +0, so the
//   x + 0, x - 0 (integers)           -> x    other zero is not an identity)
//   neg(neg(x)), stop_gradient(x)     -> x
//   integer_pow(x, 1)                 -> x
//   convert to x's dtype              -> x
//   reshape / squeeze / expand_dims / broadcast / transpose / slice / pad
//   that change nothing               -> x
//   reshape-like of reshape-like      -> one reshape
//   transpose of transpose            -> one transpose (or x)
//   broadcast of broadcast            -> one broadcast
//   reduction over no axis            -> x;  over size-1 axes -> reshape
//   select_n with a constant selector -> the selected case
//   pad(a) + pad(b), zero pads (of one
//   sign) of slabs side by side along
//   one axis                          -> pad(concatenate(a, b)) (plus 0.0
//                                        where a +0.0 pad would have turned
//                                        a -0.0 into +0.0): the transposes of
//                                        a weight's slices (a combined QKV
//                                        projection's) summed
// Constants are recognised through broadcasts and reshapes of small
// constant arrays (the form C++ literals take when traced).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

constexpr int64_t kMaxScan = int64_t(1) << 16;  // constant elements inspected at most

bool is_reshape_like(Prim p) { return p == Prim::reshape || p == Prim::squeeze || p == Prim::expand_dims; }

bool is_reduction(Prim p) {
  return p == Prim::reduce_sum || p == Prim::reduce_max || p == Prim::reduce_min || p == Prim::reduce_prod ||
         p == Prim::reduce_and || p == Prim::reduce_or;
}

bool is_identity(const Ints& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != int64_t(i)) return false;
  }
  return true;
}

class Simplifier {
 public:
  explicit Simplifier(const Jaxpr& j)
      : j_(j), out_(passes::copy_header(j)), subst_(j.avals.size()), known_(j), producer_(j.avals.size(), -1) {}

  Jaxpr run() {
    for (const Eqn& e : j_.eqns) visit(subst_.apply(e));
    subst_.finish(out_, j_);
    return std::move(out_);
  }

 private:
  void emit(Eqn e) {
    for (Var v : e.outputs) {
      if (size_t(v) >= producer_.size()) producer_.resize(size_t(v) + 1, -1);
      producer_[size_t(v)] = int(out_.eqns.size());
    }
    out_.eqns.push_back(std::move(e));
  }
  void replace(const Eqn& e, Var x) { subst_.set(e.outputs[0], x); }
  const Eqn* producer(Var v) const {
    const int p = producer_[size_t(v)];
    return p < 0 ? nullptr : &out_.eqns[size_t(p)];
  }
  const AVal& aval(Var v) const { return out_.aval(v); }  // the pass's own variables too
  // A new variable holding the result of `prim` on `inputs`.
  Var emit_new(Prim prim, std::vector<Var> inputs, Params params) {
    std::vector<AVal> in;
    for (Var v : inputs) in.push_back(aval(v));
    const Var out = out_.new_var(infer_avals(prim, in, params)[0]);
    emit(Eqn{prim, std::move(inputs), {out}, std::move(params)});
    return out;
  }

  // The constant behind v: a constvar, or a broadcast / reshape of one.
  const Array* constant(Var v) const {
    while (true) {
      if (const Array* c = known_.get(v)) return c->is_concrete() && c->size() <= kMaxScan ? c : nullptr;
      const Eqn* e = producer(v);
      if (!e || !(e->prim == Prim::broadcast_in_dim || is_reshape_like(e->prim))) return nullptr;
      v = e->inputs[0];
    }
  }

  // Every element of v equals `value` (a zero also with the given sign).
  bool all_equal(Var v, double value, std::optional<bool> negative = std::nullopt) const {
    const Array* c = constant(v);
    if (!c) return false;
    for (double x : c->to_vector<double>()) {
      if (x != value || (negative && std::signbit(x) != *negative)) return false;
    }
    return true;
  }

  // The zero that leaves x unchanged: any integer zero; -0.0 for add and
  // +0.0 for sub in floating point.
  bool is_neutral_zero(Var v, bool for_add) const {
    if (!is_floating(aval(v).dtype)) return all_equal(v, 0.0);
    return all_equal(v, 0.0, for_add);
  }

  // e's result as a reshape of x (of what x is a reshape of, if it is one).
  void emit_reshape(const Eqn& e, Var x) {
    if (const Eqn* p = producer(x); p && is_reshape_like(p->prim)) x = p->inputs[0];
    const Shape& to = aval(e.outputs[0]).shape;
    if (aval(x).shape == to) return replace(e, x);
    emit(Eqn{Prim::reshape, {x}, e.outputs, Params{{"new_sizes", to.dims()}}});
  }

  void visit(Eqn e) {
    const Var o = e.outputs.empty() ? -1 : e.outputs[0];
    const Var a = e.inputs.empty() ? -1 : e.inputs[0];
    switch (e.prim) {
      case Prim::mul:
        if (all_equal(e.inputs[1], 1.0)) return replace(e, a);
        if (all_equal(a, 1.0)) return replace(e, e.inputs[1]);
        break;
      case Prim::add:
        if (is_neutral_zero(e.inputs[1], true)) return replace(e, a);
        if (is_neutral_zero(a, true)) return replace(e, e.inputs[1]);
        if (join_side_by_side_pads(e)) return;
        break;
      case Prim::sub:
        if (is_neutral_zero(e.inputs[1], false)) return replace(e, a);
        break;
      case Prim::neg:
        if (const Eqn* p = producer(a); p && p->prim == Prim::neg) return replace(e, p->inputs[0]);
        break;
      case Prim::stop_gradient: return replace(e, a);
      case Prim::integer_pow:
        if (e.params.i("y") == 1) return replace(e, a);
        break;
      case Prim::convert_element_type:
        if (e.params.dtype("new_dtype") == aval(a).dtype) return replace(e, a);
        break;
      case Prim::reshape:
      case Prim::squeeze:
      case Prim::expand_dims: return emit_reshape(e, a);
      case Prim::transpose: {
        Ints perm = e.params.ints("permutation");
        Var x = a;
        if (const Eqn* p = producer(a); p && p->prim == Prim::transpose) {
          const Ints& inner = p->params.ints("permutation");
          for (int64_t& d : perm) d = inner[size_t(d)];
          x = p->inputs[0];
        }
        if (is_identity(perm)) return replace(e, x);
        if (x != a) return emit(Eqn{Prim::transpose, {x}, e.outputs, Params{{"permutation", perm}}});
        break;
      }
      case Prim::broadcast_in_dim: {
        if (aval(a).shape == aval(o).shape) return replace(e, a);
        if (const Eqn* p = producer(a); p && p->prim == Prim::broadcast_in_dim) {
          const Ints& outer = e.params.ints("broadcast_dimensions");
          Ints dims = p->params.ints("broadcast_dimensions");
          for (int64_t& d : dims) d = outer[size_t(d)];
          return emit(Eqn{Prim::broadcast_in_dim,
                          {p->inputs[0]},
                          e.outputs,
                          Params{{"shape", aval(o).shape.dims()}, {"broadcast_dimensions", dims}}});
        }
        break;
      }
      case Prim::select_n:
        if (auto k = constant_selector(e)) return replace(e, e.inputs[size_t(*k) + 1]);
        break;
      case Prim::slice:
      case Prim::pad:
        // The shape rules make a same-shaped slice (unit strides) or pad
        // (no negative padding) the whole operand.
        if (aval(a).shape == aval(o).shape && (e.prim == Prim::pad ? no_padding(e) : unit_strides(e))) {
          return replace(e, a);
        }
        break;
      default:
        if (is_reduction(e.prim)) {
          bool trivial = true;
          for (int64_t ax : e.params.ints("axes")) {
            trivial = trivial && aval(a).shape[ax < 0 ? ax + aval(a).shape.rank() : ax] == 1;
          }
          if (trivial) return emit_reshape(e, a);
        }
        break;
    }
    emit(std::move(e));
  }

  // A zero pad along one axis (no interior or negative padding): what it
  // pads, its padding value, the axis and where the operand lies along it.
  struct PadSlab {
    Var operand, value;
    int64_t axis, begin, end;
  };
  std::optional<PadSlab> zero_pad_slab(Var v) const {
    const Eqn* p = producer(v);
    if (!p || p->prim != Prim::pad || !all_equal(p->inputs[1], 0.0)) return std::nullopt;
    const Ints& cfg = p->params.ints("padding_config");
    int64_t axis = -1;
    for (size_t d = 0; d < cfg.size() / 3; ++d) {
      const int64_t lo = cfg[3 * d], hi = cfg[3 * d + 1], interior = cfg[3 * d + 2];
      if (interior != 0 || lo < 0 || hi < 0) return std::nullopt;
      if (lo == 0 && hi == 0) continue;
      if (axis >= 0) return std::nullopt;
      axis = int64_t(d);
    }
    if (axis < 0) return std::nullopt;
    const int64_t lo = cfg[size_t(3 * axis)];
    return PadSlab{p->inputs[0], p->inputs[1], axis, lo, lo + aval(p->inputs[0]).shape[axis]};
  }

  // add(pad(a), pad(b)) -> pad(concatenate(a, b)) where a and b are zero
  // padded along the same axis, with zeros of the same sign, and lie side by
  // side there. The add kept every element but turned a -0.0 padded with +0.0
  // into +0.0; where the padding is +0.0, the joined slab gets + 0.0 to do the
  // same (a sum of -0.0 pads changed nothing).
  bool join_side_by_side_pads(const Eqn& e) {
    std::optional<PadSlab> x = zero_pad_slab(e.inputs[0]), y = zero_pad_slab(e.inputs[1]);
    if (!x || !y || x->axis != y->axis) return false;
    if (y->begin < x->begin) std::swap(x, y);
    if (x->end != y->begin) return false;
    const AVal out = aval(e.outputs[0]);  // a copy: new variables move the avals
    const bool floating = is_floating(out.dtype);
    const bool minus_zero = floating && all_equal(x->value, 0.0, true);
    if (floating && minus_zero != all_equal(y->value, 0.0, true)) return false;
    const bool plus_zero = floating && !minus_zero;
    // A slab joined before (with the same padding) is concatenated again from
    // its parts, so that a sum of n pads becomes one concatenate.
    std::vector<Var> parts;
    for (Var v : {x->operand, y->operand}) {
      const auto it = joined_parts_.find(v);
      if (it == joined_parts_.end() || it->second.plus_zero != plus_zero) {
        parts.push_back(v);
      } else {
        parts.insert(parts.end(), it->second.parts.begin(), it->second.parts.end());
      }
    }
    Var joined = emit_new(Prim::concatenate, parts, Params{{"dimension", x->axis}});
    if (plus_zero) {
      const Var zero = passes::add_const(out_, scalar(0.0, out.dtype));
      const Ints dims = aval(joined).shape.dims();
      const Var zeros =
          emit_new(Prim::broadcast_in_dim, {zero}, Params{{"shape", dims}, {"broadcast_dimensions", Ints{}}});
      joined = emit_new(Prim::add, {joined, zeros}, Params{});
    }
    joined_parts_[joined] = JoinedSlab{std::move(parts), plus_zero};
    Ints cfg(size_t(3 * out.shape.rank()), 0);
    cfg[size_t(3 * x->axis)] = x->begin;
    cfg[size_t(3 * x->axis + 1)] = out.shape[x->axis] - y->end;
    if (cfg[size_t(3 * x->axis)] == 0 && cfg[size_t(3 * x->axis + 1)] == 0) {
      replace(e, joined);
    } else {
      emit(Eqn{Prim::pad, {joined, x->value}, e.outputs, Params{{"padding_config", cfg}}});
    }
    return true;
  }

  static bool unit_strides(const Eqn& e) {
    if (!e.params.has("strides")) return true;
    const Ints& strides = e.params.ints("strides");
    return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; });
  }
  static bool no_padding(const Eqn& e) {
    const Ints& cfg = e.params.ints("padding_config");
    return std::all_of(cfg.begin(), cfg.end(), [](int64_t c) { return c == 0; });
  }

  // The case a constant scalar selector picks, as the select_n kernel picks
  // it (clamped; with one output element, a 2-case selector tests != 0).
  std::optional<int64_t> constant_selector(const Eqn& e) const {
    const size_t cases = e.inputs.size() - 1;
    bool same = true;
    for (size_t c = 2; c <= cases; ++c) same = same && e.inputs[c] == e.inputs[1];
    if (same) return 0;
    const Array* w = known_.get(e.inputs[0]);
    if (!w || !w->is_concrete() || w->ndim() != 0) return std::nullopt;
    const int64_t k = w->item<int64_t>();
    if (cases == 2 && aval(e.outputs[0]).shape.numel() == 1) return k != 0 ? 1 : 0;
    return std::clamp<int64_t>(k, 0, int64_t(cases) - 1);
  }

  const Jaxpr& j_;
  // join_side_by_side_pads: a joined slab's parts, and whether + 0.0 was added.
  struct JoinedSlab {
    std::vector<Var> parts;
    bool plus_zero = false;
  };
  std::map<Var, JoinedSlab> joined_parts_;
  Jaxpr out_;
  passes::Subst subst_;
  passes::ConstValues known_;
  std::vector<int> producer_;
};

}  // namespace

Jaxpr simplify(const Jaxpr& j) { return Simplifier(j).run(); }

}  // namespace pax

// VJP and JVP rules of the elementwise primitives. Each unary rule is the
// derivative f'(x) (written with lax ops, so rules compose under every
// transform); the VJP multiplies it into the cotangent, the JVP into the
// tangent. Non-differentiable operations (sign, floor, ceil, round) have zero
// derivatives; comparisons, logic and integer outputs carry no gradient.
#include <cmath>

#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

using ad::full_like;

// ---------------------------------------------------------------------------
// unary: derivative of y = f(x) in terms of x and y

template <Prim P>
Array derivative(const Array& x, const Array& y, const Params& p) {
  if constexpr (P == Prim::neg) return full_like(x, -1.0);
  if constexpr (P == Prim::abs) return lax::sign(x);
  if constexpr (P == Prim::exp) return y;
  if constexpr (P == Prim::expm1) return lax::add(y, full_like(y, 1.0));
  if constexpr (P == Prim::log) return lax::div(full_like(x, 1.0), x);
  if constexpr (P == Prim::log1p) return lax::div(full_like(x, 1.0), lax::add(x, full_like(x, 1.0)));
  if constexpr (P == Prim::sqrt) return lax::div(full_like(y, 0.5), y);
  if constexpr (P == Prim::rsqrt) return lax::mul(full_like(y, -0.5), lax::div(y, x));
  if constexpr (P == Prim::cbrt) return lax::div(full_like(y, 1.0 / 3.0), lax::mul(y, y));
  if constexpr (P == Prim::tanh) return lax::sub(full_like(y, 1.0), lax::mul(y, y));
  if constexpr (P == Prim::logistic) return lax::mul(y, lax::sub(full_like(y, 1.0), y));
  if constexpr (P == Prim::erf) {
    return lax::mul(full_like(x, 2.0 / std::sqrt(M_PI)), lax::exp(lax::neg(lax::mul(x, x))));
  }
  if constexpr (P == Prim::erf_inv) return lax::mul(full_like(y, std::sqrt(M_PI) / 2.0), lax::exp(lax::mul(y, y)));
  if constexpr (P == Prim::sin) return lax::cos(x);
  if constexpr (P == Prim::cos) return lax::neg(lax::sin(x));
  if constexpr (P == Prim::integer_pow) {
    const int64_t n = p.i("y");
    if (n == 0) return full_like(x, 0.0);
    if (n == 1) return full_like(x, 1.0);
    return lax::mul(full_like(x, double(n)), lax::integer_pow(x, n - 1));
  }
  return Array();
}

template <Prim P>
std::vector<Array> unary_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                             const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {lax::mul(ct[0], derivative<P>(in[0], out[0], p))};
}

template <Prim P>
std::vector<Array> unary_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                             const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::mul(t[0], derivative<P>(in[0], out[0], p))};
}

// sign, floor, ceil, round: piecewise constant.
std::vector<Array> zero_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array>, const Params&,
                            const CotangentMask& needs) {
  return std::vector<Array>(in.size());
}
std::vector<Array> zero_jvp(std::span<const Array>, std::span<const Array>, std::span<const Array> out, const Params&) {
  return std::vector<Array>(out.size());
}

// convert_element_type between float dtypes: the cotangent converts back.
std::vector<Array> convert_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                               const Params&, const CotangentMask& needs) {
  if (!ct[0].defined() || !is_floating(in[0].dtype())) return {Array()};
  return {lax::convert_element_type(ct[0], in[0].dtype(), in[0].weak_type())};
}
std::vector<Array> convert_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                               const Params&) {
  if (!t[0].defined() || !is_floating(in[0].dtype())) return {Array()};
  return {lax::convert_element_type(t[0], out[0].dtype(), out[0].weak_type())};
}

// ---------------------------------------------------------------------------
// binary: partial derivatives (da, db) of y = f(a, b)

// Where a and b tie, max / min split the derivative evenly (as JAX does).
std::pair<Array, Array> extremum_partials(const Array& a, const Array& b, bool is_max) {
  Array win = is_max ? lax::gt(a, b) : lax::lt(a, b);
  Array tie = lax::eq(a, b);
  Array pa = lax::select_n(win, {lax::select_n(tie, {full_like(a, 0.0), full_like(a, 0.5)}), full_like(a, 1.0)});
  return {pa, lax::sub(full_like(a, 1.0), pa)};
}

template <Prim P>
std::pair<Array, Array> partials(const Array& a, const Array& b, const Array& y) {
  if constexpr (P == Prim::mul) return {b, a};
  if constexpr (P == Prim::div) return {lax::div(full_like(b, 1.0), b), lax::neg(lax::div(y, b))};
  if constexpr (P == Prim::rem) {
    // rem(a, b) = a - b * trunc(a / b)
    Array q = lax::div(a, b);
    Array trunc = lax::select_n(lax::lt(q, full_like(q, 0.0)), {lax::floor(q), lax::ceil(q)});
    return {full_like(a, 1.0), lax::neg(trunc)};
  }
  if constexpr (P == Prim::pow) {
    // d/da = b a^(b-1); d/db = y log(a), with log(0) read as 0 (a^b is flat in b there).
    Array da = lax::mul(b, lax::pow(a, lax::sub(b, full_like(b, 1.0))));
    Array safe_a = lax::select_n(lax::eq(a, full_like(a, 0.0)), {a, full_like(a, 1.0)});
    return {da, lax::mul(y, lax::log(safe_a))};
  }
  if constexpr (P == Prim::max) return extremum_partials(a, b, true);
  if constexpr (P == Prim::min) return extremum_partials(a, b, false);
  return {};
}

template <Prim P>
std::vector<Array> binary_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                              const Params&, const CotangentMask& needs) {
  const Array& g = ct[0];
  if (!g.defined()) return {Array(), Array()};
  if constexpr (P == Prim::add) return {g, g};
  if constexpr (P == Prim::sub) return {g, lax::neg(g)};
  auto [da, db] = partials<P>(in[0], in[1], out[0]);
  return {lax::mul(g, da), lax::mul(g, db)};
}

template <Prim P>
std::vector<Array> binary_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                              const Params&) {
  const Array &ta = t[0], &tb = t[1];
  if constexpr (P == Prim::add) return {ad::add(ta, tb)};
  if constexpr (P == Prim::sub) return {ad::add(ta, ad::neg(tb))};
  auto [da, db] = partials<P>(in[0], in[1], out[0]);
  return {ad::add(ad::mul(ta, da), ad::mul(tb, db))};
}

// select_n: each case gets the cotangent where it was selected.
std::vector<Array> select_n_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                const Params&, const CotangentMask& needs) {
  std::vector<Array> out(in.size());
  if (!ct[0].defined()) return out;
  const Array& which = in[0];
  const Array zero = full_like(ct[0], 0.0);
  const Array sel = which.ndim() == 0 && ct[0].ndim() > 0 ? lax::broadcast_in_dim(which, ct[0].shape().dims(), {})
                                                          : which;
  for (size_t k = 1; k < in.size(); ++k) {
    if (!is_floating(in[k].dtype())) continue;
    std::vector<Array> cases(in.size() - 1, zero);
    cases[k - 1] = ct[0];
    out[k] = lax::select_n(sel, cases);
  }
  return out;
}

std::vector<Array> select_n_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                                const Params&) {
  bool any = false;
  for (size_t k = 1; k < in.size(); ++k) any = any || t[k].defined();
  if (!any) return {Array()};
  std::vector<Array> cases;
  for (size_t k = 1; k < in.size(); ++k) cases.push_back(ad::instantiate(t[k], in[k]));
  return {lax::select_n(in[0], cases)};
}

}  // namespace

void register_elementwise_ad(PrimTable& t) {
#define PAX_UNARY_AD(P)                        \
  t[size_t(Prim::P)].vjp = unary_vjp<Prim::P>; \
  t[size_t(Prim::P)].jvp = unary_jvp<Prim::P>;
  PAX_UNARY_AD(neg)
  PAX_UNARY_AD(abs)
  PAX_UNARY_AD(exp)
  PAX_UNARY_AD(expm1)
  PAX_UNARY_AD(log)
  PAX_UNARY_AD(log1p)
  PAX_UNARY_AD(sqrt)
  PAX_UNARY_AD(rsqrt)
  PAX_UNARY_AD(cbrt)
  PAX_UNARY_AD(tanh)
  PAX_UNARY_AD(logistic)
  PAX_UNARY_AD(erf)
  PAX_UNARY_AD(erf_inv)
  PAX_UNARY_AD(sin)
  PAX_UNARY_AD(cos)
  PAX_UNARY_AD(integer_pow)
#undef PAX_UNARY_AD
  for (Prim p : {Prim::sign, Prim::floor, Prim::ceil, Prim::round}) {
    t[size_t(p)].vjp = zero_vjp;
    t[size_t(p)].jvp = zero_jvp;
  }
  set_ad_rules(t, Prim::convert_element_type, convert_vjp, convert_jvp);
#define PAX_BINARY_AD(P)                        \
  t[size_t(Prim::P)].vjp = binary_vjp<Prim::P>; \
  t[size_t(Prim::P)].jvp = binary_jvp<Prim::P>;
  PAX_BINARY_AD(add)
  PAX_BINARY_AD(sub)
  PAX_BINARY_AD(mul)
  PAX_BINARY_AD(div)
  PAX_BINARY_AD(rem)
  PAX_BINARY_AD(pow)
  PAX_BINARY_AD(max)
  PAX_BINARY_AD(min)
#undef PAX_BINARY_AD
  set_ad_rules(t, Prim::select_n, select_n_vjp, select_n_jvp);
}

}  // namespace pax

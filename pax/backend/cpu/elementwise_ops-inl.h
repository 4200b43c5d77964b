// The per-element operations of the elementwise kernels, as Highway vector
// functors: one definition that the kernels (elementwise_hwy.cc, compiled for
// every target and dispatched at run time) and the fused loops' generated code
// (fused_codegen.h, compiled for the dispatched target by the system
// compiler) both use, so that compiled loops compute the bits eager
// execution computes. Transcendentals use Highway's contrib/math with
// fix-ups so that special values (NaN, +-inf, overflow) follow IEEE / XLA
// semantics.
//
// This header includes only Highway and the standard library: its text is
// embedded into the library and pasted into generated sources.
//
// Per-target include guard (Highway's convention for -inl headers).
#if defined(PAX_BACKEND_CPU_ELEMENTWISE_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAX_BACKEND_CPU_ELEMENTWISE_OPS_INL_H_
#undef PAX_BACKEND_CPU_ELEMENTWISE_OPS_INL_H_
#else
#define PAX_BACKEND_CPU_ELEMENTWISE_OPS_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cstdint>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The f32 exp kernel's argument range: exp overflows to inf above the upper
// end, and arguments below the lower end are clamped to it (Highway's
// approximation is valid down to there).
inline constexpr float kExpF32ArgMax = 88.72283935546875f;
inline constexpr float kExpF32ArgMin = -105.0f;
// tanh's argument is clamped to +-this (tanh is +-1 in f32 beyond 9.02).
inline constexpr float kTanhF32ArgLimit = 20.0f;

// bf16 precision in f32: v rounded as float_to_bf16 rounds (to nearest even,
// NaN made quiet), the result kept in the upper half of the f32 bits.

template <class D, class V>
HWY_INLINE V RoundBf16(D df, V v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  const auto rounded = hn::Add(bits, hn::Add(hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)), hn::Set(du, 0x7fffu)));
  const auto out = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(bits, hn::Set(du, 0x00400000u)), rounded);
  return hn::BitCast(df, hn::And(out, hn::Set(du, 0xffff0000u)));
}

// ---------------------------------------------------------------------------
// Float unary operations (f32 vectors; f64 where Highway covers it). sin and
// cos are accurate on [-39000, 39000] only: their kernel checks the range of
// each window and takes the C library path outside it.

template <class D, class V>
HWY_INLINE V KeepNaN(D, V x, V y) {
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

struct NegOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Neg(x); } };
struct AbsOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Abs(x); } };
struct SignOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    const V one = hn::Set(d, 1);
    V s = hn::IfThenElse(hn::Gt(x, hn::Zero(d)), one, x);
    return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Neg(one), s);
  }
};
// exp overflows above `hi`; Highway's approximation is valid down to `lo`.
template <class T>
struct ExpRange {
  static constexpr T hi = sizeof(T) == 4 ? T(kExpF32ArgMax) : T(709.782712893384);
  static constexpr T lo = sizeof(T) == 4 ? T(kExpF32ArgMin) : T(-1001);
};
template <class D, class V>
HWY_INLINE V ClampExpArg(D d, V x) {
  using R = ExpRange<hn::TFromD<D>>;
  return hn::Max(hn::Min(x, hn::Set(d, R::hi)), hn::Set(d, R::lo));
}
struct ExpOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    using R = ExpRange<hn::TFromD<D>>;
    V y = hn::Exp(d, ClampExpArg(d, x));
    y = hn::IfThenElse(hn::Gt(x, hn::Set(d, R::hi)), hn::Inf(d), y);
    return KeepNaN(d, x, y);
  }
};
struct Expm1Op {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    using R = ExpRange<hn::TFromD<D>>;
    V y = hn::Expm1(d, ClampExpArg(d, x));
    y = hn::IfThenElse(hn::Gt(x, hn::Set(d, R::hi)), hn::Inf(d), y);
    y = hn::IfThenElse(hn::Lt(x, hn::Set(d, R::lo)), hn::Set(d, -1), y);
    return KeepNaN(d, x, y);
  }
};
// Log-like functions: fix the domain edges (0 -> -inf, below domain -> NaN, inf -> inf).
template <class D, class V>
HWY_INLINE V LogEdges(D d, V x, V y, V edge) {
  y = hn::IfThenElse(hn::Eq(x, edge), hn::Neg(hn::Inf(d)), y);
  y = hn::IfThenElse(hn::Lt(x, edge), hn::NaN(d), y);
  y = hn::IfThenElse(hn::Eq(x, hn::Inf(d)), hn::Inf(d), y);
  return KeepNaN(d, x, y);
}
struct LogOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    // Clamp into the valid range first so that the approximation never sees inf/0.
    using T = hn::TFromD<D>;
    V safe = hn::Min(hn::Max(x, hn::Set(d, std::numeric_limits<T>::denorm_min())),
                     hn::Set(d, std::numeric_limits<T>::max()));
    return LogEdges(d, x, hn::Log(d, safe), hn::Zero(d));
  }
};
struct Log1pOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    using T = hn::TFromD<D>;
    V safe = hn::Min(hn::Max(x, hn::Set(d, T(-1) + std::numeric_limits<T>::epsilon() / 2)),
                     hn::Set(d, std::numeric_limits<T>::max()));
    return LogEdges(d, x, hn::Log1p(d, safe), hn::Set(d, -1));
  }
};
struct SqrtOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Sqrt(x); } };
struct RsqrtOp {
  template <class D, class V> HWY_INLINE V operator()(D d, V x) const { return hn::Div(hn::Set(d, 1), hn::Sqrt(x)); }
};
// cbrt: exp(log|x| / 3) with x's sign, refined by one Newton step on
// y^3 = |x|; tiny and huge magnitudes are scaled by 2^-+72 first (exactly,
// the result by 2^+-24) so that the logarithm and the cube stay in range;
// +-0, +-inf and NaN are returned as they are.
struct CbrtOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    using T = hn::TFromD<D>;
    const V ax = hn::Abs(x);
    const auto tiny = hn::Lt(ax, hn::Set(d, T(0x1p-100))), huge = hn::Gt(ax, hn::Set(d, T(0x1p100)));
    V a = hn::IfThenElse(tiny, hn::Mul(ax, hn::Set(d, T(0x1p72))), ax);
    a = hn::IfThenElse(huge, hn::Mul(a, hn::Set(d, T(0x1p-72))), a);
    V y = hn::Exp(d, hn::Mul(hn::Log(d, a), hn::Set(d, T(1.0 / 3.0))));
    const V y2 = hn::Mul(y, y);
    y = hn::Sub(y, hn::Div(hn::Sub(hn::Mul(y2, y), a), hn::Mul(hn::Set(d, T(3)), y2)));
    y = hn::IfThenElse(tiny, hn::Mul(y, hn::Set(d, T(0x1p-24))), y);
    y = hn::IfThenElse(huge, hn::Mul(y, hn::Set(d, T(0x1p24))), y);
    const auto special = hn::Or(hn::Eq(ax, hn::Zero(d)), hn::Not(hn::IsFinite(x)));
    return hn::IfThenElse(special, x, hn::CopySign(y, x));
  }
};
struct TanhOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    using T = hn::TFromD<D>;
    // Clamping keeps the approximation finite (f64 as well as f32).
    const V lim = hn::Set(d, T(kTanhF32ArgLimit));
    return KeepNaN(d, x, hn::Tanh(d, hn::Min(hn::Max(x, hn::Neg(lim)), lim)));
  }
};
// 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below: exp of a
// non-positive argument never overflows, so results down to the smallest
// subnormal survive (exp(-x) would reach inf first, near x = -88.7 in f32).
struct LogisticOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    const V one = hn::Set(d, 1);
    const V e = ExpOp()(d, hn::Neg(hn::Abs(x)));
    return hn::Div(hn::IfThenElse(hn::Lt(x, hn::Zero(d)), e, one), hn::Add(one, e));
  }
};
// erf for f32: x * P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in f32 outside).
struct ErfOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    const V c = hn::Min(hn::Max(x, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
    const V x2 = hn::Mul(c, c);
    V p = hn::Set(d, -2.72614225801306e-10f);
    p = hn::MulAdd(p, x2, hn::Set(d, 2.77068142495902e-08f));
    p = hn::MulAdd(p, x2, hn::Set(d, -2.10102402082508e-06f));
    p = hn::MulAdd(p, x2, hn::Set(d, -5.69250639462346e-05f));
    p = hn::MulAdd(p, x2, hn::Set(d, -7.34990630326855e-04f));
    p = hn::MulAdd(p, x2, hn::Set(d, -2.95459980854025e-03f));
    p = hn::MulAdd(p, x2, hn::Set(d, -1.60960333262415e-02f));
    V q = hn::Set(d, -1.45660718464996e-05f);
    q = hn::MulAdd(q, x2, hn::Set(d, -2.13374055278905e-04f));
    q = hn::MulAdd(q, x2, hn::Set(d, -1.68282697438203e-03f));
    q = hn::MulAdd(q, x2, hn::Set(d, -7.37332916720468e-03f));
    q = hn::MulAdd(q, x2, hn::Set(d, -1.42647390514189e-02f));
    return KeepNaN(d, x, hn::Div(hn::Mul(c, p), q));
  }
};
// erf_inv for f32 (M. Giles, "Approximating the erfinv function", 2010): two
// polynomial branches in w = -log(1 - x^2); +-1 map to +-inf, |x| > 1 to NaN.
struct ErfInvOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    const V one = hn::Set(d, 1.0f);
    const V ax = hn::Abs(x);
    const V w = hn::Neg(LogOp()(d, hn::Mul(hn::Sub(one, ax), hn::Add(one, ax))));
    const V w1 = hn::Sub(w, hn::Set(d, 2.5f));
    V p1 = hn::Set(d, 2.81022636e-08f);
    p1 = hn::MulAdd(p1, w1, hn::Set(d, 3.43273939e-07f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, -3.5233877e-06f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, -4.39150654e-06f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, 0.00021858087f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, -0.00125372503f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, -0.00417768164f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, 0.246640727f));
    p1 = hn::MulAdd(p1, w1, hn::Set(d, 1.50140941f));
    const V w2 = hn::Sub(hn::Sqrt(w), hn::Set(d, 3.0f));
    V p2 = hn::Set(d, -0.000200214257f);
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 0.000100950558f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 0.00134934322f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, -0.00367342844f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 0.00573950773f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, -0.0076224613f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 0.00943887047f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 1.00167406f));
    p2 = hn::MulAdd(p2, w2, hn::Set(d, 2.83297682f));
    V y = hn::Mul(hn::IfThenElse(hn::Lt(w, hn::Set(d, 5.0f)), p1, p2), x);
    y = hn::IfThenElse(hn::Eq(ax, one), hn::CopySign(hn::Inf(d), x), y);
    y = hn::IfThenElse(hn::Gt(ax, one), hn::NaN(d), y);
    return KeepNaN(d, x, y);
  }
};
// Highway's sin/cos are accurate on [-39000, 39000]; larger or non-finite
// inputs take the C library path (see SinCosF32).
struct SinOp { template <class D, class V> HWY_INLINE V operator()(D d, V x) const { return hn::Sin(d, x); } };
struct CosOp { template <class D, class V> HWY_INLINE V operator()(D d, V x) const { return hn::Cos(d, x); } };
struct FloorOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Floor(x); } };
struct CeilOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Ceil(x); } };
struct RoundEvenOp { template <class D, class V> HWY_INLINE V operator()(D, V x) const { return hn::Round(x); } };
struct RoundAwayOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V x) const {
    const V t = hn::Trunc(x);
    const V frac = hn::Abs(hn::Sub(x, t));  // exact
    return hn::IfThenElse(hn::Ge(frac, hn::Set(d, 0.5)), hn::Add(t, hn::CopySign(hn::Set(d, 1), x)), t);
  }
};

// ---------------------------------------------------------------------------
// Float binary operations.

struct AddOp { template <class D, class V> HWY_INLINE V operator()(D, V a, V b) const { return hn::Add(a, b); } };
struct SubOp { template <class D, class V> HWY_INLINE V operator()(D, V a, V b) const { return hn::Sub(a, b); } };
struct MulOp { template <class D, class V> HWY_INLINE V operator()(D, V a, V b) const { return hn::Mul(a, b); } };
struct DivOp { template <class D, class V> HWY_INLINE V operator()(D, V a, V b) const { return hn::Div(a, b); } };
// max / min propagate NaN (XLA semantics), unlike the x86 instructions.
struct MaxOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
  }
};
struct MinOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
  }
};

// x^e by squaring, the multiplications in the order of the scalar loop; a
// negative exponent inverts the product.
template <class D, class V>
HWY_INLINE V IntegerPowVec(D d, V base, int64_t e) {
  using T = hn::TFromD<D>;
  const bool invert = e < 0;
  const uint64_t m = invert ? uint64_t(-(e + 1)) + 1 : uint64_t(e);
  V acc = hn::Set(d, T(1));
  for (uint64_t k = m; k; k >>= 1) {
    if (k & 1) acc = hn::Mul(acc, base);
    base = hn::Mul(base, base);
  }
  return invert ? hn::Div(hn::Set(d, T(1)), acc) : acc;
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#endif  // PAX_BACKEND_CPU_ELEMENTWISE_OPS_INL_H_

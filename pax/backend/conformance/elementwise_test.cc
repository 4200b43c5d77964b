// Conformance of the elementwise primitives: every unary and binary
// primitive of prims.def, for every dtype its accepts column names, eagerly
// and jitted, against a host reference in long double rounded to the dtype.
//
// The case list is an expansion of prims.def: each lax1 / lax2 line brings
// its lax function, and its reference comes from the table below by name; a
// primitive with no reference has no case, which
// Conformance.EveryPrimitiveHasACase reports by name. Primitives whose lax
// function takes parameters (round, integer_pow, convert_element_type,
// bitcast_convert_type, select_n) have hand-written entries.
//
// Jitted, each operation is followed by neg (not, for bool results), so that
// it runs inside a fused loop and, with PAX_COMPILE=sync, in generated code;
// all operations of one dtype form one program, built as one source.
//
// Tolerances: exact for comparisons, selects, integer and bitwise operations,
// conversions and the operations whose result is a representable input
// (neg, abs, sign, floor, ceil, round, max, min). IEEE's correctly rounded
// operations (add, sub, mul, div, rem, sqrt) are exact in f32 and f64.
// Transcendentals allow Highway's documented maximum errors of its
// contrib/math functions in f32 and f64 (exp 1, expm1 4, log 4, log1p 2,
// sin / cos 3, tanh 4 ulp), plus the ulps the kernel's own arithmetic adds
// around them (rsqrt's division, logistic's 1 / (1 + exp(-x))) and the
// published accuracy of the polynomials used for erf and erf_inv. bf16 and
// f16 compute in f32 and round once, so their result may be one ulp of the
// dtype from the correctly rounded one (the f32 error can cross a rounding
// boundary), and never more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/backend/conformance/conformance.h"
#include "pax/backend/cpu/native_compiler.h"
#include "pax/ops/lax.h"

namespace pax::conformance {
namespace {

using LD = long double;
using Inputs = std::vector<std::vector<LD>>;
using OpFn = Array (*)(const std::vector<Array>&);

const LD kInf = INFINITY;
const LD kNaN = NAN;

// ---- prims.def, expanded: every primitive with its lax function when it
// has a plain one.
struct PrimEntry {
  Prim prim;
  const char* name;
  PrimFamily family;
  OpFn lax;
};
#define PAX_CONF_WRAP_lax1(id) +[](const std::vector<Array>& a) { return lax::id(a[0]); }
#define PAX_CONF_WRAP_lax2(id) +[](const std::vector<Array>& a) { return lax::id(a[0], a[1]); }
#define PAX_CONF_WRAP_none(id) OpFn(nullptr)
const PrimEntry kPrims[] = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) \
  {Prim::id, name, PrimFamily::family, PAX_CONF_WRAP_##wrapper(id)},
#include "pax/ir/prims.def"
#undef PAX_PRIM
};
#undef PAX_CONF_WRAP_lax1
#undef PAX_CONF_WRAP_lax2
#undef PAX_CONF_WRAP_none

const PrimEntry* find_prim(const std::string& name) {
  for (const PrimEntry& e : kPrims) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// ---- integer helpers (two's complement in 64 bits, wrapped to the dtype)

int bits(DType d) { return int(itemsize(d)) * 8; }
uint64_t to_u64(LD x) { return x < 0 ? uint64_t(int64_t(x)) : uint64_t(x); }
LD from_u64(uint64_t u, DType d) {
  if (bits(d) < 64) u &= (uint64_t(1) << bits(d)) - 1;
  if (is_unsigned(d)) return LD(u);
  if (bits(d) < 64 && (u >> (bits(d) - 1))) return LD(int64_t(u) - (int64_t(1) << bits(d)));
  return LD(int64_t(u));
}
// The unsigned value of x's bits in the dtype's width (shift amounts).
uint64_t width_bits(LD x, DType d) {
  uint64_t u = to_u64(x);
  return bits(d) < 64 ? u & ((uint64_t(1) << bits(d)) - 1) : u;
}
bool is_int(DType d) { return is_integer(d) || d == DType::bool_; }

// XLA's integer division: x / 0 = -1, MIN / -1 = MIN (wrapped).
LD int_div(LD a, LD b, DType d) {
  if (b == 0) return from_u64(~uint64_t(0), d);
  if (is_unsigned(d)) return LD(uint64_t(a) / uint64_t(b));
  if (b == -1) return from_u64(uint64_t(0) - to_u64(a), d);
  return LD(int64_t(a) / int64_t(b));
}
LD int_rem(LD a, LD b, DType d) {
  if (b == 0) return a;
  if (is_unsigned(d)) return LD(uint64_t(a) % uint64_t(b));
  if (b == -1) return 0;
  return LD(int64_t(a) % int64_t(b));
}
// x^e by repeated multiplication modulo 2^64, wrapped; a negative exponent
// gives the truncated 1 / x^|e| (1 and -1 keep a magnitude of 1, others 0).
LD int_pow(LD x, LD e, DType d) {
  if (e < 0) {
    if (x == 1) return 1;
    if (x == -1) return std::fmod(-e, 2.0L) == 1 ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, base = to_u64(x);
  for (uint64_t k = to_u64(e); k; k >>= 1) {
    if (k & 1) result *= base;
    base *= base;
  }
  return from_u64(result, d);
}

// ---- the reference table, by prims.def name

using Ref = std::function<LD(const LD* x, DType d)>;
using Gen = std::function<Inputs(DType d)>;

struct Spec {
  std::string prim;   // prims.def name
  std::string label;  // the variant, for failure messages
  Tolerance tol;
  Gen inputs;
  Ref ref;
  // The lax call; empty for the primitives whose plain lax function
  // prims.def generates (lax1 / lax2).
  std::function<Array(const std::vector<Array>&)> call;
  // The result dtype for an operand dtype; empty: the operand dtype.
  std::function<DType(DType)> out_dtype;
  // The operand dtypes; empty: prims.def's accepts column.
  std::vector<DType> dtypes;
};

const std::vector<LD> kFloatSpecials = {0,       -0.0L, 1,      -1,   0.5L,  -2.5L, 1e-40L,
                                        -1e-40L, 1e30L, -1e30L, kInf, -kInf, kNaN};

// Unary: floats spread over [lo, hi] plus specials; integers and bool: the
// dtype's interesting values.
Gen unary(LD lo, LD hi, std::vector<LD> specials = kFloatSpecials) {
  return [=](DType d) -> Inputs {
    if (is_int(d)) return {int_values(d)};
    return {float_values(d, lo, hi, 257, specials)};
  };
}

// Binary: random pairs from the two ranges plus every pair of specials;
// integers: every pair of the dtype's interesting values.
Gen binary(LD lo1, LD hi1, LD lo2, LD hi2, std::vector<LD> specials = kFloatSpecials) {
  return [=](DType d) -> Inputs {
    Inputs in(2);
    if (is_int(d)) {
      const std::vector<LD> v = int_values(d);
      for (LD a : v) {
        for (LD b : v) in[0].push_back(a), in[1].push_back(b);
      }
      return in;
    }
    in[0] = random_values(d, 300, 1, lo1, hi1);
    in[1] = random_values(d, 300, 2, lo2, hi2);
    for (LD a : specials) {
      for (LD b : specials) in[0].push_back(round_to(a, d)), in[1].push_back(round_to(b, d));
    }
    return in;
  };
}

// Shifts: every value against amounts 0 .. bits + 1 and a negative one.
Inputs shift_inputs(DType d) {
  Inputs in(2);
  std::vector<LD> amounts;
  for (int s = 0; s <= bits(d) + 1; ++s) amounts.push_back(round_to(s, d));
  amounts.push_back(round_to(-1, d));
  amounts.push_back(round_to(1000, d));
  for (LD a : int_values(d)) {
    for (LD s : amounts) in[0].push_back(a), in[1].push_back(s);
  }
  return in;
}

LD sign_of(LD x) { return std::isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : x; }
LD max_of(LD a, LD b) { return std::isnan(a) ? a : std::isnan(b) ? b : std::max(a, b); }
LD min_of(LD a, LD b) { return std::isnan(a) ? a : std::isnan(b) ? b : std::min(a, b); }

// erf^-1 by Newton's method in long double (erfc in the tails, where
// erf(x) - y would cancel).
LD erf_inv_ref(LD y) {
  if (std::isnan(y) || std::fabs(y) > 1) return kNaN;
  if (std::fabs(y) == 1) return std::copysign(kInf, y);
  const LD ay = std::fabs(y), t = 1 - ay;
  LD x = 0;
  for (int i = 0; i < 200; ++i) {
    const LD err = ay > 0.5L ? t - std::erfc(x) : std::erf(x) - ay;
    x -= err / (2 / std::sqrt(3.14159265358979323846264338327950288L) * std::exp(-x * x));
  }
  return std::copysign(x, y);
}

// The one place unary references are defined: name, tolerance, inputs.
std::vector<Spec> make_specs() {
  std::vector<Spec> s;
  auto add_unary = [&](const char* name, Tolerance tol, Gen gen, std::function<LD(LD, DType)> f) {
    s.push_back({name, name, tol, std::move(gen), [f](const LD* x, DType d) { return f(x[0], d); }, {}, {}, {}});
  };
  auto add_binary = [&](const char* name, Tolerance tol, Gen gen, std::function<LD(LD, LD, DType)> f,
                        bool to_bool = false) {
    Spec sp{name, name, tol, std::move(gen), [f](const LD* x, DType d) { return f(x[0], x[1], d); }, {}, {}, {}};
    if (to_bool) sp.out_dtype = [](DType) { return DType::bool_; };
    s.push_back(std::move(sp));
  };
  const Tolerance exact = Tolerance::exact();

  // -- unary
  add_unary("neg", exact, unary(-10, 10), [](LD x, DType d) { return is_int(d) ? from_u64(0 - to_u64(x), d) : -x; });
  add_unary("abs", exact, unary(-10, 10),
            [](LD x, DType d) { return is_int(d) ? from_u64(x < 0 ? 0 - to_u64(x) : to_u64(x), d) : std::fabs(x); });
  add_unary("sign", exact, unary(-3, 3), [](LD x, DType) { return sign_of(x); });
  add_unary("exp", Tolerance::ulps(1, 1), unary(-100, 88, {0, 88.7L, 89, 100, -104, -200, 1e-30L, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::exp(x); });
  add_unary("expm1", Tolerance::ulps(4, 4), unary(-20, 20, {1e-7L, -1e-7L, 0, 1e-30L, 100, -200, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::expm1(x); });
  add_unary("log", Tolerance::ulps(4, 4), unary(1e-3L, 1e4L, {0, -0.0L, -1, 1, 1e-40L, 1e-30L, 3e38L, kInf, kNaN}),
            [](LD x, DType) { return std::log(x); });
  add_unary("log1p", Tolerance::ulps(2, 2), unary(-0.99L, 100, {1e-7L, -1e-7L, 1e-30L, -1, -2, 0, kInf, kNaN}),
            [](LD x, DType) { return std::log1p(x); });
  add_unary("sqrt", Tolerance::ulps(0, 0), unary(0, 1e4L, {0, -0.0L, -1, 1e-40L, 1e30L, kInf, kNaN}),
            [](LD x, DType) { return std::sqrt(x); });
  // 1 / sqrt(x): two correctly rounded steps.
  add_unary("rsqrt", Tolerance::ulps(1, 1), unary(1e-3L, 1e4L, {0, -0.0L, -1, 1e30L, kInf, kNaN}),
            [](LD x, DType) { return 1 / std::sqrt(x); });
  add_unary("tanh", Tolerance::ulps(4, 4), unary(-10, 10, {0, 30, -30, 1e-6L, 1e-30L, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::tanh(x); });
  // exp's 1 ulp, then an add and a division (1 each).
  add_unary("logistic", Tolerance::ulps(3, 3), unary(-30, 30, {0, 200, -200, -90, kInf, -kInf, kNaN}),
            [](LD x, DType) { return 1 / (1 + std::exp(-x)); });
  // Rational approximation of erf in f32 (max error about 4 ulp).
  add_unary("erf", Tolerance::ulps(4, 4), unary(-5, 5, {0, 1e-5L, 1e-30L, 10, -10, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::erf(x); });
  // Giles's single-precision polynomials: relative error below 4e-7
  // (3.4 ulp at 2^-23 per ulp), rounded: 4 ulp.
  add_unary("erf_inv", Tolerance::ulps(4, 4), unary(-0.999L, 0.999L, {0, 1, -1, 1.5L, -1.5L, 1e-6L, 0.9999999L, kNaN}),
            [](LD x, DType) { return erf_inv_ref(x); });
  add_unary("sin", Tolerance::ulps(3, 3), unary(-50, 50, {0, 1e-30L, 1e4L, 39000, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::sin(x); });
  add_unary("cos", Tolerance::ulps(3, 3), unary(-50, 50, {0, 1e-30L, 1e4L, 39000, kInf, -kInf, kNaN}),
            [](LD x, DType) { return std::cos(x); });
  add_unary("floor", exact, unary(-10, 10), [](LD x, DType) { return std::floor(x); });
  add_unary("ceil", exact, unary(-10, 10), [](LD x, DType) { return std::ceil(x); });
  // cbrt: correctly rounded in the C library to within 1 ulp.
  add_unary("cbrt", Tolerance::ulps(2, 2), unary(-1000, 1000), [](LD x, DType) { return std::cbrt(x); });
  add_unary("not", exact, unary(0, 0),
            [](LD x, DType d) { return d == DType::bool_ ? LD(x == 0) : from_u64(~to_u64(x), d); });
  {
    Spec sp{"is_finite",
            "is_finite",
            exact,
            unary(-10, 10, {0, 3e38L, 1e30L, kInf, -kInf, kNaN}),
            [](const LD* x, DType) { return LD(std::isfinite(x[0])); },
            {},
            [](DType) { return DType::bool_; },
            {}};
    s.push_back(std::move(sp));
  }
  for (int method = 0; method < 2; ++method) {
    Spec sp{"round",
            method ? "round (to nearest even)" : "round (away from zero)",
            exact,
            unary(-10, 10, {0.5L, -0.5L, 1.5L, 2.5L, -2.5L, 0.49999997L, 1e20L, 1e-30L, kInf, -kInf, kNaN}),
            method ? Ref([](const LD* x, DType) { return std::nearbyint(x[0]); })
                   : Ref([](const LD* x, DType) { return std::round(x[0]); }),
            [method](const std::vector<Array>& a) {
              return lax::round(a[0],
                                method ? lax::RoundingMethod::to_nearest_even : lax::RoundingMethod::away_from_zero);
            },
            {},
            {kFloatDTypes, kFloatDTypes + 4}};
    s.push_back(std::move(sp));
  }
  for (int64_t y : {0, 1, 2, 3, 5, -1, -2, -3}) {
    // Floats: |y| - 1 correctly rounded multiplications (and a division for
    // y < 0), each adding up to half an ulp.
    Spec sp{"integer_pow",
            "integer_pow y=" + std::to_string(y),
            Tolerance::ulps(2, 2),
            [y](DType d) -> Inputs {
              if (is_int(d)) return {int_values(d)};
              return {float_values(d, -4, 4, 129, {0, -0.0L, 1e-30L, 1e30L, kInf, -kInf, kNaN})};
            },
            [y](const LD* x, DType d) {
              if (is_int(d)) return int_pow(x[0], LD(y), d);
              return std::pow(x[0], LD(y));
            },
            [y](const std::vector<Array>& a) { return lax::integer_pow(a[0], y); },
            {},
            y < 0 ? std::vector<DType>(kFloatDTypes, kFloatDTypes + 4) : std::vector<DType>{}};
    s.push_back(std::move(sp));
  }

  // -- binary
  const auto arith = [](LD mag) { return binary(-mag, mag, -mag, mag); };
  add_binary("add", Tolerance::ulps(0, 0), arith(100),
             [](LD a, LD b, DType d) { return is_int(d) ? from_u64(to_u64(a) + to_u64(b), d) : a + b; });
  add_binary("sub", Tolerance::ulps(0, 0), arith(100),
             [](LD a, LD b, DType d) { return is_int(d) ? from_u64(to_u64(a) - to_u64(b), d) : a - b; });
  add_binary("mul", Tolerance::ulps(0, 0), arith(100),
             [](LD a, LD b, DType d) { return is_int(d) ? from_u64(to_u64(a) * to_u64(b), d) : a * b; });
  add_binary("div", Tolerance::ulps(0, 0), binary(-100, 100, 0.01L, 10),
             [](LD a, LD b, DType d) { return is_int(d) ? int_div(a, b, d) : a / b; });
  add_binary("rem", exact, binary(-100, 100, -10, 10),
             [](LD a, LD b, DType d) { return is_int(d) ? int_rem(a, b, d) : std::fmod(a, b); });
  // The C library's pow in the dtype's precision (bf16 / f16 through f32):
  // correctly rounded to within 1 ulp.
  add_binary("pow", Tolerance::ulps(1, 1), binary(0, 10, -5, 5, {0, -0.0L, 1, -1, 2, -2, 0.5L, 3, kInf, -kInf, kNaN}),
             [](LD a, LD b, DType d) { return is_int(d) ? int_pow(a, b, d) : std::pow(a, b); });
  add_binary("max", exact, arith(100), [](LD a, LD b, DType) { return max_of(a, b); });
  add_binary("min", exact, arith(100), [](LD a, LD b, DType) { return min_of(a, b); });
  add_binary("and", exact, arith(0), [](LD a, LD b, DType d) { return from_u64(to_u64(a) & to_u64(b), d); });
  add_binary("or", exact, arith(0), [](LD a, LD b, DType d) { return from_u64(to_u64(a) | to_u64(b), d); });
  add_binary("xor", exact, arith(0), [](LD a, LD b, DType d) { return from_u64(to_u64(a) ^ to_u64(b), d); });
  add_binary(
      "eq", exact, arith(3), [](LD a, LD b, DType) { return LD(a == b); }, true);
  add_binary(
      "ne", exact, arith(3), [](LD a, LD b, DType) { return LD(a != b); }, true);
  add_binary(
      "lt", exact, arith(3), [](LD a, LD b, DType) { return LD(a < b); }, true);
  add_binary(
      "le", exact, arith(3), [](LD a, LD b, DType) { return LD(a <= b); }, true);
  add_binary(
      "gt", exact, arith(3), [](LD a, LD b, DType) { return LD(a > b); }, true);
  add_binary(
      "ge", exact, arith(3), [](LD a, LD b, DType) { return LD(a >= b); }, true);
  add_binary("shift_left", exact, shift_inputs, [](LD a, LD b, DType d) {
    const uint64_t s = width_bits(b, d);
    return s >= uint64_t(bits(d)) ? 0 : from_u64(to_u64(a) << s, d);
  });
  add_binary("shift_right_logical", exact, shift_inputs, [](LD a, LD b, DType d) {
    const uint64_t s = width_bits(b, d);
    return s >= uint64_t(bits(d)) ? 0 : from_u64(width_bits(a, d) >> s, d);
  });
  add_binary("shift_right_arithmetic", exact, shift_inputs, [](LD a, LD b, DType d) {
    // The bits of a read as signed, whatever the dtype's signedness.
    const uint64_t s = std::min<uint64_t>(width_bits(b, d), uint64_t(bits(d) - 1));
    uint64_t u = width_bits(a, d);
    int64_t v = bits(d) < 64 && (u >> (bits(d) - 1)) ? int64_t(u) - (int64_t(1) << bits(d)) : int64_t(u);
    return from_u64(uint64_t(v >> s), d);
  });

  // -- select_n: a bool selector with two cases, an int32 one with three.
  for (int ncases : {2, 3}) {
    Spec sp{"select_n",
            ncases == 2 ? "select_n (bool)" : "select_n (int32, 3 cases)",
            exact,
            [ncases](DType d) -> Inputs {
              std::vector<LD> base = is_int(d) ? int_values(d) : float_values(d, -10, 10, 40, kFloatSpecials);
              Inputs in(size_t(ncases) + 1);
              for (size_t i = 0; i < base.size(); ++i) {
                in[0].push_back(LD((i * 7 + 3) % size_t(ncases)));
                for (int c = 0; c < ncases; ++c) in[size_t(c) + 1].push_back(base[(i + size_t(c) * 5) % base.size()]);
              }
              return in;
            },
            [](const LD* x, DType) { return x[1 + size_t(x[0])]; },
            [ncases](const std::vector<Array>& a) {
              Array which = ncases == 2 ? lax::convert_element_type(a[0], DType::bool_) : a[0];
              return lax::select_n(which, std::vector<Array>(a.begin() + 1, a.end()));
            },
            {},
            {kAllDTypes, kAllDTypes + 9}};
    s.push_back(std::move(sp));
  }

  // -- convert_element_type: every pair of dtypes.
  for (DType to : kAllDTypes) {
    Spec sp{"convert_element_type",
            std::string("convert_element_type to ") + dtype_name(to),
            exact,
            [](DType d) -> Inputs {
              if (is_int(d)) return {int_values(d)};
              // Ties of every narrower format, values beyond every integer
              // range, fractions of both signs.
              return {float_values(d, -300, 300, 97,
                                   {0,
                                    -0.0L,
                                    0.5L,
                                    -0.5L,
                                    1.5L,
                                    -1.7L,
                                    255.5L,
                                    256,
                                    65504,
                                    65520,
                                    1 + 1.0L / 256,
                                    1 + 3.0L / 256,
                                    1 + 1.0L / 2048,
                                    1 + 1.0L / 8388608 + 1.0L / 16777216,
                                    3e9L,
                                    -3e9L,
                                    5e9L,
                                    1e19L,
                                    -1e19L,
                                    1e30L,
                                    1e-30L,
                                    1e-40L,
                                    kInf,
                                    -kInf,
                                    kNaN})};
            },
            [to](const LD* x, DType from) {
              // Integer to integer wraps (keeps the low bits); from a float
              // it truncates and saturates.
              if (!is_floating(from) && is_integer(to)) return round_to(x[0], to);
              return convert_value(x[0], to);
            },
            [to](const std::vector<Array>& a) { return lax::convert_element_type(a[0], to); },
            [to](DType) { return to; },
            {kAllDTypes, kAllDTypes + 9}};
    s.push_back(std::move(sp));
  }

  // -- bitcast_convert_type: same-width pairs (the host reference copies bits).
  const std::vector<std::vector<DType>> widths = {
      {DType::u32, DType::i32, DType::f32}, {DType::i64, DType::f64}, {DType::bf16, DType::f16}};
  for (const std::vector<DType>& group : widths) {
    for (DType to : group) {
      Spec sp{"bitcast_convert_type",
              std::string("bitcast_convert_type to ") + dtype_name(to),
              exact,
              [](DType d) -> Inputs {
                if (is_int(d)) return {int_values(d)};
                return {float_values(d, -100, 100, 33, {0, -0.0L, 1e-30L, 1e30L, kInf, -kInf})};
              },
              [to](const LD* x, DType d) {
                // The bits of x in d, read as `to`.
                unsigned char in[8] = {}, out[8] = {};
                double xd = double(x[0]);
                if (is_floating(d)) {
                  convert_host(DType::f64, &xd, d, in, 1);
                } else {
                  uint64_t u = to_u64(x[0]);
                  std::memcpy(in, &u, itemsize(d));  // little-endian: the low bytes
                }
                std::memcpy(out, in, itemsize(d));
                if (is_floating(to)) {
                  double r;
                  convert_host(to, out, DType::f64, &r, 1);
                  return LD(r);
                }
                uint64_t u = 0;
                std::memcpy(&u, out, itemsize(to));
                return from_u64(u, to);
              },
              [to](const std::vector<Array>& a) { return lax::bitcast_convert_type(a[0], to); },
              [to](DType) { return to; },
              group};
      s.push_back(std::move(sp));
    }
  }
  return s;
}

// The specs of primitives present in prims.def (a reference for a primitive
// not in it, cbrt say, waits until it is added).
const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = [] {
    std::vector<Spec> out;
    for (Spec& sp : make_specs()) {
      const PrimEntry* e = find_prim(sp.prim);
      if (!e) continue;
      if (!sp.call) {
        PAX_CHECK(e->lax, "conformance: ", sp.prim, " has no plain lax function; give its spec a call");
        sp.call = [fn = e->lax](const std::vector<Array>& a) { return fn(a); };
      }
      if (sp.dtypes.empty()) {
        std::optional<Accepts> acc = prim_accepts(e->prim);
        PAX_CHECK(acc.has_value(), "conformance: ", sp.prim, " checks its dtypes itself; list them in its spec");
        sp.dtypes = accepted_dtypes(*acc);
      }
      out.push_back(std::move(sp));
    }
    return out;
  }();
  return all;
}

const bool kRegistered = [] {
  for (const Spec& sp : specs()) register_case(sp.prim.c_str());
  return true;
}();

// Every elementwise primitive of prims.def has a reference here.
TEST(ElementwiseConformance, EveryElementwisePrimitiveHasAReference) {
  for (const PrimEntry& e : kPrims) {
    if (e.family != PrimFamily::unary && e.family != PrimFamily::binary) continue;
    bool found = false;
    for (const Spec& sp : specs()) found = found || sp.prim == e.name;
    EXPECT_TRUE(found) << "elementwise primitive '" << e.name << "' has no reference in "
                       << "pax/backend/conformance/elementwise_test.cc (make_specs)";
  }
}

// The result after the jit chain: not for bool, neg otherwise.
LD chained(LD r, DType d) {
  if (d == DType::bool_) return r == 0;
  if (is_int(d)) return from_u64(0 - to_u64(r), d);
  return -r;
}

// Known deviations of pax from the reference, each naming the bug: their
// elements are left out of the comparison, and each must still deviate (a
// fixed bug fails the test until its entry is removed).
struct KnownFailure {
  const char* label;  // Spec::label
  std::vector<DType> dtypes;
  bool jit_only;        // eager is right
  bool (*input)(LD x);  // the elements affected, by their first operand
  const char* bug;
};
// None at present; an entry reads
//   {"logistic", {DType::f32}, false, [](LD x) { return x < -88; }, "what is wrong"},
const std::vector<KnownFailure> kKnownFailures = {};

struct Prepared {
  const Spec* spec;
  std::vector<Host> in;
  std::vector<LD> want;  // unchained
  DType out;
};

class ElementwiseConformance : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseConformance, EveryOperationAgainstTheReference) {
  const DType dtype = GetParam();
  std::vector<Prepared> cases;
  for (const Spec& sp : specs()) {
    if (std::find(sp.dtypes.begin(), sp.dtypes.end(), dtype) == sp.dtypes.end()) continue;
    Prepared p{&sp, {}, {}, sp.out_dtype ? sp.out_dtype(dtype) : dtype};
    Inputs in = sp.inputs(dtype);
    for (size_t k = 0; k < in.size(); ++k) {
      // select_n's selector is an int32 operand; the others have the dtype.
      const DType dk = sp.prim == "select_n" && k == 0 ? DType::i32 : dtype;
      p.in.push_back(Host{dk, Shape{int64_t(in[k].size())}, in[k]});
    }
    std::vector<LD> x(in.size());
    for (size_t i = 0; i < in[0].size(); ++i) {
      for (size_t k = 0; k < in.size(); ++k) x[k] = in[k][i];
      p.want.push_back(sp.ref(x.data(), dtype));
    }
    cases.push_back(std::move(p));
  }
  ASSERT_FALSE(cases.empty());
  const cpu::NativeBuildStats before = cpu::native_build_stats();
  for_each_device_and_mode([&](Device dev, Mode mode) {
    std::vector<Array> args;
    for (const Prepared& p : cases) {
      for (const Host& h : p.in) args.push_back(make(h.v, h.shape, h.dtype, dev));
    }
    const bool chain = mode == Mode::jit;
    Fn program = [&cases, chain](const std::vector<Array>& a) {
      std::vector<Array> out;
      size_t k = 0;
      for (const Prepared& p : cases) {
        std::vector<Array> operands(a.begin() + int64_t(k), a.begin() + int64_t(k + p.in.size()));
        k += p.in.size();
        Array y = p.spec->call(operands);
        if (chain) y = y.dtype() == DType::bool_ ? lax::bitwise_not(y) : lax::neg(y);
        out.push_back(y);
      }
      return out;
    };
    std::vector<Array> out = run(mode, program, args);
    ASSERT_EQ(out.size(), cases.size());
    for (size_t c = 0; c < cases.size(); ++c) {
      const Prepared& p = cases[c];
      Host got = read_back(out[c]);
      EXPECT_EQ(got.dtype, p.out) << p.spec->label;
      std::vector<LD> want = p.want;
      if (chain) {
        for (LD& w : want) w = chained(w, p.out);
      }
      const KnownFailure* known = nullptr;
      for (const KnownFailure& k : kKnownFailures) {
        if (p.spec->label == k.label && (!k.jit_only || mode == Mode::jit) &&
            std::find(k.dtypes.begin(), k.dtypes.end(), dtype) != k.dtypes.end()) {
          known = &k;
        }
      }
      std::vector<Host> in = p.in;
      if (known) {
        // Compare the other elements; the known ones must still deviate.
        Host kept_got = got, known_got = got;
        kept_got.v.clear(), known_got.v.clear();
        std::vector<LD> kept_want, known_want;
        for (Host& h : in) h.v.clear();
        for (size_t i = 0; i < want.size(); ++i) {
          if (known->input(p.in[0].v[i])) {
            known_got.v.push_back(got.v[i]), known_want.push_back(want[i]);
          } else {
            kept_got.v.push_back(got.v[i]), kept_want.push_back(want[i]);
            for (size_t k = 0; k < in.size(); ++k) in[k].v.push_back(p.in[k].v[i]);
          }
        }
        EXPECT_FALSE(matches(known_got, known_want, p.spec->tol))
            << p.spec->label << " " << dtype_name(dtype) << " matches the reference now; the known failure '"
            << known->bug << "' is fixed: remove it from kKnownFailures";
        got = kept_got, want = kept_want;
      }
      EXPECT_TRUE(matches(got, want, p.spec->tol, &in[in.size() > 2 ? 1 : 0], in.size() == 2 ? &in[1] : nullptr))
          << p.spec->label << " " << dtype_name(dtype);
    }
  });
  // The jitted programs ran generated code (built here or loaded from the
  // cache) when this process builds it. The CPU loop renderer covers float
  // results computed in f32 (f32, and bf16 widened to f32) and int32
  // results; loops of the other dtypes run interpreted, and int32 sources
  // may repeat one already loaded by this process, so the check is made
  // where it is certain.
  if (jit_generates_code() && (dtype == DType::f32 || dtype == DType::bf16)) {
    const cpu::NativeBuildStats after = cpu::native_build_stats();
    EXPECT_GT(after.compiled + after.cache_hits, before.compiled + before.cache_hits)
        << "no generated code was built or loaded for the jitted " << dtype_name(dtype) << " program";
    EXPECT_EQ(after.failed, before.failed) << "a build of generated code failed";
  }
}

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_short_name(info.param); }

INSTANTIATE_TEST_SUITE_P(AllDTypes, ElementwiseConformance, ::testing::ValuesIn(kAllDTypes), dtype_param_name);

}  // namespace
}  // namespace pax::conformance

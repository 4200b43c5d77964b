// The conformance suite's harness (conformance.h) and its coverage checks:
// every primitive of prims.def has a conformance case and every primitive
// with a derivative rule a finite-difference case, unless listed in the
// exclusions below with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "pax/api/transforms.h"
#include "pax/backend/conformance/conformance.h"
#include "pax/backend/conformance/families.h"
#include "pax/backend/cpu/native_compiler.h"
#include "pax/core/device_put.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax::conformance {

// Every device present (the CPU and the sim device in CI; a GPU where there is one).
std::vector<Device> conformance_devices() { return devices(); }

Array put(const Array& host_value, Device d) { return device_put(host_value, d); }

std::string mode_name(Mode m) {
  if (m == Mode::eager) return "eager";
  return jit_generates_code() ? "jit (generated code)" : "jit (interpreted)";
}

bool jit_generates_code() { return cpu::native_compiler_available(); }

std::vector<Array> run(Mode m, const Fn& f, const std::vector<Array>& args) {
  if (m == Mode::eager) return f(args);
  auto jitted = pax::jit([f](const std::vector<Array>& a) { return f(a); });
  return jitted(args);
}

void for_each_device_and_mode(const std::function<void(Device, Mode)>& check) {
  for (Device d : conformance_devices()) {
    for (Mode m : kModes) {
      SCOPED_TRACE(d.str() + " " + mode_name(m));
      check(d, m);
    }
  }
}

// ---- host values

Host read_back(const Array& a) {
  Host h{a.dtype(), a.shape(), {}};
  if (is_floating(a.dtype())) {
    for (double x : a.to_vector<double>()) h.v.push_back(x);
  } else if (a.dtype() == DType::u32) {
    for (uint32_t x : a.to_vector<uint32_t>()) h.v.push_back(x);
  } else {
    for (int64_t x : a.to_vector<int64_t>()) h.v.push_back(x);
  }
  return h;
}

Array make(const std::vector<long double>& values, const Shape& shape, DType dtype, Device d) {
  PAX_CHECK(int64_t(values.size()) == shape.numel(), "conformance make: ", values.size(), " values for shape ", shape);
  for (long double x : values) {
    PAX_CHECK(std::isnan(x) || round_to(x, dtype) == x, "conformance make: ", double(x), " is not representable in ",
              dtype_name(dtype));
  }
  Array host;
  if (is_floating(dtype)) {
    std::vector<double> v(values.begin(), values.end());
    host = array(v, shape);
  } else if (dtype == DType::u32) {
    std::vector<uint32_t> v;
    for (long double x : values) v.push_back(uint32_t(x));
    host = array(v, shape);
  } else {
    std::vector<int64_t> v;
    for (long double x : values) v.push_back(int64_t(x));
    host = array(v, shape);
  }
  if (host.dtype() != dtype) host = host.astype(dtype);
  return put(host, d);
}

namespace {

struct Format {
  int precision;  // significand bits, the implicit one included
  int emin, emax;
};
Format format_of(DType d) {
  switch (d) {
    case DType::bf16: return {8, -126, 127};
    case DType::f16: return {11, -14, 15};
    case DType::f32: return {24, -126, 127};
    default: return {53, -1022, 1023};
  }
}

int bits_of(DType d) { return int(itemsize(d)) * 8; }

}  // namespace

long double round_to(long double x, DType dtype) {
  if (dtype == DType::bool_) return x != 0 ? 1 : 0;
  if (is_integer(dtype)) {
    // Wrap modulo 2^bits (the value is an integer that fits in 64 bits).
    const int bits = bits_of(dtype);
    uint64_t u = x < 0 ? uint64_t(int64_t(x)) : uint64_t(x);
    if (bits < 64) u &= (uint64_t(1) << bits) - 1;
    if (is_unsigned(dtype)) return (long double)u;
    if (bits < 64 && (u >> (bits - 1))) return (long double)(int64_t(u) - (int64_t(1) << bits));
    return (long double)int64_t(u);
  }
  if (!std::isfinite(x) || x == 0) return x;
  const Format f = format_of(dtype);
  int e = std::ilogb(x);
  if (e < f.emin) e = f.emin;  // subnormal: the spacing of the smallest normal
  const long double scale = std::ldexp(1.0L, e - (f.precision - 1));
  const long double r = std::nearbyint(x / scale) * scale;  // long double holds 64 bits: exact
  const long double max = std::ldexp(2.0L - std::ldexp(1.0L, 1 - f.precision), f.emax);
  if (std::fabs(r) > max) return std::copysign(std::numeric_limits<long double>::infinity(), x);
  return r;
}

long double convert_value(long double x, DType dtype) {
  if (dtype == DType::bool_) return x != 0 ? 1 : 0;
  if (is_floating(dtype)) return round_to(x, dtype);
  if (std::isnan(x)) return 0;
  const long double t = std::trunc(x);
  const int bits = bits_of(dtype);
  const long double lo = is_unsigned(dtype) ? 0.0L : -std::ldexp(1.0L, bits - 1);
  const long double hi = is_unsigned(dtype) ? std::ldexp(1.0L, bits) - 1 : std::ldexp(1.0L, bits - 1) - 1;
  return std::min(std::max(t, lo), hi);
}

std::vector<long double> float_values(DType dtype, long double lo, long double hi, int n,
                                      const std::vector<long double>& specials) {
  std::vector<long double> v;
  for (int i = 0; i < n; ++i) v.push_back(round_to(lo + (hi - lo) * i / std::max(1, n - 1), dtype));
  for (long double s : specials) v.push_back(round_to(s, dtype));
  return v;
}

std::vector<long double> int_values(DType dtype) {
  if (dtype == DType::bool_) return {0, 1, 1, 0, 0, 1};
  const int bits = bits_of(dtype);
  const long double lo = is_unsigned(dtype) ? 0.0L : -std::ldexp(1.0L, bits - 1);
  const long double hi = is_unsigned(dtype) ? std::ldexp(1.0L, bits) - 1 : std::ldexp(1.0L, bits - 1) - 1;
  std::vector<long double> v = {0, 1, 2, 3, 5, 7, 8, 13, 100, lo, hi, hi - 1, lo + 1};
  if (!is_unsigned(dtype)) {
    for (long double x : {-1.0L, -2.0L, -3.0L, -7.0L, -8.0L, -100.0L}) v.push_back(x);
  }
  std::mt19937_64 gen(uint64_t(dtype) + 11);
  for (int i = 0; i < 24; ++i) {
    const uint64_t u = gen();
    v.push_back(round_to(is_unsigned(dtype) ? (long double)u : (long double)int64_t(u), dtype));
  }
  for (long double& x : v) x = round_to(x, dtype);
  return v;
}

std::vector<long double> random_values(DType dtype, int64_t n, uint32_t seed, long double lo, long double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist{double(lo), double(hi)};
  std::vector<long double> v;
  for (int64_t i = 0; i < n; ++i) {
    long double x = dist(gen);
    if (!is_floating(dtype)) x = std::floor(x);
    v.push_back(round_to(x, dtype));
  }
  return v;
}

std::vector<DType> accepted_dtypes(Accepts accepts) {
  switch (accepts) {
    case Accepts::floating: return {kFloatDTypes, kFloatDTypes + 4};
    case Accepts::numeric:
      return {DType::u8, DType::u32, DType::i32, DType::i64, DType::bf16, DType::f16, DType::f32, DType::f64};
    case Accepts::integer: return {DType::u8, DType::u32, DType::i32, DType::i64};
    case Accepts::int_or_bool: return {DType::bool_, DType::u8, DType::u32, DType::i32, DType::i64};
    case Accepts::any: return {kAllDTypes, kAllDTypes + 9};
  }
  return {};
}

// ---- comparison

double Tolerance::for_dtype(DType d) const {
  switch (d) {
    case DType::f32: return ulps_f32;
    case DType::f64: return ulps_f64;
    case DType::bf16:
    case DType::f16: return ulps_half;
    default: return 0;
  }
}

double ulp_distance(long double a, long double b, DType dtype) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
  if (a == b) return 0;
  if (!is_floating(dtype)) return INFINITY;
  // Position of a value on the line of the dtype's values, ordered, with
  // the zeros at 0 and each next representable value one further.
  auto position = [dtype](long double x) -> long double {
    const Format f = format_of(dtype);
    const long double ax = std::fabs(x);
    long double pos;
    if (std::isinf(x)) {
      pos = std::ldexp(1.0L, f.precision - 1) * (f.emax - f.emin + 2);
    } else if (ax < std::ldexp(1.0L, f.emin)) {
      pos = ax / std::ldexp(1.0L, f.emin - (f.precision - 1));
    } else {
      const int e = std::ilogb(ax);
      const long double m = ax / std::ldexp(1.0L, e - (f.precision - 1));  // in [2^(p-1), 2^p)
      pos = std::ldexp(1.0L, f.precision - 1) * (e - f.emin + 1) + (m - std::ldexp(1.0L, f.precision - 1));
    }
    return x < 0 ? -pos : pos;
  };
  return double(std::fabs(position(a) - position(b)));
}

::testing::AssertionResult matches(const Host& got, const std::vector<long double>& want, const Tolerance& tol,
                                   const Host* inputs, const Host* inputs2) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "got " << got.size() << " values, expected " << want.size();
  }
  const double allowed = tol.for_dtype(got.dtype);
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const long double w = round_to(want[i], got.dtype);
    const double d = ulp_distance(got.v[i], w, got.dtype);
    if (d > worst) worst = d, worst_at = i;
  }
  if (std::getenv("PAX_CONFORMANCE_REPORT") && worst > 0) {
    std::printf("conformance: %s worst %.1f ulp (allowed %.1f)\n", dtype_name(got.dtype), worst, allowed);
  }
  if (worst <= allowed) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure();
  std::ostringstream at;
  at.precision(std::numeric_limits<double>::max_digits10);
  at << "element " << worst_at << " of " << dtype_name(got.dtype) << "[" << got.size() << "]";
  if (inputs && inputs->size() == got.size()) {
    at << " (input " << double(inputs->v[worst_at]);
    if (inputs2 && inputs2->size() == got.size()) at << ", " << double(inputs2->v[worst_at]);
    at << ")";
  }
  at << ": got " << double(got.v[worst_at]) << ", expected " << double(round_to(want[worst_at], got.dtype)) << " ("
     << worst << " ulp; allowed " << allowed << ")";
  return r << at.str();
}

// ---- family helpers (families.h)

Host host(DType dtype, const Shape& shape, std::vector<long double> values) {
  for (long double& x : values) x = round_to(x, dtype);
  return Host{dtype, shape, std::move(values)};
}

Host small_ints(DType dtype, const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(is_unsigned(dtype) ? 0 : -4, 4);
  std::vector<long double> v;
  for (int64_t i = 0; i < shape.numel(); ++i) v.push_back(dtype == DType::bool_ ? dist(gen) > 0 : dist(gen));
  return host(dtype, shape, v);
}

Host distinct(DType dtype, const Shape& shape) {
  std::vector<long double> v;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    // Distinct while the dtype can tell them apart (u8 wraps past 255, bool has two).
    v.push_back(dtype == DType::bool_ ? (i * 7 % 3 == 0) : is_unsigned(dtype) ? i + 1 : (i % 2 ? -(i + 1) : i + 1));
  }
  return host(dtype, shape, v);
}

bool accepts(const Fn& f, const std::vector<Host>& in) {
  std::vector<Array> args;
  for (const Host& h : in) args.push_back(make(h.v, h.shape, h.dtype, default_device()));
  try {
    (void)pax::eval_shape([&f](const std::vector<Array>& a) { return f(a); })(args);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void expect_op(const std::string& label, const Fn& f, const std::vector<Host>& in, const std::vector<Host>& want,
               Tolerance tol) {
  SCOPED_TRACE(label);
  for_each_device_and_mode([&](Device dev, Mode mode) {
    std::vector<Array> args;
    for (const Host& h : in) args.push_back(make(h.v, h.shape, h.dtype, dev));
    std::vector<Array> out = run(mode, f, args);
    ASSERT_EQ(out.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      Host got = read_back(out[k]);
      EXPECT_EQ(got.dtype, want[k].dtype) << "output " << k;
      EXPECT_EQ(got.shape, want[k].shape) << "output " << k;
      if (got.shape != want[k].shape) continue;
      EXPECT_TRUE(matches(got, want[k].v, tol, in.empty() ? nullptr : &in[0])) << "output " << k;
    }
  });
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(size_t(shape.rank()));
  for (int64_t d = shape.rank() - 1; d >= 0; --d) {
    idx[size_t(d)] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (int64_t d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + idx[size_t(d)];
  return flat;
}

// ---- coverage

namespace {
std::set<std::string>& cases() {
  static std::set<std::string> s;
  return s;
}
std::set<std::string>& derivative_cases() {
  static std::set<std::string> s;
  return s;
}
}  // namespace

bool register_case(const char* prim) { return cases().insert(prim).second || true; }
bool register_derivative_case(const char* prim) { return derivative_cases().insert(prim).second || true; }

namespace {
std::vector<std::vector<std::string> (*)()>& derivative_listers() {
  static std::vector<std::vector<std::string> (*)()> v;
  return v;
}
}  // namespace

bool register_derivative_lister(std::vector<std::string> (*lister)()) {
  derivative_listers().push_back(lister);
  return true;
}

namespace {

// Primitives without a conformance case of their own, and why.
const std::map<std::string, std::string>& excluded() {
  static const std::map<std::string, std::string> m = {
      // (empty: every primitive has a case; collectives run under vmap with
      // a named axis, control flow and transforms as small programs.)
  };
  return m;
}

// Primitives whose derivative rules have no finite-difference case, and why.
const std::map<std::string, std::string>& excluded_derivatives() {
  static const std::map<std::string, std::string> m = {
      // The identity on values whose derivative is zero by definition:
      // finite differences see the identity. TransformConformance checks
      // its zero gradient.
      {"stop_gradient", "its derivative is zero by definition, not the finite difference of its values"},
  };
  return m;
}

std::vector<Prim> all_prims() {
  return {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) Prim::id,
#include "pax/ir/prims.def"
#undef PAX_PRIM
  };
}

}  // namespace

TEST(Conformance, EveryPrimitiveHasACase) {
  for (Prim p : all_prims()) {
    const std::string name = prim_name(p);
    EXPECT_TRUE(cases().count(name) || excluded().count(name))
        << "primitive '" << name << "' (prims.def) has no conformance case: add one in pax/backend/conformance/, "
        << "or list it with the reason in the exclusions of harness_test.cc";
  }
  for (const auto& [name, why] : excluded()) {
    EXPECT_FALSE(cases().count(name)) << name << " is excluded (" << why << ") but has a case: drop the exclusion";
  }
}

TEST(Conformance, EveryDerivativeRuleHasAFiniteDifferenceCase) {
  for (auto lister : derivative_listers()) {
    for (const std::string& name : lister()) register_derivative_case(name.c_str());
  }
  for (Prim p : all_prims()) {
    const PrimDef& def = prim_def(p);
    if (!def.vjp && !def.jvp) continue;
    const std::string name = prim_name(p);
    EXPECT_TRUE(derivative_cases().count(name) || excluded_derivatives().count(name))
        << "primitive '" << name << "' has a " << (def.vjp ? "VJP" : "JVP")
        << " rule but no finite-difference case in pax/backend/conformance/derivatives_test.cc";
  }
}

TEST(Conformance, RoundingAndUlpsOfTheHarness) {
  // The harness's own arithmetic: rounding to each format and ulp counting.
  EXPECT_EQ(round_to(1.0L + 1.0L / 256, DType::bf16), 1.0L);               // tie to even
  EXPECT_EQ(round_to(1.0L + 3.0L / 256, DType::bf16), 1.0L + 4.0L / 256);  // tie to even (up)
  EXPECT_EQ(round_to(65520.0L, DType::f16), INFINITY);                     // overflow threshold
  EXPECT_EQ(round_to(65519.0L, DType::f16), 65504.0L);
  EXPECT_EQ(round_to(std::ldexp(1.0L, -25), DType::f16), 0.0L);  // half the smallest subnormal: even
  EXPECT_EQ(round_to(300.0L, DType::u8), 44.0L);
  EXPECT_EQ(round_to(-1.0L, DType::u32), 4294967295.0L);
  EXPECT_EQ(round_to(2147483648.0L, DType::i32), -2147483648.0L);
  EXPECT_EQ(convert_value(-1.7L, DType::u8), 0.0L);
  EXPECT_EQ(convert_value(3e9L, DType::i32), 2147483647.0L);
  EXPECT_EQ(convert_value(NAN, DType::i64), 0.0L);
  EXPECT_EQ(ulp_distance(1.0L, 1.0L + std::ldexp(1.0L, -23), DType::f32), 1.0);
  EXPECT_EQ(ulp_distance(-0.0L, 0.0L, DType::f32), 0.0);
  EXPECT_EQ(ulp_distance(std::ldexp(1.0L, -149), -std::ldexp(1.0L, -149), DType::f32), 2.0);
  EXPECT_EQ(ulp_distance(65504.0L, INFINITY, DType::f16), 1.0);
  EXPECT_EQ(ulp_distance(1.0L - std::ldexp(1.0L, -24), 1.0L, DType::f32), 1.0);
  EXPECT_EQ(ulp_distance(NAN, 1.0L, DType::f32), INFINITY);
}

}  // namespace pax::conformance

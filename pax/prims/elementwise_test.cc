// Elementwise primitives against the C library / hand values, for every dtype
// they accept, including special values, large (multi-threaded) arrays and
// error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using namespace testing;  // all_close, random_array, kNaN, kInf

// Inputs covering the interesting range of each function plus special values.
std::vector<double> inputs(double lo, double hi, int n = 257) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * i / (n - 1));
  return v;
}

struct UnaryCase {
  const char* name;
  std::function<Array(const Array&)> op;
  std::function<double(double)> ref;
  double lo, hi;
  std::vector<double> specials;
  double rtol = 2e-6, atol = 1e-7;
};

double erfinv_ref(double y) {
  if (std::fabs(y) >= 1) return std::fabs(y) == 1 ? std::copysign(kInf, y) : kNaN;
  // Newton on erfc in the tails, where erf(x) - y would cancel.
  const double ay = std::fabs(y), t = 1 - ay;
  double x = 0;
  for (int i = 0; i < 200; ++i) {
    double err = ay > 0.5 ? t - std::erfc(x) : std::erf(x) - ay;
    x -= err / (2 / std::sqrt(M_PI) * std::exp(-x * x));
  }
  return std::copysign(x, y);
}

std::vector<UnaryCase> unary_cases() {
  const std::vector<double> common = {0.0, -0.0, kInf, -kInf, kNaN};
  return {
      {"neg", lax::neg, [](double x) { return -x; }, -10, 10, common},
      {"abs", lax::abs, [](double x) { return std::fabs(x); }, -10, 10, common},
      {"sign", lax::sign, [](double x) { return x > 0   ? 1.0
                                                : x < 0 ? -1.0
                                                        : x; }, -3, 3, common},
      {"exp",
       lax::exp,
       [](double x) { return std::exp(x); },
       -100,
       88,
       {0.0, 89.0, 100.0, 1e30, -1e30, -200.0, kInf, -kInf, kNaN}},
      {"expm1",
       lax::expm1,
       [](double x) { return std::expm1(x); },
       -20,
       20,
       {1e-7, -1e-7, 0.0, 100.0, -200.0, kInf, -kInf, kNaN},
       5e-6,
       1e-7},
      {"log", lax::log, [](double x) { return std::log(x); }, 1e-3, 1e4, {0.0, -1.0, 1.0, 1e-40, 3e38, kInf, kNaN}},
      {"log1p",
       lax::log1p,
       [](double x) { return std::log1p(x); },
       -0.99,
       100,
       {1e-7, -1.0, -2.0, 0.0, kInf, kNaN},
       5e-6,
       1e-7},
      {"sqrt", lax::sqrt, [](double x) { return std::sqrt(x); }, 0, 1e4, {0.0, -1.0, kInf, kNaN}},
      {"rsqrt", lax::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 1e-3, 1e4, {0.0, kInf, kNaN}},
      {"tanh",
       lax::tanh,
       [](double x) { return std::tanh(x); },
       -10,
       10,
       {0.0, 30.0, -30.0, 1e-6, kInf, -kInf, kNaN},
       5e-6,
       1e-7},
      {"logistic",
       lax::logistic,
       [](double x) { return 1 / (1 + std::exp(-x)); },
       -30,
       30,
       {0.0, 200.0, -200.0, kInf, -kInf, kNaN}},
      {"erf", lax::erf, [](double x) { return std::erf(x); }, -5, 5, {0.0, 1e-5, 10.0, kInf, -kInf, kNaN}, 5e-6, 2e-7},
      {"erf_inv", lax::erf_inv, erfinv_ref, -0.999, 0.999, {0.0, 1.0, -1.0, 1.5, 1e-6, 0.9999999, kNaN}, 2e-5, 1e-7},
      {"sin", lax::sin, [](double x) { return std::sin(x); }, -50, 50, {0.0, 1e5, -3e6, kInf, kNaN}, 2e-6, 3e-7},
      {"cos", lax::cos, [](double x) { return std::cos(x); }, -50, 50, {0.0, 1e5, -3e6, kInf, kNaN}, 2e-6, 3e-7},
      {"floor", lax::floor, [](double x) { return std::floor(x); }, -10, 10, common},
      {"ceil", lax::ceil, [](double x) { return std::ceil(x); }, -10, 10, common},
      {"round",
       [](const Array& x) { return lax::round(x); },
       [](double x) { return std::round(x); },
       -10,
       10,
       {0.5, -0.5, 1.5, 2.5, -2.5, 1e20, kInf, kNaN}},
      {"round_even",
       [](const Array& x) { return lax::round(x, lax::RoundingMethod::to_nearest_even); },
       [](double x) { return std::nearbyint(x); },
       -10,
       10,
       {0.5, -0.5, 1.5, 2.5, -2.5, 1e20, kInf, kNaN}},
  };
}

// The reference evaluated on the f32-rounded input, in double.
std::vector<double> reference(const UnaryCase& c, const std::vector<double>& x, DType dtype) {
  std::vector<double> out;
  for (double v : x) {
    double rounded;
    unsigned char tmp[8];
    convert_host(DType::f64, &v, dtype, tmp, 1);
    convert_host(dtype, tmp, DType::f64, &rounded, 1);
    // The exact result rounded to the dtype (e.g. overflow to inf in f32).
    double r = c.ref(rounded);
    convert_host(DType::f64, &r, dtype, tmp, 1);
    convert_host(dtype, tmp, DType::f64, &r, 1);
    out.push_back(r);
  }
  return out;
}

TEST(ElementwiseUnary, Float32AgainstLibm) {
  for (const UnaryCase& c : unary_cases()) {
    std::vector<double> x = inputs(c.lo, c.hi);
    x.insert(x.end(), c.specials.begin(), c.specials.end());
    Array a = array(x, Shape{int64_t(x.size())}).astype(DType::f32);
    EXPECT_TRUE(all_close(c.op(a), reference(c, x, DType::f32), c.rtol, c.atol)) << c.name;
  }
}

TEST(ElementwiseUnary, Float64AgainstLibm) {
  for (const UnaryCase& c : unary_cases()) {
    std::vector<double> x = inputs(c.lo, c.hi);
    x.insert(x.end(), c.specials.begin(), c.specials.end());
    Array a = array(x, Shape{int64_t(x.size())});
    EXPECT_TRUE(all_close(c.op(a), reference(c, x, DType::f64), 1e-12, 1e-14)) << c.name;
  }
}

TEST(ElementwiseUnary, HalfPrecisionComputesInF32) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 8e-3 : 1e-3;
    for (const UnaryCase& c : unary_cases()) {
      std::vector<double> x = inputs(std::max(c.lo, -8.0), std::min(c.hi, 8.0), 65);
      Array a = array(x, Shape{int64_t(x.size())}).astype(dt);
      Array y = c.op(a);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(all_close(y, reference(c, x, dt), tol, tol)) << c.name << " " << dtype_name(dt);
    }
  }
}

TEST(ElementwiseUnary, LargeArraysUseEveryChunk) {
  // 3M elements: many parallel chunks plus a vector tail.
  const int64_t n = 3 * 1000 * 1000 + 7;
  Array x = random_array({n}, DType::f32, 1, -5, 5);
  std::vector<double> xs = x.to_vector<double>();
  std::vector<double> want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) want[i] = std::exp(xs[i]);
  EXPECT_TRUE(all_close(lax::exp(x), want, 2e-6, 0));
}

TEST(ElementwiseUnary, IntegersAndBool) {
  Array i = array<int32_t>({-3, 0, 5, std::numeric_limits<int32_t>::min()});
  EXPECT_EQ(lax::neg(i).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, -5, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(lax::abs(i).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 5, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(lax::sign(i).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 1, -1}));
  EXPECT_EQ(lax::bitwise_not(i).to_vector<int32_t>(),
            (std::vector<int32_t>{2, -1, -6, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(lax::bitwise_not(array<bool>({true, false})).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(lax::bitwise_not(array<uint8_t>({0, 255})).to_vector<int>(), (std::vector<int>{255, 0}));
  EXPECT_EQ(lax::neg(array<int64_t>({5})).item<int64_t>(), -5);
}

TEST(ElementwiseUnary, IsFiniteAndIntegerPow) {
  Array x = array<float>({1.0f, INFINITY, -INFINITY, NAN, 0.0f});
  EXPECT_EQ(lax::is_finite(x).to_vector<bool>(), (std::vector<bool>{true, false, false, false, true}));
  EXPECT_EQ(lax::is_finite(x.astype(DType::bf16)).to_vector<bool>(),
            (std::vector<bool>{true, false, false, false, true}));
  Array b = array<float>({2, -3, 0.5f});
  EXPECT_TRUE(all_close(lax::integer_pow(b, 3), {8, -27, 0.125}));
  EXPECT_TRUE(all_close(lax::integer_pow(b, -2), {0.25, 1.0 / 9, 4}));
  EXPECT_TRUE(all_close(lax::integer_pow(b, 0), {1, 1, 1}));
  EXPECT_EQ(lax::integer_pow(array<int32_t>({3, -2}), 3).to_vector<int32_t>(), (std::vector<int32_t>{27, -8}));
  EXPECT_EQ(lax::integer_pow(array<int32_t>({1, -1, 2}), -1).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 0}));
}

TEST(ElementwiseUnary, DtypeErrors) {
  EXPECT_PAX_ERROR(lax::exp(array<int32_t>({1})), "exp: operand i32[1] has dtype int32; it requires a floating dtype");
  EXPECT_PAX_ERROR(lax::neg(array<bool>({true})), "requires a numeric dtype");
  EXPECT_PAX_ERROR(lax::bitwise_not(array<float>({1})), "bool or an integer dtype");
  EXPECT_PAX_ERROR(lax::is_finite(array<int32_t>({1})), "floating");
}

// ---------------------------------------------------------------------------
// binary

template <class T>
std::vector<double> apply(const std::vector<double>& a, const std::vector<double>& b, T f) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
  return out;
}

TEST(ElementwiseBinary, FloatArithmeticAllFloatDtypes) {
  const int64_t n = 1000;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Array a = random_array({n}, dt, 2, -4, 4);
    Array b = random_array({n}, dt, 3, 0.5, 4);
    std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    const double tol = dt == DType::f64 ? 1e-15 : dt == DType::f32 ? 1e-6 : 1e-2;
    EXPECT_TRUE(all_close(lax::add(a, b), apply(av, bv, std::plus<>()), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lax::sub(a, b), apply(av, bv, std::minus<>()), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lax::mul(a, b), apply(av, bv, std::multiplies<>()), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lax::div(a, b), apply(av, bv, std::divides<>()), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lax::rem(a, b), apply(av, bv, [](double x, double y) { return std::fmod(x, y); }), tol, tol));
    EXPECT_TRUE(
        all_close(lax::pow(b, a), apply(bv, av, [](double x, double y) { return std::pow(x, y); }), tol * 4, tol));
    EXPECT_TRUE(all_close(lax::max(a, b), apply(av, bv, [](double x, double y) { return std::max(x, y); })));
    EXPECT_TRUE(all_close(lax::min(a, b), apply(av, bv, [](double x, double y) { return std::min(x, y); })));
    EXPECT_EQ(lax::add(a, b).dtype(), dt);
  }
}

TEST(ElementwiseBinary, MaxMinPropagateNaN) {
  Array a = array<float>({NAN, 1, 2, -0.0f});
  Array b = array<float>({1, NAN, 3, 0.0f});
  std::vector<double> mx = lax::max(a, b).to_vector<double>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 3);
  std::vector<double> mn = lax::min(a, b).to_vector<double>();
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 2);
}

TEST(ElementwiseBinary, IntegerSemantics) {
  const int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  Array a = array<int32_t>({7, -7, 7, -7, 5, kMin, kMax});
  Array b = array<int32_t>({2, 2, -2, -2, 0, -1, 1});
  EXPECT_EQ(lax::div(a, b).to_vector<int32_t>(), (std::vector<int32_t>{3, -3, -3, 3, -1, kMin, kMax}));
  EXPECT_EQ(lax::rem(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 1, -1, 5, 0, 0}));
  EXPECT_EQ(lax::add(a, b).to_vector<int32_t>()[6], kMin);  // wraps
  EXPECT_EQ(lax::mul(array<int32_t>({kMax}), array<int32_t>({2})).item<int32_t>(), -2);
  EXPECT_EQ(lax::pow(array<int32_t>({2, 3, -2}), array<int32_t>({10, 0, 3})).to_vector<int32_t>(),
            (std::vector<int32_t>{1024, 1, -8}));
  EXPECT_EQ(lax::div(array<uint32_t>({7}), array<uint32_t>({0})).item<uint32_t>(), 0xffffffffu);
  EXPECT_EQ(lax::max(array<uint8_t>({3, 200}), array<uint8_t>({100, 1})).to_vector<int>(),
            (std::vector<int>{100, 200}));
  EXPECT_EQ(lax::sub(array<int64_t>({1}), array<int64_t>({3})).item<int64_t>(), -2);
}

TEST(ElementwiseBinary, BitwiseAndShifts) {
  Array a = array<int32_t>({0b1100, -8, 1, 1});
  Array b = array<int32_t>({0b1010, 1, 31, 32});
  EXPECT_EQ(lax::bitwise_and(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0b1000, 0, 1, 0}));
  EXPECT_EQ(lax::bitwise_or(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0b1110, -7, 31, 33}));
  EXPECT_EQ(lax::bitwise_xor(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0b0110, -7, 30, 33}));
  EXPECT_EQ(lax::shift_left(a, b).to_vector<int32_t>(),
            (std::vector<int32_t>{0b11000000000000, -16, std::numeric_limits<int32_t>::min(), 0}));
  EXPECT_EQ(lax::shift_right_arithmetic(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0, -4, 0, 0}));
  EXPECT_EQ(lax::shift_right_logical(a, b).to_vector<int64_t>(), (std::vector<int64_t>{0, 0x7ffffffc, 0, 0}));
  EXPECT_EQ(lax::shift_right_arithmetic(array<int32_t>({-1}), array<int32_t>({40})).item<int32_t>(), -1);
  Array t = array<bool>({true, true, false, false}), f = array<bool>({true, false, true, false});
  EXPECT_EQ(lax::bitwise_and(t, f).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(lax::bitwise_or(t, f).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(lax::bitwise_xor(t, f).to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
}

TEST(ElementwiseBinary, ComparisonsIncludingNaN) {
  Array a = array<float>({1, 2, NAN, 3});
  Array b = array<float>({1, 3, NAN, 2});
  EXPECT_EQ(lax::eq(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(lax::ne(a, b).to_vector<bool>(), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(lax::lt(a, b).to_vector<bool>(), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(lax::le(a, b).to_vector<bool>(), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(lax::gt(a, b).to_vector<bool>(), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(lax::ge(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(lax::lt(a.astype(DType::bf16), b.astype(DType::bf16)).to_vector<bool>(),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(lax::lt(array<uint32_t>({1, 0xffffffffu}), array<uint32_t>({2, 1})).to_vector<bool>(),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(lax::lt(array<bool>({false}), array<bool>({true})).item<bool>(), true);
}

TEST(ElementwiseBinary, ShapeAndDtypeErrors) {
  EXPECT_PAX_ERROR(lax::add(array<float>({1, 2}), array<float>({1, 2, 3})),
                   "operand shapes must be equal, got f32[2] and f32[3]");
  EXPECT_PAX_ERROR(lax::add(array<float>({1}), array<int32_t>({1})), "operand dtypes must be equal");
  EXPECT_PAX_ERROR(lax::add(array<bool>({true}), array<bool>({true})), "requires a numeric dtype");
  EXPECT_PAX_ERROR(lax::bitwise_and(array<float>({1}), array<float>({1})), "bool or an integer dtype");
  EXPECT_PAX_ERROR(lax::shift_left(array<bool>({true}), array<bool>({true})), "an integer dtype");
}

TEST(ElementwiseBinary, ZeroSizeAndScalars) {
  Array e = from_host(nullptr, Shape{0, 4}, DType::f32);
  EXPECT_EQ(lax::add(e, e).shape(), (Shape{0, 4}));
  EXPECT_EQ(lax::mul(scalar(3.0f), scalar(4.0f)).item<float>(), 12.0f);
  EXPECT_EQ(lax::mul(scalar(3.0f), scalar(4.0f)).ndim(), 0);
}

// ---------------------------------------------------------------------------
// conversions and select

TEST(Convert, SaturatesRoundsAndHandlesNaN) {
  Array f = array<float>({1.7f, -1.7f, 3e9f, -3e9f, NAN, 300.0f, -5.0f});
  EXPECT_EQ(f.astype(DType::i32).to_vector<int64_t>(),
            (std::vector<int64_t>{1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0,
                                  300, -5}));
  EXPECT_EQ(f.astype(DType::u8).to_vector<int>(), (std::vector<int>{1, 0, 255, 0, 0, 255, 0}));
  EXPECT_EQ(f.astype(DType::bool_).to_vector<bool>(), (std::vector<bool>{true, true, true, true, true, true, true}));
  EXPECT_EQ(array<float>({0.0f, -0.0f}).astype(DType::bool_).to_vector<bool>(), (std::vector<bool>{false, false}));
  // f32 -> bf16 rounds to nearest even, in the vector path too (n > one vector).
  std::vector<float> v(100, 1.0f + 1.0f / 256);
  v[3] = 1.0f + 3.0f / 256;
  v[99] = NAN;
  std::vector<double> b = array(v).astype(DType::bf16).to_vector<double>();
  EXPECT_EQ(b[0], 1.0);
  EXPECT_EQ(b[3], 1.0 + 4.0 / 256);
  EXPECT_TRUE(std::isnan(b[99]));
  // f16 through the vector path matches the scalar reference for many values.
  std::vector<double> vals = testing::random_values(5000, 9, -70000, 70000);
  std::vector<float> fv(vals.begin(), vals.end());
  std::vector<double> h = array(fv).astype(DType::f16).to_vector<double>();
  for (size_t i = 0; i < fv.size(); ++i) EXPECT_EQ(h[i], double(f16_to_float(float_to_f16(fv[i])))) << fv[i];
  EXPECT_EQ(array<int64_t>({(int64_t(1) << 40) + 3}).astype(DType::i32).item<int64_t>(), 3);  // wraps
  EXPECT_EQ(array<bool>({true}).astype(DType::bf16).item<float>(), 1.0f);
  EXPECT_EQ(array<uint32_t>({0xffffffffu}).astype(DType::f64).item<double>(), 4294967295.0);
}

TEST(Convert, Bitcast) {
  Array f = array<float>({1.0f, -2.0f});
  EXPECT_EQ(lax::bitcast_convert_type(f, DType::u32).to_vector<uint32_t>(),
            (std::vector<uint32_t>{0x3f800000u, 0xc0000000u}));
  EXPECT_EQ(lax::bitcast_convert_type(lax::bitcast_convert_type(f, DType::i32), DType::f32).to_vector<float>(),
            (std::vector<float>{1.0f, -2.0f}));
  EXPECT_PAX_ERROR(lax::bitcast_convert_type(f, DType::f64), "changes the element width");
}

TEST(SelectN, BoolIntAndScalarSelectors) {
  Array c0 = array<float>({1, 2, 3}), c1 = array<float>({10, 20, 30}), c2 = array<float>({100, 200, 300});
  EXPECT_TRUE(all_close(lax::select_n(array<bool>({true, false, true}), {c0, c1}), {10, 2, 30}));
  EXPECT_TRUE(all_close(lax::select_n(array<int32_t>({2, 0, 1}), {c0, c1, c2}), {100, 2, 30}));
  // An int32 selector out of range is clamped to the cases, with two cases
  // as with more (a scalar selector is clamped the same way).
  EXPECT_TRUE(all_close(lax::select_n(array<int32_t>({-1, 7, 1}), {c0, c1}), {1, 20, 30}));
  EXPECT_TRUE(all_close(lax::select_n(array<int32_t>({-1, 7, 1}), {c0, c1, c2}), {1, 200, 30}));
  EXPECT_TRUE(all_close(lax::select_n(scalar(int32_t(-4)), {c0, c1}), {1, 2, 3}));
  EXPECT_TRUE(all_close(lax::select_n(scalar(true), {c0, c1}), {10, 20, 30}));
  EXPECT_TRUE(all_close(
      lax::select_n(array<bool>({true, false, true}), {c0.astype(DType::bf16), c1.astype(DType::bf16)}), {10, 2, 30}));
  EXPECT_PAX_ERROR(lax::select_n(array<bool>({true}), {c0, c1}), "selector shape");
  EXPECT_PAX_ERROR(lax::select_n(array<bool>({true, false, true}), {c0, c1, c2}),
                   "bool selector needs exactly 2 cases");
  EXPECT_PAX_ERROR(lax::select_n(array<bool>({true, false, true}), {c0, c1.astype(DType::f64)}),
                   "same shape and dtype");
  EXPECT_PAX_ERROR(lax::select_n(array<float>({1, 0, 1}), {c0, c1}), "must be bool or int32");
}

}  // namespace
}  // namespace pax

// Elementwise VJP / JVP rules against central finite differences (f64),
// second order, and jit against eager, table-driven.
#include <gtest/gtest.h>

#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;
using testing::check_jit;
using testing::check_jvp;
using testing::check_vjp;
using testing::check_vjp_order2;

struct Case {
  const char* name;
  ArrayFn f;
  std::vector<Array> args;
};

Array pos(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f64, seed, 0.5, 2.0); }
Array any(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f64, seed, -1.5, 1.5); }
Array unit(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f64, seed, -0.8, 0.8); }

std::vector<Case> cases() {
  const Shape s{2, 3};
  auto u = [](Array (*op)(const Array&)) { return [op](const std::vector<Array>& a) { return op(a[0]); }; };
  auto b = [](Array (*op)(const Array&, const Array&)) {
    return [op](const std::vector<Array>& a) { return op(a[0], a[1]); };
  };
  return {
      {"neg", u(lax::neg), {any(s, 1)}},
      {"abs", u(lax::abs), {pos(s, 2)}},
      {"exp", u(lax::exp), {any(s, 3)}},
      {"expm1", u(lax::expm1), {any(s, 4)}},
      {"log", u(lax::log), {pos(s, 5)}},
      {"log1p", u(lax::log1p), {pos(s, 6)}},
      {"sqrt", u(lax::sqrt), {pos(s, 7)}},
      {"rsqrt", u(lax::rsqrt), {pos(s, 8)}},
      {"tanh", u(lax::tanh), {any(s, 9)}},
      {"logistic", u(lax::logistic), {any(s, 10)}},
      {"erf", u(lax::erf), {any(s, 11)}},
      {"erf_inv", u(lax::erf_inv), {unit(s, 12)}},
      {"sin", u(lax::sin), {any(s, 13)}},
      {"cos", u(lax::cos), {any(s, 14)}},
      {"integer_pow3", [](const std::vector<Array>& a) { return lax::integer_pow(a[0], 3); }, {any(s, 15)}},
      {"integer_pow-2", [](const std::vector<Array>& a) { return lax::integer_pow(a[0], -2); }, {pos(s, 16)}},
      {"convert_f32",
       [](const std::vector<Array>& a) { return lax::convert_element_type(a[0], DType::f32).astype(DType::f64); },
       {any(s, 17)}},
      {"add", b(lax::add), {any(s, 18), any(s, 19)}},
      {"sub", b(lax::sub), {any(s, 20), any(s, 21)}},
      {"mul", b(lax::mul), {any(s, 22), any(s, 23)}},
      {"div", b(lax::div), {any(s, 24), pos(s, 25)}},
      {"rem", b(lax::rem), {pos(s, 26), pos(s, 27)}},
      {"pow", b(lax::pow), {pos(s, 28), any(s, 29)}},
      {"max", b(lax::max), {any(s, 30), any(s, 31)}},
      {"min", b(lax::min), {any(s, 32), any(s, 33)}},
      {"select_n",
       [](const std::vector<Array>& a) {
         return lax::select_n(lax::gt(a[0], a[1]), {a[0], a[1]});
       },
       {any(s, 34), any(s, 35)}},
  };
}

// The f32 round trip needs a step large against f32 rounding.
double eps_for(const Case& c) { return std::string(c.name) == "convert_f32" ? 1e-2 : 1e-5; }

TEST(ElementwiseAD, VjpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(check_vjp(c.f, c.args, eps_for(c))) << c.name;
}

TEST(ElementwiseAD, JvpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(check_jvp(c.f, c.args, eps_for(c), 1e-5)) << c.name;
}

TEST(ElementwiseAD, SecondOrder) {
  for (const Case& c : cases()) {
    if (std::string(c.name) == "convert_f32") continue;  // f32 rounding defeats f64 finite differences
    EXPECT_TRUE(check_vjp_order2(c.f, c.args)) << c.name;
  }
}

TEST(ElementwiseAD, JitMatchesEager) {
  for (const Case& c : cases()) EXPECT_TRUE(check_jit(c.f, c.args)) << c.name;
}

TEST(ElementwiseAD, NonDifferentiableOpsHaveZeroGradient) {
  Array x = array<double>({0.3, -1.7, 2.5});
  for (auto op : {lax::sign, lax::floor, lax::ceil}) {
    EXPECT_TRUE(testing::all_close(grad([op](const Array& v) { return sum(op(v) * v); })(x), op(x)));
  }
  // Comparisons and integer results carry no gradient; the rest still flows.
  auto f = [](const Array& v) { return sum(where(v > 0.0, v * 2.0, v)); };
  EXPECT_TRUE(testing::all_close(grad(f)(x), {2, 1, 2}));
}

TEST(ElementwiseAD, MaxMinSplitTies) {
  Array a = array<double>({1, 2, 3}), b = array<double>({1, 3, 2});
  auto [ga, gb] = grad<0, 1>([](const Array& x, const Array& y) { return sum(maximum(x, y)); })(a, b);
  EXPECT_TRUE(testing::all_close(ga, {0.5, 0, 1}));
  EXPECT_TRUE(testing::all_close(gb, {0.5, 1, 0}));
}

}  // namespace
}  // namespace pax

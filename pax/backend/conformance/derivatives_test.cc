// Finite-difference checks, in f64, of every primitive's derivative rules:
// <ct, J v> from central differences against the VJP, and J v against the
// JVP (pax/testing/transform_check.h). Points sit away from the kinks of
// abs, max, min, the windowed max, sort and the piecewise-constant
// primitives (whose rule gives zero, as their finite differences do there).
// Conformance.EveryDerivativeRuleHasAFiniteDifferenceCase checks that every
// primitive with a rule in its PrimDef has a case here.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include <cmath>
#include <string>
#include <vector>

#include "pax/api/control_flow.h"
#include "pax/api/transforms.h"
#include "pax/backend/conformance/conformance.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/transform_check.h"

namespace pax::conformance {
namespace {

using testing::ArrayFn;
using V = std::vector<Array>;

struct DerivativeCase {
  std::string prim;  // prims.def name whose rules the function exercises
  ArrayFn f;
  V args;  // f64 (integers for indices)
  // A known bug that makes the check fail, named; the check must still fail
  // (a fixed bug fails the test until this is cleared).
  const char* known_failure = nullptr;
};

Array f64(std::vector<double> v, Shape s) { return array(v, s); }
Array f64(std::vector<double> v) { return array(v); }
// Values in [lo, hi) away from each other (no ties for max, sort, windows).
Array spread(const Shape& s, double lo, double hi, uint32_t seed) {
  std::vector<double> v = testing::random_values(s.numel(), seed, lo, hi);
  for (size_t i = 0; i < v.size(); ++i) v[i] += 1e-3 * double(i);
  return array(v, s);
}

std::vector<DerivativeCase> cases() {
  const Array x = spread({2, 3}, 0.2, 0.9, 1), y = spread({2, 3}, 1.1, 2.0, 2), neg = spread({2, 3}, -2.0, 2.0, 3);
  const Array frac = f64({0.3, 1.6, -2.2, 3.7, -0.6, 5.1}, {2, 3});  // away from integers and halves
  auto u = [](Array (*fn)(const Array&)) { return [fn](const V& a) { return fn(a[0]); }; };
  auto b = [](Array (*fn)(const Array&, const Array&)) { return [fn](const V& a) { return fn(a[0], a[1]); }; };
  const lax::Window win{{2, 2}, {1, 1}, {0, 0, 0, 1}};
  std::vector<DerivativeCase> c = {
      {"neg", u(lax::neg), {neg}},
      {"abs", u(lax::abs), {neg}},
      {"sign", u(lax::sign), {neg}},
      {"exp", u(lax::exp), {neg}},
      {"expm1", u(lax::expm1), {neg}},
      {"log", u(lax::log), {y}},
      {"log1p", u(lax::log1p), {x}},
      {"sqrt", u(lax::sqrt), {y}},
      {"rsqrt", u(lax::rsqrt), {y}},
      {"tanh", u(lax::tanh), {neg}},
      {"logistic", u(lax::logistic), {neg}},
      {"erf", u(lax::erf), {neg}},
      {"erf_inv", u(lax::erf_inv), {x}},
      {"sin", u(lax::sin), {neg}},
      {"cos", u(lax::cos), {neg}},
      {"floor", u(lax::floor), {frac}},
      {"ceil", u(lax::ceil), {frac}},
      {"round", [](const V& a) { return lax::round(a[0]); }, {frac}},
      {"integer_pow", [](const V& a) { return lax::integer_pow(a[0], 3); }, {neg}},
      {"integer_pow", [](const V& a) { return lax::integer_pow(a[0], -2); }, {y}},
      // f64 -> f32 -> f64: the derivative passes through (values rounded).
      {"convert_element_type",
       [](const V& a) { return lax::convert_element_type(lax::mul(a[0], a[0]), DType::f64); },
       {neg}},
      {"add", b(lax::add), {neg, x}},
      {"sub", b(lax::sub), {neg, x}},
      {"mul", b(lax::mul), {neg, x}},
      {"div", b(lax::div), {neg, y}},
      {"rem", b(lax::rem), {f64({5.3, -4.1, 2.9, 7.7, -1.3, 3.3}, {2, 3}), y}},
      {"pow", b(lax::pow), {y, neg}},
      {"max", b(lax::max), {neg, spread({2, 3}, -2.0, 2.0, 4)}},
      {"min", b(lax::min), {neg, spread({2, 3}, -2.0, 2.0, 4)}},
      {"select_n",
       [](const V& a) {
         return lax::select_n(lax::gt(a[0], a[1]), {lax::mul(a[0], a[0]), lax::exp(a[1])});
       },
       {neg, spread({2, 3}, -2.0, 2.0, 5)}},
      {"reduce_sum", [](const V& a) { return lax::reduce_sum(a[0], {1}); }, {neg}},
      {"reduce_max", [](const V& a) { return lax::reduce_max(a[0], {0}); }, {neg}},
      {"reduce_min", [](const V& a) { return lax::reduce_min(a[0], {1}); }, {neg}},
      {"reduce_prod", [](const V& a) { return lax::reduce_prod(a[0], {1}); }, {neg}},
      {"cumsum", [](const V& a) { return lax::cumsum(a[0], 1, true); }, {neg}},
      {"reshape",
       [](const V& a) {
         return lax::reshape(lax::mul(a[0], a[0]), {3, 2});
       },
       {neg}},
      {"transpose",
       [](const V& a) {
         return lax::transpose(lax::mul(a[0], a[0]), {1, 0});
       },
       {neg}},
      {"broadcast_in_dim",
       [](const V& a) {
         return lax::broadcast_in_dim(lax::exp(a[0]), {2, 4, 3}, {0, 2});
       },
       {neg}},
      {"squeeze", [](const V& a) { return lax::squeeze(lax::exp(a[0]), {0}); }, {spread({1, 4}, -1, 1, 6)}},
      {"expand_dims", [](const V& a) { return lax::expand_dims(lax::exp(a[0]), {1}); }, {neg}},
      {"rev", [](const V& a) { return lax::rev(lax::exp(a[0]), {1}); }, {neg}},
      {"slice",
       [](const V& a) {
         return lax::slice(lax::exp(a[0]), {0, 1}, {2, 3}, {1, 1});
       },
       {neg}},
      {"dynamic_slice",
       [](const V& a) {
         return lax::dynamic_slice(lax::exp(a[0]), {a[1], a[1]}, {1, 2});
       },
       {neg, scalar(int32_t(1))}},
      {"dynamic_update_slice",
       [](const V& a) {
         return lax::dynamic_update_slice(lax::exp(a[0]), lax::sin(a[1]), {a[2], a[2]});
       },
       {neg, spread({1, 2}, -1, 1, 7), scalar(int32_t(1))}},
      {"concatenate",
       [](const V& a) {
         return lax::concatenate({lax::exp(a[0]), lax::sin(a[1])}, 0);
       },
       {neg, x}},
      {"pad",
       [](const V& a) {
         return lax::pad(lax::exp(a[0]), lax::sin(a[1]), {{1, -1, 1}, {0, 2, 0}});
       },
       {neg, scalar(0.7)}},
      {"gather",
       [](const V& a) {
         return lax::gather(lax::exp(a[0]), a[1], {{1}, {0}, {0}}, {1, 3});
       },
       {neg, array<int32_t>({1, 0, 1}, Shape{3, 1})}},
      {"scatter_add",
       [](const V& a) {
         return lax::scatter_add(lax::exp(a[0]), a[1], lax::sin(a[2]), {{1}, {0}, {0}});
       },
       {neg, array<int32_t>({1, 1, 0}, Shape{3, 1}), spread({3, 3}, -1, 1, 8)}},
      {"dot_general",
       [](const V& a) {
         return lax::dot_general(a[0], a[1], {{1}, {1}, {}, {}});
       },
       {neg, x}},
      {"conv_general_dilated",
       [](const V& a) {
         return lax::conv_general_dilated(a[0], a[1], {1, 1}, {{1, 0}, {0, 1}}, {1, 1}, {1, 1},
                                          lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"));
       },
       {spread({1, 2, 4, 3}, -1, 1, 9), spread({2, 2, 2, 2}, -1, 1, 10)}},
      {"dot_product_attention",
       [](const V& a) {
         lax::AttentionOptions o;
         o.bias = a[3];
         o.is_causal = true;
         return lax::dot_product_attention(a[0], a[1], a[2], o).first;
       },
       {spread({1, 3, 2, 2}, -1, 1, 14), spread({1, 3, 1, 2}, -1, 1, 15), spread({1, 3, 1, 2}, -1, 1, 16),
        spread({1, 2, 3, 3}, -1, 1, 17)}},
      {"reduce_window_max",
       [win](const V& a) { return lax::reduce_window_max(a[0], win); },
       {spread({3, 4}, -2, 2, 11)}},
      {"select_and_scatter_add",
       [win](const V& a) { return lax::select_and_scatter_add(a[0], a[1], win); },
       {spread({2, 4}, -1, 1, 12), spread({3, 4}, -2, 2, 11)}},
      {"select_and_gather_add",
       [win](const V& a) { return lax::select_and_gather_add(a[0], a[1], win); },
       {spread({3, 4}, -1, 1, 13), spread({3, 4}, -2, 2, 11)}},
      {"sort",
       [](const V& a) {
         return lax::sort({a[0], a[1]}, 1)[1];
       },
       {neg, x}},
      {"sort", [](const V& a) { return lax::sort({a[0]}, 1)[0]; }, {neg}},
      {"top_k", [](const V& a) { return lax::top_k(a[0], 2).first; }, {neg}},
  };
  // The collectives under vmap over a named axis of size 2.
  auto mapped = [](std::function<Array(const Array&)> body) {
    return [body](const V& a) { return vmap(body, {.in_axes = {0}, .out_axes = {0}, .axis_name = "i"})(a[0]); };
  };
  c.push_back({"psum", mapped([](const Array& v) { return lax::psum(lax::mul(v, v), "i"); }), {neg}});
  c.push_back({"pmax", mapped([](const Array& v) { return lax::pmax(v, "i"); }), {neg}});
  c.push_back({"pmin", mapped([](const Array& v) { return lax::pmin(v, "i"); }), {neg}});
  c.push_back({"all_gather", mapped([](const Array& v) { return lax::all_gather(lax::exp(v), "i"); }), {neg}});
  c.push_back({"ppermute",
               mapped([](const Array& v) {
                 return lax::ppermute(lax::exp(v), "i", {{0, 1}, {1, 0}});
               }),
               {neg}});
  c.push_back({"psum_scatter",
               mapped([](const Array& v) { return lax::psum_scatter(lax::exp(v), "i", 0, true); }),
               {spread({2, 4}, -1, 1, 14)}});
  // Programs: a jitted function called inside another (jit_call), a
  // custom_vjp whose bwd is the true derivative, control flow, remat.
  auto inner = pax::jit([](const Array& v) { return lax::mul(lax::sin(v), v); });
  c.push_back({"jit_call", [inner](const V& a) { return inner(a[0]); }, {neg}});
  auto cube = custom_vjp(
      [](const Array& v) { return lax::integer_pow(v, 3); },
      [](const Array& v) { return std::make_pair(lax::integer_pow(v, 3), v); },
      [](const Array& v, const Array& ct) { return lax::mul(ct, lax::mul(full_like(v, 3.0), lax::mul(v, v))); });
  c.push_back({"custom_vjp_call", [cube](const V& a) { return cube(a[0]); }, {neg}});
  c.push_back({"cond",
               [](const V& a) {
                 return cond(
                     lax::gt(lax::reduce_sum(a[0], {0, 1}), scalar(0.0)), [](const Array& v) { return lax::exp(v); },
                     [](const Array& v) { return lax::sin(v); }, a[0]);
               },
               {neg}});
  c.push_back({"scan",
               [](const V& a) {
                 return scan([](const Array& carry,
                                const Array& row) { return std::make_pair(lax::mul(carry, row), lax::sin(carry)); },
                             a[1], a[0])
                     .second;
               },
               {neg, spread({3}, 0.5, 1.5, 15)}});
  c.push_back({"remat",
               [](const V& a) { return checkpoint([](const Array& v) { return lax::sin(lax::exp(v)); })(a[0]); },
               {neg}});
  // Every other elementwise unary primitive on floats with a plain lax
  // function (prims.def's wrapper column), e.g. one added since this list was
  // written: on (0.2, 0.9), inside the domain of every such operation.
  std::vector<std::pair<Prim, std::function<Array(const V&)>>> plain;
#define PAX_DERIV_none(id)
#define PAX_DERIV_lax2(id)
#define PAX_DERIV_lax1(id) plain.emplace_back(Prim::id, [](const V& a) { return lax::id(a[0]); });
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PAX_DERIV_##wrapper(id)
#include "pax/ir/prims.def"
#undef PAX_PRIM
#undef PAX_DERIV_none
#undef PAX_DERIV_lax1
#undef PAX_DERIV_lax2
  for (const auto& [p, f] : plain) {
    if (prim_family(p) != PrimFamily::unary || prim_accepts(p) != Accepts::floating) continue;
    if (std::none_of(c.begin(), c.end(), [&](const DerivativeCase& k) { return k.prim == prim_name(p); })) {
      c.push_back({prim_name(p), f, {x}});
    }
  }
  return c;
}

// The while loop is differentiable in forward mode only: its JVP.
TEST(DerivativeConformance, WhileLoopJvp) {
  ArrayFn f = [](const V& a) {
    return while_loop([](const Array& v) { return lax::lt(lax::reduce_sum(v, {0}), scalar(50.0)); },
                      [](const Array& v) { return lax::mul(v, v); }, a[0]);
  };
  EXPECT_TRUE(testing::check_jvp(f, {f64({1.5, 2.0, 1.2})}));
}

TEST(DerivativeConformance, EveryRuleAgainstFiniteDifferences) {
  for (const DerivativeCase& c : cases()) {
    SCOPED_TRACE(c.prim);
    if (c.known_failure) {
      EXPECT_FALSE(testing::check_vjp(c.f, c.args) && testing::check_jvp(c.f, c.args))
          << c.prim << " passes now: the known failure '" << c.known_failure << "' is fixed; clear it";
      continue;
    }
    EXPECT_TRUE(testing::check_vjp(c.f, c.args)) << c.prim;
    EXPECT_TRUE(testing::check_jvp(c.f, c.args)) << c.prim;
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> names = {"while"};
  for (const DerivativeCase& c : cases()) names.push_back(c.prim);
  return names;
}
const bool kRegistered = register_derivative_lister(case_names);

}  // namespace
}  // namespace pax::conformance

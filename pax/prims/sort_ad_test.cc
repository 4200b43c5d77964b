// VJP / JVP rules of sort and top_k against central finite differences (f64),
// second order, jit of the function and of its VJP against eager, and
// hand-computed gradients.
#include <gtest/gtest.h>

#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;

using Case = testing::AdCase;
constexpr auto rnd = testing::ad_argument;

std::vector<Case> cases() {
  return {
      {"sort_last", [](const std::vector<Array>& a) { return lax::sort({a[0]}, 1)[0]; }, {rnd({3, 5}, 1)}},
      {"sort_axis0", [](const std::vector<Array>& a) { return lax::sort({a[0]}, 0)[0]; }, {rnd({4, 3}, 2)}},
      {"sort_1d", [](const std::vector<Array>& a) { return lax::sort({a[0]}, 0)[0]; }, {rnd({6}, 3)}},
      // Keys and values both differentiated: both outputs, side by side.
      {"sort_two_operands",
       [](const std::vector<Array>& a) {
         std::vector<Array> s = lax::sort({a[0], a[1]}, 1, true, 1);
         return lax::concatenate({s[0], s[1]}, 0);
       },
       {rnd({2, 5}, 4), rnd({2, 5}, 5)}},
      // Integer keys with ties (the stable order decides) carrying floats.
      {"sort_int_keys",
       [](const std::vector<Array>& a) {
         return lax::sort({a[0], a[1]}, 0, true, 1)[1];
       },
       {array<int32_t>({2, 0, 2, 1, 0, 0, 1, 2}, {4, 2}), rnd({4, 2}, 6)}},
      // Ties of the integer first key are broken by the floating second key.
      {"sort_two_keys",
       [](const std::vector<Array>& a) {
         return lax::sort({a[0], a[1], a[2]}, 1, true, 2)[2];
       },
       {array<int32_t>({1, 0, 1, 0, 1, 1}, {1, 6}), rnd({1, 6}, 7), rnd({1, 6}, 8)}},
      {"top_k", [](const std::vector<Array>& a) { return lax::top_k(a[0], 3).first; }, {rnd({3, 6}, 9)}},
      {"top_k_1d", [](const std::vector<Array>& a) { return lax::top_k(a[0], 2).first; }, {rnd({5}, 10)}},
      {"top_k_3d", [](const std::vector<Array>& a) { return lax::top_k(a[0], 4).first; }, {rnd({2, 2, 4}, 11)}},
  };
}

ArrayFn nonlinear(const ArrayFn& f) {
  return [f](const std::vector<Array>& a) { return lax::sin(f(a)); };
}

TEST(SortAD, VjpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp(c.f, c.args)) << c.name;
}

TEST(SortAD, JvpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_jvp(c.f, c.args)) << c.name;
}

TEST(SortAD, SecondOrder) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp_order2(nonlinear(c.f), c.args)) << c.name;
}

TEST(SortAD, JitMatchesEager) {
  for (const Case& c : cases()) {
    EXPECT_TRUE(testing::check_jit(c.f, c.args)) << c.name;
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(c.f, c.args), c.args)) << c.name << " (vjp)";
  }
}

TEST(SortAD, GradientFollowsThePermutation) {
  const Array x = array<double>({3, 1, 2, 0.5});
  const Array w = array<double>({1, 10, 100, 1000});
  // sorted = (0.5, 1, 2, 3): x[3] has weight 1, x[1] 10, x[2] 100, x[0] 1000.
  Array g = grad([&](const Array& v) { return sum(w * lax::sort({v}, 0)[0]); })(x);
  EXPECT_TRUE(testing::all_close(g, {1000, 10, 100, 1}, 0, 0));
  // Values sorted by integer keys (stable: the first 1 before the second).
  const Array keys = array<int32_t>({1, 0, 1, 0});
  Array gv = grad([&](const Array& v) { return sum(w * lax::sort({keys, v}, 0, true, 1)[1]); })(x);
  EXPECT_TRUE(testing::all_close(gv, {100, 1, 1000, 10}, 0, 0));
  auto [out, t] = jvp([&](const Array& v) { return lax::sort({keys, v}, 0, true, 1)[1]; }, x, w);
  EXPECT_TRUE(testing::all_close(t, {10, 1000, 1, 100}, 0, 0));
}

TEST(SortAD, TopKGradientScattersIntoTheInput) {
  const Array x = array<double>({0.5, 3, -1, 2, 3, 0,  //
                                 1, 2, 3, 4, 5, 6},
                                {2, 6});
  const Array w = array<double>({1, 10, 100, 2, 20, 200}, {2, 3});
  Array g = grad([&](const Array& v) { return sum(w * lax::top_k(v, 3).first); })(x);
  // Row 0: 3 (index 1), 3 (index 4), 2 (index 3); row 1: 6, 5, 4.
  EXPECT_TRUE(testing::all_close(g, {0, 1, 0, 100, 10, 0, 0, 0, 0, 200, 20, 2}, 0, 0));
  auto [out, t] =
      jvp([](const Array& v) { return lax::top_k(v, 3).first; }, x, lax::reshape(lax::iota(DType::f64, {12}), {2, 6}));
  EXPECT_TRUE(testing::all_close(t, {1, 4, 3, 11, 10, 9}, 0, 0));
  // k = 0: nothing selected, a zero gradient.
  Array g0 = grad([](const Array& v) { return sum(lax::top_k(v, 0).first); })(x);
  EXPECT_TRUE(testing::all_close(g0, std::vector<double>(12, 0.0), 0, 0));
}

TEST(SortAD, Bf16GradientKeepsDtype) {
  const Array x = testing::random_array({2, 5}, DType::bf16, 12);
  Array g = grad([](const Array& v) { return sum(lax::top_k(v, 2).first.astype(DType::f32)); })(x);
  EXPECT_EQ(g.dtype(), DType::bf16);
  Array gs = grad([](const Array& v) { return sum(lax::sort({v}, 1)[0].astype(DType::f32)); })(x);
  EXPECT_EQ(gs.dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(gs, std::vector<double>(10, 1.0), 0, 0));
}

TEST(SortAD, EmptyAxisGivesEmptyGradients) {
  const Array x = zeros({2, 0}, DType::f64);
  Array g = grad([](const Array& v) { return sum(lax::sort({v}, 1)[0]); })(x);
  EXPECT_EQ(g.shape(), (Shape{2, 0}));
  Array gt = grad([](const Array& v) { return sum(lax::top_k(v, 0).first); })(x);
  EXPECT_EQ(gt.shape(), (Shape{2, 0}));
}

}  // namespace
}  // namespace pax

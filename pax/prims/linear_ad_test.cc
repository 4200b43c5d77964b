// VJP / JVP rules of the reductions, shape primitives and dot_general
// against central finite differences (f64), second order through them, and
// jit against eager, table-driven.
#include <gtest/gtest.h>

#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;

using Case = testing::AdCase;
constexpr auto rnd = testing::ad_argument;

std::vector<Case> cases() {
  const Array x = rnd({2, 3, 4}, 1);
  // clang-format off
  return {
      {"reduce_sum_1", [](const std::vector<Array>& a) { return lax::reduce_sum(a[0], {1}); }, {x}},
      {"reduce_sum_02", [](const std::vector<Array>& a) { return lax::reduce_sum(a[0], {0, 2}); }, {x}},
      {"reduce_sum_all", [](const std::vector<Array>& a) { return lax::reduce_sum(a[0], {0, 1, 2}); }, {x}},
      {"reduce_max", [](const std::vector<Array>& a) { return lax::reduce_max(a[0], {2}); }, {x}},
      {"reduce_min", [](const std::vector<Array>& a) { return lax::reduce_min(a[0], {0, 1}); }, {x}},
      {"reduce_prod", [](const std::vector<Array>& a) { return lax::reduce_prod(a[0], {1}); }, {x}},
      {"cumsum", [](const std::vector<Array>& a) { return lax::cumsum(a[0], 1); }, {x}},
      {"cumsum_rev", [](const std::vector<Array>& a) { return lax::cumsum(a[0], 2, true); }, {x}},
      {"reshape", [](const std::vector<Array>& a) { return lax::reshape(a[0], {4, 6}); }, {x}},
      {"transpose", [](const std::vector<Array>& a) { return lax::transpose(a[0], {2, 0, 1}); }, {x}},
      {"broadcast", [](const std::vector<Array>& a) { return lax::broadcast_in_dim(a[0], {5, 2, 3, 4}, {1, 2, 3}); },
       {x}},
      {"broadcast_expand", [](const std::vector<Array>& a) { return lax::broadcast_in_dim(a[0], {2, 6, 4}, {0, 1, 2}); },
       {rnd({2, 1, 4}, 2)}},
      {"squeeze", [](const std::vector<Array>& a) { return lax::squeeze(a[0], {1}); }, {rnd({2, 1, 4}, 3)}},
      {"expand_dims", [](const std::vector<Array>& a) { return lax::expand_dims(a[0], {0, 3}); }, {x}},
      {"rev", [](const std::vector<Array>& a) { return lax::rev(a[0], {0, 2}); }, {x}},
      {"slice", [](const std::vector<Array>& a) { return lax::slice(a[0], {0, 1, 1}, {2, 3, 4}, {1, 1, 2}); }, {x}},
      {"dynamic_slice",
       [](const std::vector<Array>& a) {
         return lax::dynamic_slice(a[0], {scalar<int32_t>(1), scalar<int32_t>(5), scalar<int32_t>(1)}, {1, 2, 2});
       },
       {x}},
      {"dynamic_update_slice",
       [](const std::vector<Array>& a) {
         return lax::dynamic_update_slice(a[0], a[1], {scalar<int32_t>(0), scalar<int32_t>(1), scalar<int32_t>(2)});
       },
       {x, rnd({2, 2, 2}, 4)}},
      {"concatenate", [](const std::vector<Array>& a) { return lax::concatenate({a[0], a[1]}, 1); },
       {x, rnd({2, 2, 4}, 5)}},
      {"pad",
       [](const std::vector<Array>& a) { return lax::pad(a[0], lax::reshape(a[1], {}), {{1, -1, 1}, {0, 2, 0}}); },
       {rnd({3, 2}, 6), rnd({1}, 7)}},
      {"dot_matmul", [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{1}, {0}, {}, {}}); },
       {rnd({3, 4}, 8), rnd({4, 5}, 9)}},
      {"dot_tn", [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{0}, {0}, {}, {}}); },
       {rnd({4, 3}, 10), rnd({4, 5}, 11)}},
      {"dot_batched",
       [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{3}, {3}, {0, 1}, {0, 1}}); },
       {rnd({2, 2, 3, 4}, 12), rnd({2, 2, 5, 4}, 13)}},
      {"dot_batch_middle",
       [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{2, 0}, {0, 2}, {1}, {1}}); },
       {rnd({3, 2, 4}, 14), rnd({4, 2, 3, 5}, 15)}},
      {"dot_outer", [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{}, {}, {}, {}}); },
       {rnd({3}, 16), rnd({2}, 17)}},
      {"dot_vector", [](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], {{0}, {0}, {}, {}}); },
       {rnd({5}, 18), rnd({5}, 19)}},
  };
  // clang-format on
}

TEST(LinearAD, VjpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp(c.f, c.args)) << c.name;
}

TEST(LinearAD, JvpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_jvp(c.f, c.args)) << c.name;
}

TEST(LinearAD, SecondOrder) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp_order2(c.f, c.args)) << c.name;
}

TEST(LinearAD, JitMatchesEager) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_jit(c.f, c.args)) << c.name;
}

TEST(LinearAD, MaxSharesTiesAndProdHandlesZeros) {
  Array x = array<double>({1, 3, 3, 2});
  // clang-format off
  EXPECT_TRUE(testing::all_close(grad([](const Array& v) { return lax::reduce_max(v, {0}); })(x), {0, 0.5, 0.5, 0}));
  EXPECT_TRUE(testing::all_close(grad([](const Array& v) { return lax::reduce_prod(v, {0}); })(array<double>({2, 0, 3})),
                                 {0, 6, 0}));
  EXPECT_TRUE(testing::all_close(
      grad([](const Array& v) { return lax::reduce_prod(v, {0}); })(array<double>({0, 0, 3})), {0, 0, 0}));
  EXPECT_TRUE(testing::all_close(grad([](const Array& v) { return lax::reduce_prod(v, {0}); })(array<double>({2, 5, 3})),
                                 {15, 6, 10}));
  // clang-format on
}

TEST(LinearAD, Bf16OperandsWithF32Output) {
  Array a = testing::random_array({3, 4}, DType::bf16, 20), b = testing::random_array({4, 2}, DType::bf16, 21);
  auto f = [](const Array& x, const Array& y) { return sum(lax::dot_general(x, y, {{1}, {0}, {}, {}}, DType::f32)); };
  auto [ga, gb] = grad<0, 1>(f)(a, b);
  EXPECT_EQ(ga.dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(ga, broadcast_to(sum(b.astype(DType::f32), 1), {3, 4}), 1e-2, 1e-2));
}

// The gradients of x W come out in the operands' layouts: x's as g W^T, W's
// as x^T g, with no transpose left in the program (jax.lax's order would
// transpose W's).
TEST(LinearAD, MatmulGradientsNeedNoTranspose) {
  Array x = rnd({3, 4}, 22), w = rnd({4, 5}, 23);
  auto f = [](const Array& a, const Array& b) { return sum(lax::dot_general(a, b, {{1}, {0}, {}, {}})); };
  const std::shared_ptr<const Jaxpr> j = make_jaxpr([&](const Array& a, const Array& b) {
    auto [ga, gb] = grad<0, 1>(f)(a, b);
    return std::vector<Array>{ga, gb};
  })(x, w);
  for (const Eqn& e : j->eqns) EXPECT_NE(e.prim, Prim::transpose) << *j;
  auto [gx, gw] = grad<0, 1>(f)(x, w);
  EXPECT_TRUE(testing::all_close(gx, broadcast_to(sum(w, 1), {3, 4}), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(gw, broadcast_to(reshape(sum(x, 0), {4, 1}), {4, 5}), 1e-12, 1e-12));
}

}  // namespace
}  // namespace pax

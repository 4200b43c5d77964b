// cond / while_loop / fori_loop / scan / checkpoint: values against hand
// results and explicit C++ loops, eagerly and under jit, gradients against
// finite differences and against the unrolled computation, jvp, vmap against
// a loop over the batch, the memory checkpoint saves, and the error messages.
#include "pax/api/control_flow.h"

#include <gtest/gtest.h>

#include <cmath>
#include <unordered_set>

#include "pax/interp/vjp.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::all_close;
using testing::ArrayFn;
using testing::check_jit;
using testing::check_jvp;
using testing::check_vjp;
using testing::check_vjp_order2;
using testing::check_vmap;
using testing::random_array;

// Every array of `got` matches the one at the same position of `want`.
template <class... A>
void expect_all_close(const std::tuple<A...>& got, const std::tuple<A...>& want, double rtol = 1e-12,
                      double atol = 1e-13) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    auto check = [&](const Array& g, const Array& w, size_t i) { EXPECT_TRUE(all_close(g, w, rtol, atol)) << i; };
    (check(std::get<I>(got), std::get<I>(want), I), ...);
  }
  (std::index_sequence_for<A...>{});
}

bool has_eqn(const Jaxpr& j, Prim p) {
  for (const Eqn& e : j.eqns) {
    if (e.prim == p) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// cond

Array double_it(const Array& x) { return x * 2.0; }
Array negate_it(const Array& x) { return -x; }

TEST(Cond, PicksTheBranchEagerly) {
  Array x = array<double>({1, -2, 3});
  EXPECT_TRUE(all_close(cond(scalar(true), double_it, negate_it, x), {2, -4, 6}));
  EXPECT_TRUE(all_close(cond(scalar(false), double_it, negate_it, x), {-1, 2, -3}));
  // Several operands and tree results.
  auto t = [](const Array& a, const Array& b) { return std::make_pair(a + b, a * b); };
  auto f = [](const Array& a, const Array& b) { return std::make_pair(a - b, a / b); };
  auto [s, p] = cond(scalar(true), t, f, scalar(6.0), scalar(3.0));
  EXPECT_DOUBLE_EQ(s.item<double>(), 9);
  EXPECT_DOUBLE_EQ(p.item<double>(), 18);
  auto [d, q] = cond(scalar(false), t, f, scalar(6.0), scalar(3.0));
  EXPECT_DOUBLE_EQ(d.item<double>(), 3);
  EXPECT_DOUBLE_EQ(q.item<double>(), 2);
}

TEST(Cond, IntegerIndexIsClamped) {
  auto f0 = [](const Array& x) { return x + 10.0; };
  auto f1 = [](const Array& x) { return x * 10.0; };
  auto f2 = [](const Array& x) { return x - 10.0; };
  Array x = scalar(2.0);
  const std::vector<std::pair<int32_t, double>> cases = {{0, 12}, {1, 20}, {2, -8}, {-5, 12}, {7, -8}};
  for (auto [i, want] : cases) {
    EXPECT_DOUBLE_EQ(cond(scalar(i), branches(f0, f1, f2), x).item<double>(), want) << i;
  }
  // Other integer dtypes convert.
  EXPECT_DOUBLE_EQ(cond(scalar(int64_t(1)), branches(f0, f1, f2), x).item<double>(), 20);
  EXPECT_DOUBLE_EQ(cond(scalar(int32_t(0)), branches(f1), x).item<double>(), 20);
}

TEST(Cond, ClosesOverValuesAndTrees) {
  Array w = array<double>({1, 2, 3});
  Tree ops = Tree::dict({{"a", array<double>({1, 1, 1})}, {"b", scalar(2.0)}});
  auto yes = [&](const Tree& t) { return t["a"].leaf() * w + t["b"].leaf(); };
  auto no = [&](const Tree& t) { return t["a"].leaf() - w; };
  EXPECT_TRUE(all_close(cond(scalar(true), yes, no, ops), {3, 4, 5}));
  EXPECT_TRUE(all_close(cond(scalar(false), yes, no, ops), {0, -1, -2}));
}

TEST(Cond, TracedPredicateUnderJit) {
  auto f = [](const Array& x) {
    return cond(
        sum(x) > 0.0, [](const Array& v) { return sin(v) * v; }, [](const Array& v) { return v * v * v; }, x);
  };
  auto jf = jit(f);
  Array pos = array<double>({0.5, 1.5}), neg = array<double>({-0.5, -1.5});
  EXPECT_TRUE(all_close(jf(pos), f(pos), 0, 0));
  EXPECT_TRUE(all_close(jf(neg), f(neg), 0, 0));
  EXPECT_EQ(jf.num_traces(), 1u);  // one program serves both branches
  auto jaxpr = make_jaxpr(f)(pos);
  EXPECT_TRUE(has_eqn(*jaxpr, Prim::cond)) << jaxpr->str();
  typecheck(*jaxpr);
  EXPECT_NE(jaxpr->str().find("cond[branches="), std::string::npos) << jaxpr->str();
}

ArrayFn cond_fn() {
  // Branches close over the second argument, so its gradient flows through the operands.
  return [](const std::vector<Array>& a) {
    const Array& w = a[1];
    return cond(
        a[2], [&](const Array& x) { return tanh(x * w) + x; }, [&](const Array& x) { return x * x * w; }, a[0]);
  };
}

TEST(Cond, GradEagerAndUnderJit) {
  Array x = array<double>({0.3, -0.7, 1.1}), w = array<double>({0.5, 2.0, -1.0});
  for (bool p : {true, false}) {
    std::vector<Array> args{x, w, scalar(p)};
    EXPECT_TRUE(check_vjp(cond_fn(), args, 1e-6, 1e-7)) << p;
    EXPECT_TRUE(check_jvp(cond_fn(), args, 1e-6, 1e-7)) << p;
    EXPECT_TRUE(check_jit(cond_fn(), args)) << p;
    EXPECT_TRUE(check_vjp_order2(cond_fn(), args)) << p;
  }
  // The predicate traced by jit: the VJP is a cond over the branches' backward passes.
  auto loss = [](const Array& x, const Array& w) {
    return sum(cond(
        sum(x) > 0.0, [&](const Array& v) { return tanh(v * w) + v; }, [&](const Array& v) { return v * v * w; }, x));
  };
  for (const Array& v : {x, -x}) {
    auto [gx, gw] = grad<0, 1>(loss)(v, w);
    auto [jx, jw] = jit(grad<0, 1>(loss))(v, w);
    EXPECT_TRUE(all_close(jx, gx, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(jw, gw, 1e-14, 1e-14));
    auto [kx, kw] = grad<0, 1>(jit(loss))(v, w);
    EXPECT_TRUE(all_close(kx, gx, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(kw, gw, 1e-14, 1e-14));
  }
  // jvp with the predicate traced by jit.
  auto tangent = jit(
      [&](const Array& v, const Array& dv) { return jvp([&](const Array& u) { return loss(u, w); }, v, dv).second; });
  Array dv = array<double>({1, -1, 0.5});
  for (const Array& v : {x, -x}) {
    EXPECT_NEAR(tangent(v, dv).item<double>(), sum(grad(loss)(v, w) * dv).item<double>(), 1e-13);
  }
  // Hand check of one branch: d/dx sum(x^2 w) = 2 x w.
  EXPECT_TRUE(all_close(grad(loss)(-x, w), {-2 * 0.3 * 0.5, 2 * 0.7 * 2.0, -2 * 1.1 * -1.0}, 1e-12));
  auto jaxpr = make_jaxpr(grad(loss))(x, w);
  int conds = 0;
  for (const Eqn& e : jaxpr->eqns) conds += e.prim == Prim::cond;
  EXPECT_EQ(conds, 2) << jaxpr->str();  // forward and backward
}

TEST(Cond, IntegerOperandsPassThroughGrad) {
  auto loss = [](const Array& x) {
    auto [y, n] = cond(
        scalar(true), [](const Array& v, const Array& k) { return std::make_pair(v * k.astype(DType::f64), k + 1); },
        [](const Array& v, const Array& k) { return std::make_pair(v, k); }, x, scalar(int32_t(3)));
    return sum(y) * n.astype(DType::f64);
  };
  EXPECT_TRUE(all_close(grad(loss)(array<double>({1, 2})), {12, 12}));
  EXPECT_TRUE(all_close(jit(grad(loss))(array<double>({1, 2})), {12, 12}));
}

TEST(Cond, ErrorsNameTheBranches) {
  Array x = array<double>({1, 2, 3});
  EXPECT_PAX_ERROR(cond(
                       scalar(true), double_it, [](const Array& v) { return sum(v); }, x),
                   "cond: false_fn returns * with leaves (f64[]) but true_fn returns * with leaves (f64[3])");
  EXPECT_PAX_ERROR(cond(
                       scalar(true), double_it, [](const Array& v) { return v.astype(DType::f32); }, x),
                   "(f32[3]) but true_fn returns * with leaves (f64[3])");
  auto tree1 = [](const Array& v) { return std::vector<Array>{v}; };
  auto tree2 = [](const Array& v) { return std::vector<Array>{v, v}; };
  EXPECT_PAX_ERROR(cond(scalar(int32_t(0)), branches(tree1, tree2), x),
                   "branch 0 returns [*] with leaves (f64[3]) but branch 1 returns [*, *]");
  EXPECT_PAX_ERROR(cond(array<bool>({true, false}), double_it, negate_it, x), "pred must be a bool scalar");
  EXPECT_PAX_ERROR(cond(scalar(1.0), branches(double_it, negate_it), x),
                   "the predicate / index must be a bool or integer scalar, got f64[]");
}

// Needs batching rules of the elementwise, shape, reduction and dot
// primitives (written separately); enable once they are in.
TEST(Cond, VmapBatchedAndUnbatchedPredicate) {
  // Batched predicate: every branch runs and the results are selected.
  ArrayFn f = [](const std::vector<Array>& a) {
    return cond(
        a[1] > 0.0, [](const Array& x) { return sin(x) * 2.0; }, [](const Array& x) { return x * x; }, a[0]);
  };
  Array x = array<double>({0.1, 0.2, 0.3}), p = scalar(0.5);
  EXPECT_TRUE(check_vmap(f, {x, p}, {0, 0}));
  // Unbatched predicate, batched operand: a cond of batched branches.
  EXPECT_TRUE(check_vmap(f, {x, p}, {0, std::nullopt}));
  EXPECT_TRUE(check_vmap(f, {x, -p}, {0, std::nullopt}));
  // Integer index per example, three branches.
  ArrayFn g = [](const std::vector<Array>& a) {
    return cond(a[1],
                branches([](const Array& v) { return v + 1.0; }, [](const Array& v) { return v * 3.0; },
                         [](const Array& v) { return -v; }),
                a[0]);
  };
  Array xs = array<double>({1, 2, 3, 4}, {4, 1});
  Array idx = array<int32_t>({0, 1, 2, 9});
  Array got = vmap(g)(std::vector<Array>{xs, idx});
  EXPECT_TRUE(all_close(got, {2, 6, -3, -4}));
  // Per-example gradients through a cond with a per-example predicate.
  ArrayFn dg = [](const std::vector<Array>& a) {
    return grad([](const Array& x, const Array& p) {
      return sum(cond(
          p > 0.0, [](const Array& v) { return sin(v) * v; }, [](const Array& v) { return v * v * v; }, x));
    })(a[0], a[1]);
  };
  Array ps = array<double>({0.5, -0.5, 1.0});
  Array per_example = vmap(dg)(std::vector<Array>{stack({x, x * 2.0, x * 3.0}, 0), ps});
  for (int64_t b = 0; b < 3; ++b) {
    Array xb = x * double(b + 1);
    EXPECT_TRUE(all_close(squeeze(slice_along(per_example, 0, b, b + 1), {0}),
                          dg({xb, squeeze(slice_along(ps, 0, b, b + 1), {0})}), 1e-13, 1e-13));
  }
}

// Bodies without primitives exercise the control-flow batching rules alone.
TEST(Cond, VmapStructural) {
  auto swap = [](const Array& a, const Array& b) { return std::make_pair(b, a); };
  auto keep = [](const Array& a, const Array& b) { return std::make_pair(a, b); };
  auto f = [&](const Array& p, const Array& a, const Array& b) { return cond(p, swap, keep, a, b); };
  Array p = array<bool>({true, false, true}), a = array<double>({1, 2, 3}), b = array<double>({10, 20, 30});
  auto [x, y] = vmap(f)(p, a, b);
  EXPECT_TRUE(all_close(x, {10, 2, 30}));
  EXPECT_TRUE(all_close(y, {1, 20, 3}));
  // An unbatched predicate with batched and unbatched operands: the outputs are batched.
  auto [u, v] = vmap(f, {.in_axes = {std::nullopt, 0, std::nullopt}})(scalar(true), a, scalar(7.0));
  EXPECT_TRUE(all_close(u, {7, 7, 7}));
  EXPECT_TRUE(all_close(v, {1, 2, 3}));
  auto index = [&](const Array& i, const Array& a, const Array& b) {
    return cond(i, branches(keep, swap, [](const Array& a, const Array&) { return std::make_pair(a, a); }), a, b);
  };
  auto [s, t] = vmap(index)(array<int32_t>({2, 1, -3}), a, b);
  EXPECT_TRUE(all_close(s, {1, 20, 3}));
  EXPECT_TRUE(all_close(t, {1, 2, 30}));
}

// ---------------------------------------------------------------------------
// while_loop

TEST(WhileLoop, EagerAndJit) {
  // Doubles x until it exceeds 100, counting the steps.
  auto f = [](const Array& x) {
    auto out = while_loop([](const std::pair<Array, Array>& c) { return c.first < 100.0; },
                          [](const std::pair<Array, Array>& c) { return std::make_pair(c.first * 2.0, c.second + 1); },
                          std::make_pair(x, scalar(int32_t(0))));
    return out;
  };
  auto [v, n] = f(scalar(3.0));
  EXPECT_DOUBLE_EQ(v.item<double>(), 192);
  EXPECT_EQ(n.item<int32_t>(), 6);
  auto jf = jit(f);
  for (double x0 : {3.0, 0.5, 150.0}) {
    auto [jv, jn] = jf(scalar(x0));
    auto [ev, en] = f(scalar(x0));
    EXPECT_EQ(jv.item<double>(), ev.item<double>());
    EXPECT_EQ(jn.item<int32_t>(), en.item<int32_t>());
  }
  EXPECT_EQ(jf.num_traces(), 1u);
  EXPECT_TRUE(has_eqn(*make_jaxpr(f)(scalar(3.0)), Prim::while_loop));
  // Zero iterations.
  auto [z, zn] = f(scalar(500.0));
  EXPECT_DOUBLE_EQ(z.item<double>(), 500);
  EXPECT_EQ(zn.item<int32_t>(), 0);
}

ArrayFn newton_sqrt() {
  // Newton iterations for sqrt(a) from x until converged: the trip count depends on the values.
  return [](const std::vector<Array>& v) {
    const Array& a = v[0];
    auto out = while_loop([&](const std::vector<Array>& c) { return (abs(c[0] * c[0] - a) > 1e-12) & (c[1] < 50); },
                          [&](const std::vector<Array>& c) {
                            return std::vector<Array>{(c[0] + a / c[0]) * 0.5, c[1] + 1};
                          },
                          std::vector<Array>{v[1], scalar(int32_t(0))});
    return out[0];
  };
}

TEST(WhileLoop, JvpEagerAndUnderJit) {
  Array a = scalar(2.0), x0 = scalar(1.0);
  EXPECT_NEAR(newton_sqrt()({a, x0}).item<double>(), std::sqrt(2.0), 1e-12);
  // d sqrt(a) / da = 1 / (2 sqrt(a)); the converged result does not depend on x0.
  auto [y, t] = jvp([](const Array& a) { return newton_sqrt()({a, scalar(1.0)}); }, a, scalar(1.0));
  EXPECT_NEAR(y.item<double>(), std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(t.item<double>(), 0.5 / std::sqrt(2.0), 1e-9);
  auto jitted = jit([](const Array& a, const Array& da) {
    return jvp([](const Array& b) { return newton_sqrt()({b, scalar(1.0)}); }, a, da).second;
  });
  EXPECT_NEAR(jitted(a, scalar(1.0)).item<double>(), 0.5 / std::sqrt(2.0), 1e-9);
  // A fixed trip count (locally constant) agrees with finite differences.
  ArrayFn powers = [](const std::vector<Array>& v) {
    const Array& w = v[1];
    auto out = while_loop([](const std::vector<Array>& c) { return c[1] < 4; },
                          [&](const std::vector<Array>& c) {
                            return std::vector<Array>{sin(c[0] * w), c[1] + 1};
                          },
                          std::vector<Array>{v[0], scalar(int32_t(0))});
    return out[0];
  };
  std::vector<Array> args{array<double>({0.3, -0.4}), array<double>({1.2, 0.7})};
  EXPECT_TRUE(check_jvp(powers, args, 1e-6, 1e-8));
  EXPECT_TRUE(check_jit(powers, args));
}

TEST(WhileLoop, ErrorsAreClear) {
  auto body = [](const Array& x) { return x * 2.0; };
  EXPECT_PAX_ERROR(grad([&](const Array& x) {
                     return sum(while_loop([](const Array& c) { return sum(c) < 10.0; }, body, x));
                   })(array<double>({1, 2})),
                   "reverse-mode differentiation (grad / vjp) of a while_loop is not supported");
  EXPECT_PAX_ERROR(grad([&](const Array& x) {
                     return sum(while_loop([](const Array& c) { return sum(c) < 10.0; }, body, x));
                   })(array<double>({1, 2})),
                   "use scan, or fori_loop with static (int) bounds");
  EXPECT_PAX_ERROR(while_loop([](const Array& c) { return c < 10.0; }, body, array<double>({1, 2})),
                   "cond_fn must return a bool scalar, got bool[2]");
  EXPECT_PAX_ERROR(while_loop([](const Array& c) { return sum(c) < 10.0; },
                              [](const Array& c) { return c.astype(DType::f32); }, array<double>({1, 2})),
                   "body_fn returns the carry leaf '' as f32[2] but it enters as f64[2]");
  EXPECT_PAX_ERROR(while_loop([](const Tree& c) { return sum(c["x"].leaf()) < 10.0; },
                              [](const Tree& c) {
                                return Tree::dict({{"y", c["x"]}});
                              },
                              Tree::dict({{"x", array<double>({1.0})}})),
                   "body_fn must return a carry with the structure of the initial carry");
}

// Needs batching rules of the elementwise, shape, reduction and dot
// primitives (written separately); enable once they are in.
TEST(WhileLoop, VmapWithPerExampleTripCounts) {
  // Each example doubles (away from -2) until it reaches its own limit.
  ArrayFn f = [](const std::vector<Array>& a) {
    const Array& limit = a[1];
    return while_loop([&](const Array& x) { return x < limit; }, [](const Array& x) { return x * 2.0 + 2.0; }, a[0]);
  };
  const std::vector<double> x0 = {1, 5, 30, 100}, limits = {40, 40, 1000, 10};
  Array got = vmap(f)(std::vector<Array>{array<double>(x0), array<double>(limits)});
  std::vector<double> want;
  for (size_t i = 0; i < x0.size(); ++i) want.push_back(f({scalar(x0[i]), scalar(limits[i])}).item<double>());
  EXPECT_TRUE(all_close(got, want));
  // Only the carry batched (shared limit), and only the limit batched.
  EXPECT_TRUE(check_vmap(f, {scalar(1.0), scalar(40.0)}, {0, std::nullopt}));
  EXPECT_TRUE(check_vmap(f, {scalar(1.0), scalar(40.0)}, {std::nullopt, 0}));
  // fori_loop with per-example (traced) bounds under jit, and jvp through it.
  auto powers = jit(vmap([](const Array& x, const Array& n) {
    return fori_loop(
        scalar(int32_t(0)), n, [](const Array&, const Array& a) { return a * 1.5; }, x);
  }));
  Array n = array<int32_t>({0, 1, 4}), x = array<double>({2, 2, 2});
  EXPECT_TRUE(all_close(powers(x, n), {2, 3, 2 * std::pow(1.5, 4)}));
  auto [px, pt] = jvp([&](const Array& v) { return powers(v, n); }, x, array<double>({1, 1, 1}));
  EXPECT_TRUE(all_close(pt, {1, 1.5, std::pow(1.5, 4)}));
}

TEST(WhileLoop, VmapStructural) {
  // Runs while flag0 holds, shifting the flags and swapping (x, y): the
  // trip count is the number of leading true flags of each example.
  using Carry = std::vector<Array>;  // flag0, flag1, flag2, x, y
  auto f = [](const Carry& init) {
    return while_loop([](const Carry& c) { return c[0]; },
                      [](const Carry& c) {
                        return Carry{c[1], c[2], scalar(false), c[4], c[3]};
                      },
                      init);
  };
  Carry init{array<bool>({true, false, true, true}), array<bool>({false, true, true, true}),
             array<bool>({true, true, false, true}), array<double>({1, 2, 3, 4}), array<double>({5, 6, 7, 8})};
  Carry out = vmap(f)(init);
  EXPECT_TRUE(all_close(out[3], {5, 2, 3, 8}));  // 1, 0, 2 and 3 iterations
  EXPECT_TRUE(all_close(out[4], {1, 6, 7, 4}));
  EXPECT_TRUE(all_close(out[0].astype(DType::i32), {0, 0, 0, 0}));
  // Unbatched flags: one trip count for the batch; y is not batched but x is.
  auto g = [](const Array& x, const Array& y) {
    Carry c = while_loop([](const Carry& c) { return c[0]; },
                         [](const Carry& c) {
                           return Carry{c[1], c[2], scalar(false), c[4], c[3]};
                         },
                         Carry{scalar(true), scalar(false), scalar(false), x, y});
    return std::make_pair(c[3], c[4]);
  };
  auto [gx, gy] = vmap(g, {.in_axes = {0, std::nullopt}})(array<double>({1, 2}), scalar(9.0));
  EXPECT_TRUE(all_close(gx, {9, 9}));
  EXPECT_TRUE(all_close(gy, {1, 2}));
}

// ---------------------------------------------------------------------------
// fori_loop

TEST(ForiLoop, StaticBoundsAreADifferentiableScan) {
  // sum_{i=2}^{5} i * x
  auto f = [](const Array& x) {
    return fori_loop(
        2, 6, [&](const Array& i, const Array& acc) { return acc + x * i.astype(DType::f64); }, zeros_like(x));
  };
  Array x = array<double>({1, -2});
  EXPECT_TRUE(all_close(f(x), {14, -28}));
  EXPECT_TRUE(all_close(grad([&](const Array& v) { return sum(f(v)); })(x), {14, 14}));
  EXPECT_TRUE(all_close(jit(f)(x), {14, -28}));
  EXPECT_TRUE(has_eqn(*make_jaxpr(f)(x), Prim::scan));
  // An empty range returns init.
  EXPECT_TRUE(all_close(fori_loop(
                            5, 2, [](const Array&, const Array& a) { return a * 2.0; }, x),
                        {1, -2}));
  // Gradients of a nonlinear loop against finite differences.
  ArrayFn g = [](const std::vector<Array>& a) {
    const Array& w = a[1];
    return fori_loop(
        0, 5, [&](const Array& i, const Array& h) { return tanh(h * w + i.astype(DType::f64) * 0.1); }, a[0]);
  };
  std::vector<Array> args{array<double>({0.2, -0.5, 0.9}), array<double>({1.1, 0.4, -0.8})};
  EXPECT_TRUE(check_vjp(g, args, 1e-6, 1e-8));
  EXPECT_TRUE(check_jvp(g, args, 1e-6, 1e-8));
}

TEST(ForiLoop, TracedBoundsBecomeAWhileLoop) {
  auto f = [](const Array& x, const Array& n) {
    return fori_loop(
        scalar(int32_t(0)), n, [](const Array&, const Array& a) { return a * 2.0; }, x);
  };
  auto jf = jit(f);
  EXPECT_DOUBLE_EQ(jf(scalar(1.0), scalar(int32_t(5))).item<double>(), 32);
  EXPECT_DOUBLE_EQ(jf(scalar(1.0), scalar(int32_t(0))).item<double>(), 1);
  EXPECT_EQ(jf.num_traces(), 1u);
  EXPECT_TRUE(has_eqn(*make_jaxpr(f)(scalar(1.0), scalar(int32_t(3))), Prim::while_loop));
  // Concrete Array bounds count as static (a scan, differentiable).
  EXPECT_DOUBLE_EQ(f(scalar(1.0), scalar(int32_t(3))).item<double>(), 8);
  EXPECT_DOUBLE_EQ(grad([&](const Array& x) { return f(x, scalar(int32_t(3))); })(scalar(1.0)).item<double>(), 8);
  EXPECT_PAX_ERROR(f(scalar(1.0), scalar(2.5)), "fori_loop: bounds must be integer scalars, got f64[]");
}

// ---------------------------------------------------------------------------
// scan

// Running sum with the previous total as y, computed by a loop.
TEST(Scan, CumulativeSumEagerForwardAndReverse) {
  Array xs = array<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto step = [](const Array& c, const Array& x) { return std::make_pair(c + x, c); };
  auto [c, ys] = scan(step, zeros({2}, DType::f64), xs);
  EXPECT_TRUE(all_close(c, {9, 12}));
  EXPECT_TRUE(all_close(ys, {0, 0, 1, 2, 4, 6}));
  EXPECT_EQ(ys.shape(), (Shape{3, 2}));
  auto [rc, rys] = scan(step, zeros({2}, DType::f64), xs, std::nullopt, /*reverse=*/true);
  EXPECT_TRUE(all_close(rc, {9, 12}));
  EXPECT_TRUE(all_close(rys, {8, 10, 5, 6, 0, 0}));
  // bf16 and integer carries.
  auto [bc, bys] = scan(step, zeros({2}, DType::bf16), xs.astype(DType::bf16));
  EXPECT_EQ(bc.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(bc, {9, 12}));
  auto [ic, iys] = scan(step, zeros({2}, DType::i32), xs.astype(DType::i32));
  EXPECT_TRUE(all_close(ic, {9, 12}));
  EXPECT_EQ(iys.dtype(), DType::i32);
}

TEST(Scan, TreesNoXsAndZeroLength) {
  // Carry {a, b}, xs (u, v): Fibonacci-like with inputs; y a tuple.
  Tree init = Tree::dict({{"a", scalar(0.0)}, {"b", scalar(1.0)}});
  auto xs = std::make_pair(array<double>({1, 2, 3}), array<int32_t>({10, 20, 30}));
  auto step = [](const Tree& c, const std::pair<Array, Array>& x) {
    Tree next = Tree::dict({{"a", c["b"]}, {"b", c["a"].leaf() + c["b"].leaf() + x.first}});
    return std::make_pair(next, std::make_tuple(c["a"].leaf(), x.second * 2));
  };
  auto [c, ys] = scan(step, init, xs);
  // (a, b): (0,1) -> (1, 2) -> (2, 5) -> (5, 10)
  EXPECT_DOUBLE_EQ(c["a"].leaf().item<double>(), 5);
  EXPECT_DOUBLE_EQ(c["b"].leaf().item<double>(), 10);
  EXPECT_TRUE(all_close(std::get<0>(ys), {0, 1, 2}));
  EXPECT_TRUE(all_close(std::get<1>(ys), {20, 40, 60}));
  // No xs: length gives the trip count; y may be None.
  auto [n, none] =
      scan([](const Array& c, const Tree&) { return std::make_pair(c * 3.0, Tree()); }, scalar(1.0), Tree(), 4);
  EXPECT_DOUBLE_EQ(n.item<double>(), 81);
  EXPECT_TRUE(none.is_none());
  // Zero length: the carry comes back, ys are empty.
  auto [z, zys] = scan([](const Array& c, const Array& x) { return std::make_pair(c + x, c * x); },
                       array<double>({1, 2}), zeros({0, 2}, DType::f64));
  EXPECT_TRUE(all_close(z, {1, 2}));
  EXPECT_EQ(zys.shape(), (Shape{0, 2}));
}

TEST(Scan, JitKeepsOneEquation) {
  auto f = [](const Array& h0, const Array& xs, const Array& w) {
    return scan(
        [&](const Array& h, const Array& x) {
          Array h2 = tanh(matmul(h, w) + x);
          return std::make_pair(h2, sum(h2));
        },
        h0, xs);
  };
  Array h0 = random_array({2, 3}, DType::f32, 1), xs = random_array({5, 2, 3}, DType::f32, 2),
        w = random_array({3, 3}, DType::f32, 3);
  auto [ec, eys] = f(h0, xs, w);
  auto [jc, jys] = jit(f)(h0, xs, w);
  EXPECT_TRUE(all_close(jc, ec, 0, 0));
  EXPECT_TRUE(all_close(jys, eys, 0, 0));
  auto jaxpr = make_jaxpr(f)(h0, xs, w);
  int scans = 0;
  for (const Eqn& e : jaxpr->eqns) scans += e.prim == Prim::scan;
  EXPECT_EQ(scans, 1) << jaxpr->str();
  EXPECT_EQ(jaxpr->eqns.size(), 1u) << jaxpr->str();  // w enters the scan as an operand
  typecheck(*jaxpr);
}

// A small recurrent cell scanned over time, and the same loop unrolled.
Array rnn_scan(const Array& h0, const Array& xs, const Array& w, bool reverse = false) {
  auto [h, ys] = scan(
      [&](const Array& h, const Array& x) {
        Array h2 = tanh(h * w + x) * 0.9 + h * 0.1;
        return std::make_pair(h2, h2 * h2);
      },
      h0, xs, std::nullopt, reverse);
  return sum(h) + sum(ys * xs);
}

Array rnn_unrolled(const Array& h0, const Array& xs, const Array& w, bool reverse = false) {
  Array h = h0;
  Array total = zeros({}, h0.dtype());
  const int64_t n = xs.dim(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = reverse ? n - 1 - i : i;
    Array x = squeeze(slice_along(xs, 0, t, t + 1), {0});
    h = tanh(h * w + x) * 0.9 + h * 0.1;
    total = total + sum(h * h * x);
  }
  return total + sum(h);
}

TEST(Scan, GradMatchesTheUnrolledLoop) {
  Array h0 = random_array({3}, DType::f64, 4), xs = random_array({6, 3}, DType::f64, 5),
        w = random_array({3}, DType::f64, 6);
  for (bool reverse : {false, true}) {
    EXPECT_NEAR(rnn_scan(h0, xs, w, reverse).item<double>(), rnn_unrolled(h0, xs, w, reverse).item<double>(), 1e-13);
    auto scanned = [reverse](const Array& h, const Array& x, const Array& v) { return rnn_scan(h, x, v, reverse); };
    auto unrolled = [reverse](const Array& h, const Array& x, const Array& v) {
      return rnn_unrolled(h, x, v, reverse);
    };
    auto want = grad<0, 1, 2>(unrolled)(h0, xs, w);
    expect_all_close(grad<0, 1, 2>(scanned)(h0, xs, w), want);
    // Under jit, and jit inside grad (the forward scan then keeps no residuals).
    expect_all_close(jit(grad<0, 1, 2>(scanned))(h0, xs, w), want);
    expect_all_close(grad<0, 1, 2>(jit(scanned))(h0, xs, w), want);
  }
  ArrayFn f = [](const std::vector<Array>& a) { return rnn_scan(a[0], a[1], a[2]); };
  EXPECT_TRUE(check_vjp(f, {h0, xs, w}, 1e-6, 1e-8));
  EXPECT_TRUE(check_jvp(f, {h0, xs, w}, 1e-6, 1e-8));
  EXPECT_TRUE(check_vjp_order2(f, {h0, xs, w}));
}

TEST(Scan, IntegerCarryAndIntegerYs) {
  // A counter in the carry indexes nothing differentiable; gradients still flow.
  auto loss = [](const Array& xs) {
    auto [c, ys] = scan(
        [](const std::pair<Array, Array>& c, const Array& x) {
          Array k = c.second.astype(DType::f64);
          return std::make_pair(std::make_pair(c.first + x * k, c.second + 1), c.second * 2);
        },
        std::make_pair(scalar(0.0), scalar(int32_t(1))), xs);
    return c.first + sum(ys.astype(DType::f64)) * 0.0;
  };
  Array xs = array<double>({5, 6, 7});
  EXPECT_DOUBLE_EQ(loss(xs).item<double>(), 5 + 12 + 21);
  EXPECT_TRUE(all_close(grad(loss)(xs), {1, 2, 3}));
  EXPECT_TRUE(all_close(jit(grad(loss))(xs), {1, 2, 3}));
}

// One LSTM step and the loss of a sequence model over [T, B, D] inputs.
std::pair<std::pair<Array, Array>, Array> lstm_step(const Tree& p, const std::pair<Array, Array>& hc, const Array& x) {
  const auto& [h, c] = hc;
  Array z = matmul(x, p["wx"].leaf()) + matmul(h, p["wh"].leaf()) + p["b"].leaf();  // [B, 4H]
  std::vector<Array> g = split(z, 4, 1);
  Array c2 = nn::sigmoid(g[1]) * c + nn::sigmoid(g[0]) * tanh(g[2]);
  Array h2 = nn::sigmoid(g[3]) * tanh(c2);
  return {{h2, c2}, h2};
}

Array lstm_loss_scan(const Tree& p, const Array& xs, const Array& h0) {
  auto [hc, hs] = scan([&](const std::pair<Array, Array>& hc, const Array& x) { return lstm_step(p, hc, x); },
                       std::make_pair(h0, zeros_like(h0)), xs);
  return mean(hs * hs) + sum(hc.second);
}

Array lstm_loss_unrolled(const Tree& p, const Array& xs, const Array& h0) {
  std::pair<Array, Array> hc{h0, zeros_like(h0)};
  std::vector<Array> hs;
  for (int64_t t = 0; t < xs.dim(0); ++t) {
    auto [next, h] = lstm_step(p, hc, squeeze(slice_along(xs, 0, t, t + 1), {0}));
    hc = next;
    hs.push_back(h);
  }
  Array stacked = stack(hs, 0);
  return mean(stacked * stacked) + sum(hc.second);
}

TEST(Scan, LstmOverTimeWithGradUnderJit) {
  const int64_t T = 7, B = 2, D = 3, H = 4;
  Tree p = Tree::dict({{"wx", random_array({D, 4 * H}, DType::f64, 10)},
                       {"wh", random_array({H, 4 * H}, DType::f64, 11)},
                       {"b", random_array({4 * H}, DType::f64, 12)}});
  Array xs = random_array({T, B, D}, DType::f64, 13), h0 = random_array({B, H}, DType::f64, 14);
  EXPECT_NEAR(lstm_loss_scan(p, xs, h0).item<double>(), lstm_loss_unrolled(p, xs, h0).item<double>(), 1e-13);
  auto [want_p, want_x] = grad<0, 1>(lstm_loss_unrolled)(p, xs, h0);
  auto train = jit(value_and_grad<0, 1>(lstm_loss_scan));
  auto [value, grads] = train(p, xs, h0);
  auto [gp, gx] = grads;
  EXPECT_NEAR(value.item<double>(), lstm_loss_unrolled(p, xs, h0).item<double>(), 1e-13);
  for (const char* k : {"wx", "wh", "b"}) EXPECT_TRUE(all_close(gp[k].leaf(), want_p[k].leaf(), 1e-11, 1e-12)) << k;
  EXPECT_TRUE(all_close(gx, want_x, 1e-11, 1e-12));
  // Eagerly too, and against finite differences.
  Tree ge = grad(lstm_loss_scan)(p, xs, h0);
  EXPECT_TRUE(all_close(ge["wh"].leaf(), want_p["wh"].leaf(), 1e-11, 1e-12));
  ArrayFn f = [&](const std::vector<Array>& a) {
    return lstm_loss_scan(Tree::dict({{"wx", a[0]}, {"wh", a[1]}, {"b", a[2]}}), a[3], a[4]);
  };
  EXPECT_TRUE(check_vjp(f, {p["wx"].leaf(), p["wh"].leaf(), p["b"].leaf(), xs, h0}, 1e-6, 1e-8));
  // f32 under jit matches f64 closely.
  Tree p32 = tree_map([](const Array& a) { return a.astype(DType::f32); }, p);
  auto [v32, g32] = train(p32, xs.astype(DType::f32), h0.astype(DType::f32));
  EXPECT_NEAR(v32.item<double>(), value.item<double>(), 1e-5);
  EXPECT_TRUE(all_close(std::get<0>(g32)["wh"].leaf(), want_p["wh"].leaf(), 1e-4, 1e-5));
}

// A stack of layers applied by scanning over their stacked weights.
Array stacked_layers(const Array& ws, const Array& bs, const Array& x) {
  auto [h, none] = scan(
      [](const Array& h, const std::pair<Array, Array>& wb) {
        return std::make_pair(tanh(matmul(h, wb.first) + wb.second), Tree());
      },
      x, std::make_pair(ws, bs));
  return sum(h * h);
}

Array layers_unrolled(const Array& ws, const Array& bs, const Array& x) {
  Array h = x;
  for (int64_t l = 0; l < ws.dim(0); ++l) {
    Array w = squeeze(slice_along(ws, 0, l, l + 1), {0}), b = squeeze(slice_along(bs, 0, l, l + 1), {0});
    h = tanh(matmul(h, w) + b);
  }
  return sum(h * h);
}

TEST(Scan, OverStackedLayerWeights) {
  const int64_t L = 4, D = 5;
  Array ws = random_array({L, D, D}, DType::f64, 20), bs = random_array({L, D}, DType::f64, 21),
        x = random_array({3, D}, DType::f64, 22);
  EXPECT_NEAR(stacked_layers(ws, bs, x).item<double>(), layers_unrolled(ws, bs, x).item<double>(), 1e-13);
  auto want = grad<0, 1, 2>(layers_unrolled)(ws, bs, x);
  expect_all_close(grad<0, 1, 2>(stacked_layers)(ws, bs, x), want);
  expect_all_close(jit(grad<0, 1, 2>(stacked_layers))(ws, bs, x), want);
  ArrayFn f = [](const std::vector<Array>& a) { return stacked_layers(a[0], a[1], a[2]); };
  EXPECT_TRUE(check_vjp(f, {ws, bs, x}, 1e-6, 1e-8));
  EXPECT_TRUE(check_jvp(f, {ws, bs, x}, 1e-6, 1e-8));
}

TEST(Scan, HigherOrder) {
  // Hessian-vector products two ways: jvp of grad and grad of grad.
  Array h0 = random_array({3}, DType::f64, 30), xs = random_array({4, 3}, DType::f64, 31),
        w = random_array({3}, DType::f64, 32), v = random_array({3}, DType::f64, 33);
  auto g_scan = [&](const Array& wv) {
    return grad<2>([](const Array& a, const Array& b, const Array& c) { return rnn_scan(a, b, c); })(h0, xs, wv);
  };
  auto g_unrolled = [&](const Array& wv) {
    return grad<2>([](const Array& a, const Array& b, const Array& c) { return rnn_unrolled(a, b, c); })(h0, xs, wv);
  };
  Array hv_scan = jvp(g_scan, w, v).second, hv_unrolled = jvp(g_unrolled, w, v).second;
  EXPECT_TRUE(all_close(hv_scan, hv_unrolled, 1e-11, 1e-12));
  Array gg_scan = grad([&](const Array& wv) { return sum(g_scan(wv) * v); })(w);
  EXPECT_TRUE(all_close(gg_scan, hv_unrolled, 1e-11, 1e-12));
  Array gg_jit = jit(grad([&](const Array& wv) { return sum(g_scan(wv) * v); }))(w);
  EXPECT_TRUE(all_close(gg_jit, hv_unrolled, 1e-11, 1e-12));
}

TEST(Scan, ErrorsAreClear) {
  Array xs = array<double>({1, 2, 3});
  EXPECT_PAX_ERROR(
      scan([](const Array& c, const Array& x) { return std::make_pair(c.astype(DType::f32), x); }, scalar(0.0), xs),
      "scan: f returns the carry leaf '' as f32[] but it enters as f64[]");
  EXPECT_PAX_ERROR(scan([](const Array& c, const Array& x) { return std::make_pair(c + x * ones({2}, DType::f64), x); },
                        scalar(0.0), xs),
                   "as f64[2] but it enters as f64[]");
  EXPECT_PAX_ERROR(scan(
                       [](const Tree& c, const Array& x) {
                         return std::make_pair(Tree::list({c[0], c[0]}), x);
                       },
                       Tree::list({scalar(0.0)}), xs),
                   "scan: f must return a carry with the structure of the initial carry [*], got [*, *]");
  EXPECT_PAX_ERROR(scan([](const Array& c, const std::vector<Array>& x) { return std::make_pair(c, x[0]); },
                        scalar(0.0), std::vector<Array>{xs, zeros({4})}),
                   "the leaves of xs must share their leading axis length");
  EXPECT_PAX_ERROR(scan([](const Array& c, const Array& x) { return std::make_pair(c, x); }, scalar(0.0), scalar(1.0)),
                   "every leaf of xs needs a leading axis");
  EXPECT_PAX_ERROR(scan([](const Array& c, const Tree&) { return std::make_pair(c, Tree()); }, scalar(0.0), Tree()),
                   "with no xs, give the number of iterations as `length`");
  EXPECT_PAX_ERROR(scan([](const Array& c, const Array& x) { return std::make_pair(c, x); }, scalar(0.0), xs, 5),
                   "length 5 does not match the leading axis 3 of xs");
}

TEST(Scan, VmapStructural) {
  // y_t = carry entering step t, carry = x_t: a shift by one.
  auto shift = [](const Array& c0, const Array& xs) {
    return scan([](const Array& c, const Array& x) { return std::make_pair(x, c); }, c0, xs);
  };
  Array xs = array<double>({1, 2, 3, 4, 5, 6}, {3, 2});  // batch of 2 sequences of length 3 (axis 1)
  // Only xs batched: the carry becomes batched through the fixed point.
  auto [c, ys] = vmap(shift, {.in_axes = {std::nullopt, 1}})(scalar(0.0), xs);
  EXPECT_EQ(c.shape(), (Shape{2}));
  EXPECT_TRUE(all_close(c, {5, 6}));
  EXPECT_EQ(ys.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(ys, {0, 1, 3, 0, 2, 4}));
  // Only the carry batched; reverse.
  auto rshift = [](const Array& c0, const Array& xs) {
    return scan([](const Array& c, const Array& x) { return std::make_pair(c, x); }, c0, xs, std::nullopt, true);
  };
  auto [rc, rys] = vmap(rshift, {.in_axes = {0, std::nullopt}})(array<double>({7, 8}), array<double>({1, 2, 3}));
  EXPECT_TRUE(all_close(rc, {7, 8}));
  EXPECT_TRUE(all_close(rys, {1, 2, 3, 1, 2, 3}));
}

// Needs batching rules of the elementwise, shape, reduction and dot
// primitives (written separately); enable once they are in.
TEST(Scan, VmapMatchesALoop) {
  ArrayFn f = [](const std::vector<Array>& a) { return rnn_scan(a[0], a[1], a[2]); };
  Array h0 = random_array({3}, DType::f64, 40), xs = random_array({5, 3}, DType::f64, 41),
        w = random_array({3}, DType::f64, 42);
  EXPECT_TRUE(check_vmap(f, {h0, xs, w}, {0, 0, 0}, 3, 1e-13));
  // Only xs batched: the carry becomes batched by the fixed point.
  EXPECT_TRUE(check_vmap(f, {h0, xs, w}, {std::nullopt, 1, std::nullopt}, 3, 1e-13));
  // Only the closed-over weight batched.
  EXPECT_TRUE(check_vmap(f, {h0, xs, w}, {std::nullopt, std::nullopt, 0}, 3, 1e-13));
  // Per-example gradients of the stacked-layer model.
  ArrayFn g = [](const std::vector<Array>& a) {
    return grad<2>([](const Array& ws, const Array& bs, const Array& x) { return stacked_layers(ws, bs, x); })(
        a[0], a[1], a[2]);
  };
  Array ws = random_array({3, 4, 4}, DType::f64, 43), bs = random_array({3, 4}, DType::f64, 44),
        x = random_array({2, 4}, DType::f64, 45);
  EXPECT_TRUE(check_vmap(g, {ws, bs, x}, {std::nullopt, std::nullopt, 0}, 3, 1e-12));
  // grad of a vmapped scan: the sum of the per-example gradients.
  Array hb = random_array({4, 3}, DType::f64, 46), xb = random_array({4, 5, 3}, DType::f64, 47);
  auto batch_loss = [](const Array& h, const Array& xs, const Array& w) {
    return sum(vmap([&](const Array& hi, const Array& xi) { return rnn_scan(hi, xi, w); })(h, xs));
  };
  Array gw = grad<2>(batch_loss)(hb, xb, w);
  Array want = zeros_like(w);
  for (int64_t b = 0; b < 4; ++b) {
    want = want + grad<2>([](const Array& h, const Array& x, const Array& v) { return rnn_scan(h, x, v); })(
                      squeeze(slice_along(hb, 0, b, b + 1), {0}), squeeze(slice_along(xb, 0, b, b + 1), {0}), w);
  }
  EXPECT_TRUE(all_close(gw, want, 1e-12, 1e-13));
  EXPECT_TRUE(all_close(jit(grad<2>(batch_loss))(hb, xb, w), want, 1e-12, 1e-13));
}

// ---------------------------------------------------------------------------
// checkpoint

Array mlp(const Array& x, const Array& w) {
  Array h = x;
  for (int l = 0; l < 4; ++l) h = tanh(matmul(h, w));
  return h;
}

TEST(Checkpoint, SameValuesAndGradients) {
  Array x = random_array({4, 5}, DType::f64, 50), w = random_array({5, 5}, DType::f64, 51);
  auto plain = [](const Array& x, const Array& w) { return sum(mlp(x, w) * mlp(x, w)); };
  for (RematPolicy policy : {RematPolicy::nothing_saveable, RematPolicy::dots_saveable}) {
    auto block = checkpoint(mlp, policy);
    auto loss = [&](const Array& x, const Array& w) { return sum(block(x, w) * block(x, w)); };
    EXPECT_TRUE(all_close(block(x, w), mlp(x, w), 0, 0));
    auto [px, pw] = grad<0, 1>(plain)(x, w);
    auto [gx, gw] = grad<0, 1>(loss)(x, w);
    EXPECT_TRUE(all_close(gx, px, 1e-13, 1e-14));
    EXPECT_TRUE(all_close(gw, pw, 1e-13, 1e-14));
    auto [jx, jw] = jit(grad<0, 1>(loss))(x, w);
    EXPECT_TRUE(all_close(jw, pw, 1e-13, 1e-14));
    auto [kx, kw] = grad<0, 1>(jit(loss))(x, w);
    EXPECT_TRUE(all_close(kw, pw, 1e-13, 1e-14));
    ArrayFn f = [&](const std::vector<Array>& a) { return block(a[0], a[1]); };
    EXPECT_TRUE(check_vjp(f, {x, w}, 1e-6, 1e-8));
    EXPECT_TRUE(check_jvp(f, {x, w}, 1e-6, 1e-8));
    EXPECT_TRUE(check_vjp_order2(f, {x, w}));
    EXPECT_TRUE(has_eqn(*make_jaxpr(block)(x, w), Prim::remat));
    // Hessian-vector products: jvp of grad through the checkpoint.
    Array v = random_array({5, 5}, DType::f64, 59);
    auto hv = [&](const auto& l) { return jvp([&](const Array& u) { return grad<1>(l)(x, u); }, w, v).second; };
    EXPECT_TRUE(all_close(hv(loss), hv(plain), 1e-12, 1e-13));
  }
}

// Bytes of the distinct arrays a grad tape keeps (inputs excluded), and its length.
struct TapeSize {
  size_t entries = 0;
  size_t bytes = 0;
};
TapeSize tape_size(const std::function<Array(const Array&, const Array&)>& f, const Array& x, const Array& w) {
  auto trace = std::make_shared<VjpTrace>();
  TraceScope scope(trace, /*dynamic=*/false);
  f(trace->track(x), trace->track(w));
  std::unordered_set<const void*> seen{x.id(), w.id()};
  TapeSize out;
  out.entries = trace->tape().size();
  for (const TapeEntry& e : trace->tape()) {
    for (const auto* list : {&e.in_primals, &e.out_primals}) {
      for (const Array& a : *list) {
        if (seen.insert(a.id()).second) out.bytes += a.nbytes();
      }
    }
  }
  return out;
}

TEST(Checkpoint, KeepsFewerResiduals) {
  Array x = random_array({8, 16}, DType::f32, 52), w = random_array({16, 16}, DType::f32, 53);
  const size_t act = 8 * 16 * 4;  // bytes of one [8, 16] f32 activation
  TapeSize plain = tape_size(mlp, x, w);
  EXPECT_EQ(plain.entries, 8u);     // 4 x (dot, tanh)
  EXPECT_EQ(plain.bytes, 8 * act);  // every dot and tanh result
  TapeSize nothing = tape_size(checkpoint(mlp, RematPolicy::nothing_saveable), x, w);
  EXPECT_EQ(nothing.entries, 1u);  // one remat entry
  EXPECT_EQ(nothing.bytes, act);   // the output only
  TapeSize dots = tape_size(checkpoint(mlp, RematPolicy::dots_saveable), x, w);
  EXPECT_EQ(dots.entries, 1u);
  EXPECT_EQ(dots.bytes, 5 * act);  // the output and the 4 matmul results
}

TEST(Checkpoint, InsideScanAndWithStaticArguments) {
  // A checkpointed scan body, as a Repeat layer uses it.
  auto layer = checkpoint([](const Array& h, const std::pair<Array, Array>& wb,
                             double scale) { return tanh(matmul(h, wb.first) + wb.second) * scale; },
                          RematPolicy::dots_saveable);
  auto model = [&](const Array& ws, const Array& bs, const Array& x) {
    auto [h, none] = scan(
        [&](const Array& h, const std::pair<Array, Array>& wb) { return std::make_pair(layer(h, wb, 1.0), Tree()); }, x,
        std::make_pair(ws, bs));
    return sum(h * h);
  };
  Array ws = random_array({3, 4, 4}, DType::f64, 54), bs = random_array({3, 4}, DType::f64, 55),
        x = random_array({2, 4}, DType::f64, 56);
  EXPECT_NEAR(model(ws, bs, x).item<double>(), layers_unrolled(ws, bs, x).item<double>(), 1e-13);
  auto want = grad<0, 1, 2>(layers_unrolled)(ws, bs, x);
  expect_all_close(jit(grad<0, 1, 2>(model))(ws, bs, x), want);
  EXPECT_TRUE(all_close(grad(model)(ws, bs, x), std::get<0>(want), 1e-12, 1e-13));
}

// Needs batching rules of the elementwise, shape, reduction and dot
// primitives (written separately); enable once they are in.
TEST(Checkpoint, Vmap) {
  auto block = checkpoint(mlp, RematPolicy::dots_saveable);
  ArrayFn f = [&](const std::vector<Array>& a) { return block(a[0], a[1]); };
  Array x = random_array({2, 3}, DType::f64, 57), w = random_array({3, 3}, DType::f64, 58);
  EXPECT_TRUE(check_vmap(f, {x, w}, {0, std::nullopt}, 3, 1e-13));
  // Per-example gradients through the checkpoint.
  ArrayFn g = [&](const std::vector<Array>& a) {
    return grad<1>([&](const Array& x, const Array& w) { return sum(block(x, w)); })(a[0], a[1]);
  };
  EXPECT_TRUE(check_vmap(g, {x, w}, {0, std::nullopt}, 3, 1e-12));
}

}  // namespace
}  // namespace pax

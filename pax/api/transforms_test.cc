// grad / value_and_grad / vjp / jvp / jit / eval_shape /
// stop_gradient / custom_vjp: results against hand-derived values, the
// compositions the design promises, and the error messages.
#include "pax/api/transforms.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::all_close;

Array cube_sum(const Array& x) { return sum(x * x * x); }

TEST(Grad, MatchesHandDerivatives) {
  Array x = array<double>({1, -2, 3});
  EXPECT_TRUE(all_close(grad(cube_sum)(x), {3, 12, 27}));
  auto [v, g] = value_and_grad(cube_sum)(x);
  EXPECT_DOUBLE_EQ(v.item<double>(), 1 - 8 + 27);
  EXPECT_TRUE(all_close(g, {3, 12, 27}));
  // f32 and bf16 work too (bf16 at bf16 precision).
  EXPECT_TRUE(all_close(grad(cube_sum)(x.astype(DType::f32)), {3, 12, 27}, 1e-6));
  EXPECT_TRUE(all_close(grad(cube_sum)(x.astype(DType::bf16)), {3, 12, 27}, 1e-2));
}

TEST(Grad, TreesArgnumsAndAux) {
  Tree params = Tree::dict({{"w", array<double>({1, 2}, {2, 1})}, {"b", scalar(0.5)}});
  Array xs = array<double>({3, 4}, {1, 2});
  auto loss = [](const Tree& p, const Array& x) {
    Array y = matmul(x, p["w"].leaf()) + p["b"].leaf();  // [1, 1]
    return sum(y * y);
  };
  // y = 3 + 8 + 0.5 = 11.5; dL/dw = 2 y x^T, dL/db = 2 y.
  Tree g = grad(loss)(params, xs);
  EXPECT_TRUE(all_close(g["w"].leaf(), {69, 92}));
  EXPECT_TRUE(all_close(g["b"].leaf(), {23}));
  auto [gp, gx] = grad<0, 1>(loss)(params, xs);
  EXPECT_TRUE(all_close(gx, {23, 46}));
  EXPECT_EQ(gx.shape(), (Shape{1, 2}));
  Array gx_only = grad<1>(loss)(params, xs);
  EXPECT_TRUE(all_close(gx_only, gx));
  auto with_aux = [](const Array& x) { return std::make_pair(sum(x * x), x * 2.0); };
  auto [value_aux, gaux] = value_and_grad(with_aux, has_aux)(array<double>({1, 2}));
  auto [value, aux] = value_aux;
  EXPECT_DOUBLE_EQ(value.item<double>(), 5);
  EXPECT_TRUE(all_close(aux, {2, 4}));
  EXPECT_TRUE(all_close(gaux, {2, 4}));
  auto [g2, aux2] = grad(with_aux, has_aux)(array<double>({1, 2}));
  EXPECT_TRUE(all_close(g2, {2, 4}));
  EXPECT_TRUE(all_close(aux2, {2, 4}));
}

TEST(Grad, HigherOrderAndControlFlow) {
  auto f = [](const Array& x) { return sum(sin(x) * x); };
  auto df = grad(f);
  auto ddf = grad([&](const Array& x) { return sum(df(x)); });
  Array x = array<double>({0.3, 1.7});
  // f' = cos x * x + sin x; f'' = -sin x * x + 2 cos x.
  EXPECT_TRUE(all_close(df(x), {std::cos(0.3) * 0.3 + std::sin(0.3), std::cos(1.7) * 1.7 + std::sin(1.7)}, 1e-12));
  EXPECT_TRUE(
      all_close(ddf(x), {-std::sin(0.3) * 0.3 + 2 * std::cos(0.3), -std::sin(1.7) * 1.7 + 2 * std::cos(1.7)}, 1e-12));
  // Third order of x^4 at 2: 24 * 2 = 48.
  auto p4 = [](const Array& x) { return sum(x * x * x * x); };
  auto d3 = grad([&](const Array& x) { return sum(grad([&](const Array& y) { return sum(grad(p4)(y)); })(x)); });
  EXPECT_TRUE(all_close(d3(array<double>({2})), {48}, 1e-12));
  // Value-dependent C++ control flow works outside jit.
  auto relu_ish = [](const Array& x) { return x.item<double>() > 0 ? sum(x * x) : sum(x * 3.0); };
  EXPECT_TRUE(all_close(grad(relu_ish)(scalar(2.0)), {4}));
  EXPECT_TRUE(all_close(grad(relu_ish)(scalar(-2.0)), {3}));
}

TEST(Grad, ErrorsAreClear) {
  EXPECT_PAX_ERROR(grad([](const Array& x) { return x * 2.0; })(array<double>({1, 2})),
                   "grad: the function must return a scalar floating array, got f64[2]");
  EXPECT_PAX_ERROR(grad([](const Array& x) { return sum(x.astype(DType::f32)); })(array<int32_t>({1, 2})),
                   "cannot differentiate with respect to an input of dtype int32");
  // A traced value that escapes its transformation is detected when used.
  Array leaked;
  grad([&](const Array& x) {
    leaked = x;
    return sum(x);
  })(array<double>({1}));
  EXPECT_PAX_ERROR(leaked + 1.0, "escaped its transformation");
}

TEST(Grad, SkipsCotangentsNobodyNeeds) {
  // d/dw of sum(x @ w) needs x^T g only; the cotangent of x is never formed.
  auto f = [](const Array& x, const Array& w) { return sum(matmul(x, w)); };
  auto count_dots = [](const Jaxpr& j) {
    int n = 0;
    for (const Eqn& e : j.eqns) n += e.prim == Prim::dot_general;
    return n;
  };
  Array x = ones({4, 3}), w = ones({3, 2});
  EXPECT_EQ(count_dots(*make_jaxpr(grad<1>(f))(x, w)), 2);
  EXPECT_EQ(count_dots(*make_jaxpr(grad<0, 1>(f))(x, w)), 3);
}

TEST(Vjp, MultipleInputsAndCotangentChecks) {
  auto f = [](const Array& a, const Array& b) { return a * b + sin(a); };
  Array a = array<double>({0.5, 1.0}), b = array<double>({2, 3});
  auto [out, back] = vjp(f, a, b);
  EXPECT_TRUE(all_close(out, {0.5 * 2 + std::sin(0.5), 3 + std::sin(1.0)}));
  auto [ga, gb] = back(array<double>({1, 10}));
  EXPECT_TRUE(all_close(ga, {2 + std::cos(0.5), 10 * (3 + std::cos(1.0))}));
  EXPECT_TRUE(all_close(gb, {0.5, 10}));
  EXPECT_PAX_ERROR(back(array<double>({1, 2, 3})), "does not match the output");
}

TEST(Jvp, ForwardModeAndHessianVectorProduct) {
  auto [y, t] = jvp([](const Array& x) { return sin(x) * x; }, array<double>({0.5}), array<double>({2.0}));
  EXPECT_TRUE(all_close(y, {std::sin(0.5) * 0.5}));
  EXPECT_TRUE(all_close(t, {2.0 * (std::cos(0.5) * 0.5 + std::sin(0.5))}));
  // Hessian-vector product of f(x) = sum(x^3 + x0*x1): H = diag(6x) + offdiag 1.
  auto f = [](const Array& x) { return sum(x * x * x) + sum(slice_along(x, 0, 0, 1) * slice_along(x, 0, 1, 2)); };
  Array x = array<double>({1, 2}), v = array<double>({1, -1});
  auto [g, hv] = jvp(grad(f), x, v);
  EXPECT_TRUE(all_close(g, {3 + 2, 12 + 1}));
  EXPECT_TRUE(all_close(hv, {6 * 1 - 1, 1 - 12}));
}

TEST(Jit, MatchesEagerAndCaches) {
  int calls = 0;
  auto f = [&calls](const Array& x, const Array& y) {
    ++calls;
    return nn::relu(x * y + 1.0) - exp(x);
  };
  auto jf = jit(f);
  Array x = array<float>({-1, 0.5, 2}), y = array<float>({3, -4, 0.25});
  EXPECT_TRUE(all_close(jf(x, y), f(x, y), 0, 0));
  calls = 0;
  for (int i = 0; i < 100; ++i) jf(x, y);
  EXPECT_EQ(calls, 0);  // traced once for this signature
  EXPECT_EQ(jf.num_traces(), 1u);
  jf(array<float>({1, 2}), array<float>({1, 2}));  // new shape: a second trace
  EXPECT_EQ(jf.num_traces(), 2u);
  jf(x.astype(DType::f64), y.astype(DType::f64));  // new dtype: a third
  EXPECT_EQ(jf.num_traces(), 3u);
}

TEST(Jit, StaticArgumentsAndTrees) {
  auto f = [](const Tree& p, int power, const std::string& mode) {
    Array x = p["x"].leaf();
    Array y = power == 2 ? x * x : x * x * x;
    return mode == "neg" ? -y : y;
  };
  auto jf = jit(f);
  Tree p = Tree::dict({{"x", array<float>({2})}});
  EXPECT_TRUE(all_close(jf(p, 2, std::string("pos")), {4}));
  EXPECT_TRUE(all_close(jf(p, 3, std::string("pos")), {8}));
  EXPECT_TRUE(all_close(jf(p, 3, std::string("neg")), {-8}));
  EXPECT_EQ(jf.num_traces(), 3u);
  jf(p, 3, std::string("neg"));
  EXPECT_EQ(jf.num_traces(), 3u);
  EXPECT_PAX_ERROR(jit(f, {.static_argnums = {0}})(p, 2, std::string("pos")), "cannot be static");
}

TEST(Jit, ComposesWithGrad) {
  auto f = [](const Array& x) { return sum(tanh(x) * x); };
  Array x = array<double>({0.1, -0.7, 2.0});
  Array want = grad(f)(x);
  EXPECT_TRUE(all_close(jit(grad(f))(x), want, 1e-14));
  EXPECT_TRUE(all_close(grad(jit(f))(x), want, 1e-14));
  EXPECT_TRUE(all_close(jit(grad(jit(f)))(x), want, 1e-14));
  // A jitted function closing over a concrete array keeps it as a constant.
  Array w = array<double>({1, 2, 3});
  auto g = jit([w](const Array& v) { return sum(v * w); });
  EXPECT_TRUE(all_close(g(x), {0.1 - 1.4 + 6.0}, 1e-14));
  EXPECT_TRUE(all_close(grad(g)(x), {1, 2, 3}));
}

TEST(Jit, LowerExposesJaxprAndCost) {
  auto f = [](const Array& a, const Array& b) { return sum(matmul(a, b)); };
  auto lowered = jit(f).lower(zeros({4, 8}), zeros({8, 2}));
  EXPECT_NE(lowered.as_text().find("dot_general"), std::string::npos);
  EXPECT_GT(lowered.cost().flops, 0);
  EXPECT_GT(lowered.cost().bytes_accessed, 0);
  auto compiled = lowered.compile();
  EXPECT_TRUE(all_close(compiled(ones({4, 8}), ones({8, 2})), {64}));
  EXPECT_PAX_ERROR(compiled(ones({4, 8}), ones({8, 3})), "compiled for arguments");
}

TEST(EvalShape, HugeShapesAllocateNothing) {
  auto init = [](const Array& key) {
    Tree params;
    params["embedding"] = random::normal(key, {1000000, 4096});  // 16 GB as f32
    params["w"] = zeros({4096, 4096}, DType::bf16);
    return params;
  };
  const size_t before = host_allocator_stats().bytes_in_use;
  Tree shapes = eval_shape(init)(random::key(0));
  EXPECT_LT(host_allocator_stats().bytes_in_use, before + (1 << 20));
  EXPECT_EQ(shapes["embedding"].leaf().shape(), (Shape{1000000, 4096}));
  EXPECT_EQ(shapes["w"].leaf().dtype(), DType::bf16);
  std::ostringstream os;
  os << shapes["w"].leaf();
  EXPECT_EQ(os.str(), "ShapeDtypeStruct(shape=(4096, 4096), dtype=bfloat16)");
  EXPECT_PAX_ERROR(shapes["w"].leaf() + 1.0, "eval_shape");
}

TEST(StopGradient, BlocksGradients) {
  auto f = [](const Array& x) { return sum(x * stop_gradient(x)); };
  EXPECT_TRUE(all_close(grad(f)(array<double>({3, -1})), {3, -1}));
  Tree t = Tree::dict({{"a", array<double>({1})}});
  EXPECT_TRUE(stop_gradient(t)["a"].leaf().defined());
}

TEST(CustomVjp, JvpAndVmapGoThroughTheFunction) {
  // The custom rule (a deliberately different backward pass) is for reverse
  // mode only: jvp differentiates sin itself, vmap batches it.
  auto f = custom_vjp([](const Array& x) { return sin(x); }, [](const Array& x) { return std::make_pair(sin(x), x); },
                      [](const Array&, const Array& ct) { return ct * 100.0; });
  const Array x = array<double>({0.5, -1.0});
  auto [y, t] = jvp(f, x, array<double>({1.0, 2.0}));
  EXPECT_TRUE(all_close(y, {std::sin(0.5), std::sin(-1.0)}));
  EXPECT_TRUE(all_close(t, {std::cos(0.5), 2 * std::cos(-1.0)}));
  EXPECT_TRUE(
      all_close(vmap(f)(array<double>({0.5, -1.0, 2.0}, {3, 1})), {std::sin(0.5), std::sin(-1.0), std::sin(2.0)}));
  EXPECT_TRUE(all_close(grad([&](const Array& v) { return sum(f(v)); })(x), {100, 100}));
  // jit's program expands under each transformation too.
  auto [yj, tj] = jvp(jit(f), x, array<double>({1.0, 2.0}));
  EXPECT_TRUE(all_close(tj, {std::cos(0.5), 2 * std::cos(-1.0)}));
  EXPECT_TRUE(all_close(grad([&](const Array& v) { return sum(jit(f)(v)); })(x), {100, 100}));
}

TEST(CustomVjp, UsesTheUserBackwardPass) {
  // A "straight-through" rounding: forward rounds, backward passes 2 * ct.
  auto f = custom_vjp([](const Array& x) { return round(x); },
                      [](const Array& x) { return std::make_pair(round(x), x); },
                      [](const Array& residual, const Array& ct) { return ct * 2.0; });
  Array x = array<double>({0.4, 1.6});
  EXPECT_TRUE(all_close(f(x), {0, 2}));
  EXPECT_TRUE(all_close(grad([&](const Array& v) { return sum(f(v)); })(x), {2, 2}));
  EXPECT_TRUE(all_close(jit(grad([&](const Array& v) { return sum(f(v)); }))(x), {2, 2}));
  EXPECT_TRUE(all_close(grad(jit([&](const Array& v) { return sum(f(v)); }))(x), {2, 2}));
}

// grad of vmap keeps the user's backward pass (as JAX batches fwd and bwd),
// with a batched and an unbatched input, and a collective over the vmap axis
// inside bwd binds to that axis.
TEST(CustomVjp, VmapKeepsTheUserBackwardPass) {
  auto f = custom_vjp([](const Array& x, const Array& w) { return round(x) * w; },
                      [](const Array& x, const Array& w) { return std::make_pair(round(x) * w, w); },
                      [](const Array& w, const Array& ct) { return std::make_tuple(ct * w * 2.0, ct * 0.0); });
  const Array xs = array<double>({0.4, 1.6, -2.2}, {3, 1});
  const Array w = array<double>({3.0});
  auto loss = [&](const Array& x) { return sum(vmap([&](const Array& xi) { return f(xi, w); }, {.in_axes = {0}})(x)); };
  EXPECT_TRUE(all_close(vmap([&](const Array& xi) { return f(xi, w); })(xs), {0, 6, -6}));
  EXPECT_TRUE(all_close(grad(loss)(xs), {6, 6, 6}));
  EXPECT_TRUE(all_close(jit(grad(loss))(xs), {6, 6, 6}));
  // Megatron's f: the identity forward, a psum over the axis backward.
  auto enter = custom_vjp([](const Array& x) { return x; },
                          [](const Array& x) { return std::make_pair(x, std::vector<Array>{}); },
                          [](const std::vector<Array>&, const Array& ct) { return lax::psum(ct, "m"); });
  const Array x = array<double>({1.0, 2.0});
  const Array scales = array<double>({1.0, 10.0, 100.0});
  auto members = [&](const Array& v) {  // the same x on every member, scaled by its own factor
    const Array copies = broadcast_to(reshape(v, {1, 2}), {3, 2});
    return sum(vmap([&](const Array& s, const Array& xi) { return sum(enter(xi) * s); },
                    {.in_axes = {0, 0}, .axis_name = "m"})(scales, copies));
  };
  // Each member's cotangent of x is the sum over members (111), and the
  // three members' summed: 333.
  EXPECT_TRUE(all_close(grad(members)(x), {333, 333}));
  // x unbatched (the same array on every member, not a copy per member):
  // enter's bwd still runs under the axis, so its psum binds.
  auto shared = [&](const Array& v) {
    return sum(vmap([&](const Array& s, const Array& xi) { return sum(enter(xi) * s); },
                    {.in_axes = {0, std::nullopt}, .axis_name = "m"})(scales, v));
  };
  EXPECT_TRUE(all_close(grad(shared)(x), {333, 333}));
}

}  // namespace
}  // namespace pax

namespace pax {
namespace {

TEST(Collectives, AllGatherIsDifferentiable) {
  // vmap over members: each member's gathered vector is the whole batch, so
  // d/dx_i sum_j sum(gathered_j * w) = B * w_i.
  Array x = testing::random_array({3, 2}, DType::f64, 5);
  Array w = testing::random_array({3, 2}, DType::f64, 6);
  auto f = [&](const Array& xs) {
    auto per_member = vmap([&](const Array& xi) { return sum(lax::all_gather(xi, "b") * w); }, {.axis_name = "b"});
    return sum(per_member(xs));
  };
  EXPECT_TRUE(testing::all_close(grad(f)(x), w * 3.0, 1e-12));
  EXPECT_TRUE(testing::check_vjp([&](const std::vector<Array>& a) { return f(a[0]); }, {x}));
}

// An all_gather over an outer vmap axis inside an inner one gathers per
// element of the inner axis, at any position of the inner batch dimension,
// tiled or not.
TEST(Collectives, AllGatherOverAnOuterAxisInsideAnInnerVmap) {
  const Array x = testing::random_array({2, 3, 4}, DType::f64, 7);  // (outer "a", inner "b", 4)
  for (bool tiled : {false, true}) {
    for (int64_t axis : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "tiled " << tiled << ", axis " << axis);
      auto member = [&](const Array& xi) {  // (4,) -> (2, 4) / (8,) or (4, 2)
        const Array row = axis == 0 ? xi : reshape(xi, {4, 1});
        return lax::all_gather(row, "a", axis, tiled);
      };
      for (int64_t inner_axis : {0, 1}) {
        auto inner = [&](const Array& xa) {
          return vmap(member, {.in_axes = {inner_axis == 0 ? 0 : 1}, .out_axes = {0}, .axis_name = "b"})(
              inner_axis == 0 ? xa : transpose(xa));
        };
        const Array out = vmap(inner, {.in_axes = {0}, .axis_name = "a"})(x);  // (a, b, ...)
        for (int64_t i = 0; i < 2; ++i) {
          for (int64_t j = 0; j < 3; ++j) {
            std::vector<Array> rows;
            for (int64_t k = 0; k < 2; ++k) {
              const Array r = reshape(slice_along(slice_along(x, 0, k, k + 1), 1, j, j + 1), {4});
              rows.push_back(axis == 0 ? r : reshape(r, {4, 1}));
            }
            const Array want = tiled ? concatenate(rows, axis) : stack(rows, axis);
            const Array got = reshape(slice_along(slice_along(out, 0, i, i + 1), 1, j, j + 1), want.shape().dims());
            EXPECT_TRUE(testing::all_close(got, want, 0, 0)) << i << " " << j << " inner axis " << inner_axis;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pax

namespace pax {
namespace {

TEST(Compose, VmapJitGradInAnyOrder) {
  auto f = [](const Array& w, const Array& x) { return sum(tanh(x * w) * x); };
  Array w = testing::random_array({3}, DType::f64, 7);
  Array xs = testing::random_array({4, 3}, DType::f64, 8);
  // Per-example gradients with respect to w, four ways.
  std::vector<Array> loop;
  for (int64_t i = 0; i < 4; ++i) loop.push_back(grad(f)(w, reshape(slice_along(xs, 0, i, i + 1), {3})));
  Array want = stack(loop);
  VmapOptions per_example{{std::nullopt, 0}, {0}, ""};
  EXPECT_TRUE(testing::all_close(vmap(grad(f), per_example)(w, xs), want, 1e-12));
  EXPECT_TRUE(testing::all_close(vmap(jit(grad(f)), per_example)(w, xs), want, 1e-12));
  EXPECT_TRUE(testing::all_close(jit(vmap(grad(f), per_example))(w, xs), want, 1e-12));
  EXPECT_TRUE(testing::all_close(vmap(grad(jit(f)), per_example)(w, xs), want, 1e-12));
}

}  // namespace
}  // namespace pax

// psum_scatter over a vmap axis: reference values against a loop (the sum
// over the members, then member i's block), tiled and untiled, every scatter
// dimension, batch axes before and after it, shared operands and dtypes; the
// shape rule's errors; VJP and JVP by finite differences (and all_gather's
// VJP, now a psum_scatter); nested vmaps over either name; jit against eager;
// the compiled program keeping it as a step of its own.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::all_close;

// Member i's result: block i (of dimension k) of the members' sum, by loops
// over doubles. xs: [n, S...] (the members stacked on axis 0); the result
// [n, S'...] where S' is S with S[k] divided by n (tiled) or removed.
Array loop_reference(const Array& xs, int64_t k, bool tiled) {
  const int64_t n = xs.dim(0);
  const Shape member(Ints(xs.shape().dims().begin() + 1, xs.shape().dims().end()));
  k = k < 0 ? k + member.rank() : k;
  Ints out_dims = member.dims();
  if (tiled) {
    out_dims[size_t(k)] /= n;
  } else {
    out_dims.erase(out_dims.begin() + k);
  }
  const Shape out(out_dims);
  const std::vector<double> v = xs.to_vector<double>();
  std::vector<double> result;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t flat = 0; flat < out.numel(); ++flat) {
      std::vector<int64_t> idx = testing::unravel(flat, out);
      if (tiled) {
        idx[size_t(k)] += i * out[k];
      } else {
        idx.insert(idx.begin() + k, i);
      }
      double total = 0;
      for (int64_t j = 0; j < n; ++j) total += v[size_t(j * member.numel() + testing::ravel(idx, member))];
      result.push_back(total);
    }
  }
  out_dims.insert(out_dims.begin(), n);
  return array(result, Shape(out_dims));
}

// vmap over the members (stacked on axis `in_axis`) of psum_scatter over them.
Array scatter_members(const Array& xs, int64_t k, bool tiled, int64_t in_axis = 0) {
  return vmap([&](const Array& e) { return lax::psum_scatter(e, "i", k, tiled); },
              {.in_axes = {in_axis}, .axis_name = "i"})(xs);
}

TEST(PsumScatter, MatchesTheSumThenTheMembersBlockUnderVmap) {
  const int64_t n = 3;
  for (bool tiled : {true, false}) {
    for (int64_t k : {0, 1, 2, -1}) {
      // Tiled: every dimension a multiple of n; untiled: dimension k of size n.
      Ints member = tiled ? Ints{6, 3, 9} : Ints{2, 4, 5};
      if (!tiled) member[size_t(k < 0 ? k + 3 : k)] = n;
      Ints stacked = member;
      stacked.insert(stacked.begin(), n);
      Array xs = testing::random_array(Shape(stacked), DType::f64, uint32_t(10 + k));
      Array want = loop_reference(xs, k, tiled);
      SCOPED_TRACE(::testing::Message() << "tiled " << tiled << " k " << k);
      EXPECT_TRUE(all_close(scatter_members(xs, k, tiled), want, 1e-14, 1e-14));
      // The members stacked after dimension 1 of the operand (batch axis 2).
      EXPECT_TRUE(all_close(scatter_members(moveaxis(xs, 0, 2), k, tiled, 2), want, 1e-14, 1e-14));
    }
  }
}

TEST(PsumScatter, DtypesAndSharedOperands) {
  const int64_t n = 4;
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(dt));
    // Small integers: exact in every dtype, whatever the summation order.
    Array xs = floor(testing::random_array({n, 8, 3}, DType::f64, 21, -8, 8)).astype(dt);
    Array got = scatter_members(xs, 0, true);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_TRUE(all_close(got, loop_reference(xs, 0, true), 0, 0));
  }
  // An operand every member shares sums to n times itself.
  Array shared = array<float>({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  Array got = vmap([&](const Array& e) { return e + lax::psum_scatter(shared, "i", 0, true); },
                   {.axis_name = "i"})(zeros({n, 2}));
  EXPECT_TRUE(all_close(got, {4, 8, 12, 16, 20, 24, 28, 32}, 0, 0));
  Array untiled = vmap(
      [&](const Array& e) {
        return e + lax::psum_scatter(reshape(shared, {4, 2}), "i", 0);
      },
      {.axis_name = "i"})(zeros({n, 2}));
  EXPECT_TRUE(all_close(untiled, {4, 8, 12, 16, 20, 24, 28, 32}, 0, 0));
}

TEST(PsumScatter, ShapeErrorsNameTheShapeAxisSizeAndDimension) {
  Array xs = zeros({3, 4, 6});
  EXPECT_PAX_ERROR(scatter_members(xs, 0, true),
                   "psum_scatter: dimension 0 of f32[4,6] has size 4, not a multiple of the size 3 of axis 'i'");
  EXPECT_PAX_ERROR(scatter_members(xs, 1, false),
                   "psum_scatter: dimension 1 of f32[4,6] has size 6, not the size 3 of axis 'i'");
  EXPECT_PAX_ERROR(scatter_members(xs, 2, true), "psum_scatter");
  EXPECT_PAX_ERROR(scatter_members(zeros({3}), 0, true), "rank >= 1");
  EXPECT_PAX_ERROR(scatter_members(zeros({3, 3}).astype(DType::bool_), 0, true), "psum_scatter");
  EXPECT_PAX_ERROR(lax::psum_scatter(zeros({2}), "nowhere"), "unbound axis name 'nowhere'");
}

// The members' stacked operands to their stacked results, as a function of
// one array (for the finite-difference checks).
testing::ArrayFn scattered(int64_t k, bool tiled) {
  return [=](const std::vector<Array>& a) { return scatter_members(a[0] * a[0], k, tiled); };
}

TEST(PsumScatter, VjpAndJvpByFiniteDifferences) {
  for (bool tiled : {true, false}) {
    for (int64_t k : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "tiled " << tiled << " k " << k);
      Array xs = testing::random_array({2, 2, tiled ? 4 : 2}, DType::f64, uint32_t(30 + k));
      if (tiled && k == 0) xs = testing::random_array({2, 4, 3}, DType::f64, 33);
      EXPECT_TRUE(testing::check_vjp(scattered(k, tiled), {xs}));
      EXPECT_TRUE(testing::check_jvp(scattered(k, tiled), {xs}));
      EXPECT_TRUE(testing::check_vjp_order2(scattered(k, tiled), {xs}));
    }
  }
}

// all_gather's VJP is psum_scatter: checked by finite differences, and its
// backward program holds a psum_scatter, not a psum and a slice.
TEST(PsumScatter, IsAllGathersTranspose) {
  for (bool tiled : {true, false}) {
    for (int64_t k : {0, 1, -1}) {
      if (tiled && k < 0) continue;  // all_gather counts a negative axis in its output's rank + 1
      SCOPED_TRACE(::testing::Message() << "tiled " << tiled << " k " << k);
      auto gathered = [=](const std::vector<Array>& a) {
        return vmap([&](const Array& e) { return sin(lax::all_gather(e, "i", k, tiled)); }, {.axis_name = "i"})(a[0]);
      };
      Array xs = testing::random_array({3, 2, 4}, DType::f64, uint32_t(40 + k));
      EXPECT_TRUE(testing::check_vjp(gathered, {xs}));
      EXPECT_TRUE(testing::check_jvp(gathered, {xs}));
    }
  }
  const Array w = testing::random_array({4, 3}, DType::f32, 44);
  auto back = make_jaxpr(grad([&](const Array& x) { return sum(lax::all_gather(x, "processes", 0, true) * w); }))(
      zeros({4 / axis_size("processes"), 3}));
  int scatters = 0;
  for (const Eqn& e : back->eqns) {
    scatters += e.prim == Prim::psum_scatter;
    EXPECT_NE(e.prim, Prim::psum) << back->str();
    EXPECT_NE(e.prim, Prim::dynamic_slice) << back->str();
  }
  EXPECT_EQ(scatters, 1) << back->str();
}

// grad inside vmap takes the collectives' own VJPs (outside, vmap expands
// them first): each member's gradient collects every member's dependence on
// its input, i.e. the gradient of the members' total, which the
// finite-difference checks above validate.
TEST(PsumScatter, VjpRulesUnderVmapMatchTheGradientOfTheTotal) {
  for (bool tiled : {true, false}) {
    for (int64_t k : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "tiled " << tiled << " k " << k);
      Array xs = testing::random_array({3, 3, tiled ? 6 : 3}, DType::f64, uint32_t(70 + k));
      const Ints out_shape = scatter_members(xs, k, tiled).shape().dims();
      Array ws = testing::random_array(Shape(out_shape), DType::f64, 72);
      auto scatter = [=](const Array& e, const Array& w) { return sum(sin(lax::psum_scatter(e, "i", k, tiled)) * w); };
      Array per_member = vmap(grad(scatter), {.axis_name = "i"})(xs, ws);
      auto total = [&](const Array& x) { return sum(vmap(scatter, {.axis_name = "i"})(x, ws)); };
      EXPECT_TRUE(all_close(per_member, grad(total)(xs), 1e-12, 1e-12));
      // all_gather's VJP (a psum_scatter) the same way.
      Array gs = testing::random_array(
          Shape(
              vmap([&](const Array& e) { return lax::all_gather(e, "i", k, tiled); }, {.axis_name = "i"})(xs).shape()),
          DType::f64, 73);
      auto gather = [=](const Array& e, const Array& w) { return sum(sin(lax::all_gather(e, "i", k, tiled)) * w); };
      Array gathered = vmap(grad(gather), {.axis_name = "i"})(xs, gs);
      auto gathered_total = [&](const Array& x) { return sum(vmap(gather, {.axis_name = "i"})(x, gs)); };
      EXPECT_TRUE(all_close(gathered, grad(gathered_total)(xs), 1e-12, 1e-12));
    }
  }
}

// vmap inside vmap: psum_scatter over the outer name is applied per element
// of the inner axis (whichever side of the scatter dimension its batch
// axis sits), over the inner name it reduces the inner axis.
TEST(PsumScatter, NestedVmapsAgainstALoop) {
  const int64_t ni = 2, nj = 3;
  Array xs = testing::random_array({ni, nj, 6, 4}, DType::f64, 50);  // [i, j, 6, 4]
  for (bool tiled : {true, false}) {
    for (int64_t inner_axis : {0, 1, 2}) {
      for (const char* name : {"i", "j"}) {
        const int64_t k = tiled ? 0 : 1;
        Array in = tiled ? xs : slice_along(xs, 3, 0, std::string(name) == "i" ? ni : nj);  // dim k: the axis size
        SCOPED_TRACE(::testing::Message() << "tiled " << tiled << " inner axis " << inner_axis << " over " << name);
        auto inner = vmap([&](const Array& e) { return lax::psum_scatter(e, name, k, tiled); },
                          {.in_axes = {inner_axis}, .axis_name = "j"});
        Array got = vmap([&](const Array& e) { return inner(moveaxis(e, 0, inner_axis)); }, {.axis_name = "i"})(in);
        // The loop: for each j over i's members, or for each i over j's.
        std::vector<Array> rows;
        if (std::string(name) == "i") {
          for (int64_t j = 0; j < nj; ++j)
            rows.push_back(loop_reference(squeeze(slice_along(in, 1, j, j + 1), {1}), k, tiled));
          EXPECT_TRUE(all_close(got, stack(rows, 1), 1e-14, 1e-14));
        } else {
          for (int64_t i = 0; i < ni; ++i)
            rows.push_back(loop_reference(squeeze(slice_along(in, 0, i, i + 1), {0}), k, tiled));
          EXPECT_TRUE(all_close(got, stack(rows, 0), 1e-14, 1e-14));
        }
      }
    }
  }
  // An unnamed vmap around a named one batches psum_scatter per element.
  EXPECT_TRUE(testing::check_vmap([](const std::vector<Array>& a) { return scatter_members(a[0], 1, true); },
                                  {testing::random_array({3, 2, 6}, DType::f64, 51)}, {2}, 4, 1e-14));
}

TEST(PsumScatter, JitMatchesEager) {
  Array xs = testing::random_array({3, 6, 5}, DType::f32, 60);
  for (bool tiled : {true, false}) {
    Array in = tiled ? xs : slice_along(xs, 2, 0, 3);
    EXPECT_TRUE(testing::check_jit(
        [=](const std::vector<Array>& a) { return exp(scatter_members(a[0] * 2.0, tiled ? 0 : 1, tiled)); }, {in}));
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(scattered(tiled ? 0 : 1, tiled), {in}), {in}, 1e-6));
    // vmap of a jitted member function: the jit_call is batched through its body.
    auto member = jit([=](const Array& e) { return lax::psum_scatter(e + 1.0, "i", tiled ? 0 : 1, tiled); });
    Array got = vmap([&](const Array& e) { return member(e); }, {.axis_name = "i"})(in);
    EXPECT_TRUE(all_close(got, loop_reference(in + 1.0, tiled ? 0 : 1, tiled), 1e-6, 1e-6));
  }
}

// Over the process axis the compiled program runs psum_scatter as a step of
// its own: the elementwise work before and after it is not fused into it, nor
// is it folded when its operand is a constant.
TEST(PsumScatter, CompiledProgramKeepsItAsACollectiveStep) {
  const int64_t p = axis_size("processes");
  auto f = [](const Array& x) {
    Array c = ones({4});
    return exp(lax::psum_scatter(tanh(x) * 2.0, "processes", 0, true)) + lax::psum_scatter(c, "processes", 0, true);
  };
  Array x = testing::random_array({4 * p}, DType::f32, 61);
  auto exe = compile(make_jaxpr(f)(x));
  const std::string s = exe->str();
  size_t steps = 0;
  for (size_t at = s.find("psum_scatter"); at != std::string::npos; at = s.find("psum_scatter", at + 1)) ++steps;
  EXPECT_EQ(steps, 2u) << s;
  EXPECT_TRUE(is_collective(Prim::psum_scatter));
  EXPECT_TRUE(all_close(jit(f)(x), f(x), 1e-6, 1e-6));
}

}  // namespace
}  // namespace pax

// The jaxpr passes one by one: inlining of nested jit, dead code, common
// subexpressions, constant folding (and its size threshold), algebraic
// simplification, hoisting. Each result must type-check and compute the same
// values.
#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/compile/passes/passes.h"
#include "pax/ops/lax.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

int count(const Jaxpr& j, Prim p) {
  int n = 0;
  for (const Eqn& e : j.eqns) n += e.prim == p;
  return n;
}

// The pass keeps the program well-typed and its values (exactly).
void expect_equivalent(const Jaxpr& before, const Jaxpr& after, const std::vector<Array>& args) {
  typecheck(after);
  std::vector<Array> want = eval_jaxpr(before, args);
  std::vector<Array> got = eval_jaxpr(after, args);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 0, 0)) << after.str();
}

TEST(Inline, SplicesNestedJitCalls) {
  auto inner = jit([](const Array& x) { return exp(x) * 2.0; });
  auto middle = jit([inner](const Array& x) { return inner(x) + inner(x * x); });
  auto jaxpr = make_jaxpr([middle](const Array& x) { return sum(middle(x) - 1.0); })(zeros({5}));
  ASSERT_EQ(count(*jaxpr, Prim::jit_call), 1);
  Jaxpr out = inline_calls(*jaxpr);
  EXPECT_EQ(count(out, Prim::jit_call), 0);
  EXPECT_EQ(count(out, Prim::exp), 2);
  expect_equivalent(*jaxpr, out, {random_array({5}, DType::f32, 1)});
}

TEST(Inline, CalleeReturningItsInput) {
  auto ident = jit([](const Array& x, const Array& y) { return std::make_pair(y, x * 3.0); });
  auto jaxpr = make_jaxpr([ident](const Array& x) {
    auto [a, b] = ident(x, x + 1.0);
    return a * b;
  })(zeros({3}));
  Jaxpr out = inline_calls(*jaxpr);
  EXPECT_EQ(count(out, Prim::jit_call), 0);
  expect_equivalent(*jaxpr, out, {random_array({3}, DType::f32, 2)});
}

TEST(Dce, DropsUnusedEquationsAndConstants) {
  Array unused = array<float>({1, 2, 3});
  auto jaxpr = make_jaxpr([unused](const Array& x) {
    Array dead = exp(x) + unused;  // never returned
    (void)dead;
    return x * 2.0;
  })(zeros({3}));
  ASSERT_EQ(count(*jaxpr, Prim::exp), 1);
  Jaxpr out = dce(*jaxpr);
  EXPECT_EQ(count(out, Prim::exp), 0);
  EXPECT_EQ(count(out, Prim::add), 0);
  for (const Array& c : out.consts) EXPECT_NE(c.id(), unused.id());
  expect_equivalent(*jaxpr, out, {random_array({3}, DType::f32, 3)});
}

TEST(Cse, MergesEqualEquationsOnly) {
  auto jaxpr = make_jaxpr([](const Array& x, const Array& y) {
    Array a = lax::mul(x, y);
    Array b = lax::mul(x, y);
    Array c = lax::mul(y, x);  // other input order: kept
    Array r0 = lax::reduce_sum(a, {0});
    Array r1 = lax::reduce_sum(b, {1});  // other params: kept
    return std::make_pair(lax::add(r0, r1), lax::add(a, c));
  })(zeros({4, 4}), zeros({4, 4}));
  Jaxpr out = dce(cse(*jaxpr));
  EXPECT_EQ(count(out, Prim::mul), 2);
  EXPECT_EQ(count(out, Prim::reduce_sum), 2);
  expect_equivalent(*jaxpr, out, {random_array({4, 4}, DType::f32, 4), random_array({4, 4}, DType::f32, 5)});
}

TEST(Cse, MergesEqualLiteralConstants) {
  // Each literal is its own constant when traced; equal values merge, and
  // then so do the broadcasts of them.
  auto jaxpr = make_jaxpr([](const Array& x, const Array& y) { return x * 0.5 + y * 0.5; })(zeros({8}), zeros({8}));
  ASSERT_EQ(jaxpr->consts.size(), 2u);
  Jaxpr out = dce(cse(*jaxpr));
  EXPECT_EQ(out.consts.size(), 1u);
  EXPECT_EQ(count(out, Prim::broadcast_in_dim), 1);
  expect_equivalent(*jaxpr, out, {random_array({8}, DType::f32, 6), random_array({8}, DType::f32, 7)});
}

TEST(Cse, RandomBitsOfTheSameKeyMerge) {
  auto jaxpr = make_jaxpr([](const Array& key) {
    return lax::add(lax::random_bits(key, {16}), lax::random_bits(key, {16}));
  })(zeros({2}, DType::u32));
  EXPECT_EQ(count(dce(cse(*jaxpr)), Prim::random_bits), 1);
}

TEST(Fold, EvaluatesConstantSubexpressions) {
  Array w = array<float>({0.5, -1, 2});
  auto jaxpr = make_jaxpr([w](const Array& x) { return x + exp(w) * 3.0; })(zeros({3}));
  Jaxpr out = dce(fold_constants(*jaxpr));
  EXPECT_EQ(count(out, Prim::exp), 0);
  EXPECT_EQ(count(out, Prim::mul), 0);
  EXPECT_EQ(out.eqns.size(), 1u);  // the add
  expect_equivalent(*jaxpr, out, {random_array({3}, DType::f32, 8)});
}

TEST(Fold, LeavesLargeResultsToRunTime) {
  auto make = [](int64_t n) {
    Array w = random_array({n, n}, DType::f32, 9);
    return make_jaxpr([w](const Array& x) { return x * exp(w); })(zeros({n, n}));
  };
  // 200 * 200 = 40000 elements fold; 300 * 300 = 90000 exceed the default 65536.
  EXPECT_EQ(count(dce(fold_constants(*make(200))), Prim::exp), 0);
  EXPECT_EQ(count(dce(fold_constants(*make(300))), Prim::exp), 1);
  EXPECT_EQ(count(dce(fold_constants(*make(200), 1000)), Prim::exp), 1);
  auto small = make(200);
  expect_equivalent(*small, dce(fold_constants(*small)), {random_array({200, 200}, DType::f32, 10)});
}

TEST(Fold, BroadcastsOfConstantsStayForTheLoops) {
  auto jaxpr = make_jaxpr([](const Array& x) { return x * 2.0; })(zeros({4}));
  Jaxpr out = dce(fold_constants(*jaxpr));
  EXPECT_EQ(count(out, Prim::broadcast_in_dim), 1);
  ASSERT_EQ(out.consts.size(), 1u);
  EXPECT_EQ(out.consts[0].ndim(), 0);
}

TEST(Fold, IotaAndShapeOpsOfConstants) {
  auto jaxpr = make_jaxpr([](const Array& x) {
    Array i = lax::iota(DType::f32, {2, 3}, 1);
    return x + lax::transpose(lax::reshape(i, {3, 2}), {1, 0});
  })(zeros({2, 3}));
  Jaxpr out = dce(fold_constants(*jaxpr));
  EXPECT_EQ(out.eqns.size(), 1u);
  expect_equivalent(*jaxpr, out, {random_array({2, 3}, DType::f32, 10)});
}

TEST(Simplify, MultiplyByOneAndNeutralZeros) {
  auto jaxpr = make_jaxpr([](const Array& x, const Array& i) {
    Array a = x * 1.0;
    Array b = 1.0 * a;
    Array c = b - 0.0;                                                     // exact: x - (+0) == x
    Array d = lax::add(c, lax::broadcast_in_dim(scalar(-0.0f), {4}, {}));  // exact: x + (-0) == x
    Array e = d + 0.0;                                                     // not exact for x = -0: kept
    Array k = (i + 0) * 1 - 0;                                             // integers: all identities
    return std::make_pair(e, k);
  })(zeros({4}), zeros({4}, DType::i32));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_EQ(count(out, Prim::mul), 0);
  EXPECT_EQ(count(out, Prim::sub), 0);
  EXPECT_EQ(count(out, Prim::add), 1) << out.str();
  EXPECT_EQ(out.outvars[1], out.invars[1]);
  expect_equivalent(*jaxpr, out, {array<float>({-0.0f, 1.5f, -2.0f, NAN}), array<int32_t>({1, -2, 3, 0})});
}

TEST(Simplify, IdentityShapeOpsConvertsAndNegations) {
  auto jaxpr = make_jaxpr([](const Array& x) {
    Array a = lax::neg(lax::neg(x));
    Array b = lax::convert_element_type(a, DType::f32);
    Array c = lax::reshape(b, {2, 3});
    Array d = lax::transpose(c, {0, 1});
    Array e = lax::broadcast_in_dim(d, {2, 3}, {0, 1});
    Array f = lax::squeeze(lax::expand_dims(e, {0}), {0});
    Array g = lax::integer_pow(stop_gradient(f), 1);
    return lax::reduce_sum(lax::reshape(g, {2, 1, 3}), {1});
  })(zeros({2, 3}));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_TRUE(out.eqns.empty()) << out.str();
  EXPECT_EQ(out.outvars[0], out.invars[0]);
  expect_equivalent(*jaxpr, out, {random_array({2, 3}, DType::f32, 11)});
}

TEST(Simplify, ChainsCollapse) {
  auto jaxpr = make_jaxpr([](const Array& x) {
    Array r = lax::reshape(lax::reshape(lax::expand_dims(x, {0}), {6, 4}), {3, 8});
    Array t = lax::transpose(lax::transpose(lax::reshape(x, {2, 3, 4}), {2, 0, 1}), {2, 0, 1});
    Array b = lax::broadcast_in_dim(lax::broadcast_in_dim(lax::reshape(x, {24}), {2, 24}, {1}), {5, 2, 24}, {1, 2});
    return std::make_tuple(r, t, b);
  })(zeros({4, 6}));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_EQ(count(out, Prim::reshape), 3);  // x -> (3, 8), x -> (2, 3, 4), x -> (24)
  EXPECT_EQ(count(out, Prim::expand_dims), 0);
  EXPECT_EQ(count(out, Prim::transpose), 1);
  EXPECT_EQ(count(out, Prim::broadcast_in_dim), 1);
  expect_equivalent(*jaxpr, out, {random_array({4, 6}, DType::f32, 12)});
}

TEST(Simplify, TransposeBackToIdentity) {
  auto jaxpr = make_jaxpr([](const Array& x) {
    return lax::transpose(lax::transpose(x, {1, 2, 0}), {2, 0, 1});
  })(zeros({2, 3, 4}));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_TRUE(out.eqns.empty());
  expect_equivalent(*jaxpr, out, {random_array({2, 3, 4}, DType::f32, 13)});
}

TEST(Simplify, WholeSlicesAndEmptyPads) {
  auto jaxpr = make_jaxpr([](const Array& x) {
    Array whole = lax::slice(x, {0, 0}, {2, 3});
    Array same = lax::pad(whole, scalar(0.0f), {{0, 0, 0}, {0, 0, 0}});
    Array part = lax::slice(x, {0, 1}, {2, 3});                          // kept
    Array grown = lax::pad(part, scalar(0.0f), {{0, 0, 0}, {1, 0, 0}});  // kept
    Array shifted = lax::pad(x, scalar(0.0f), {{0, 0, 0}, {-1, 1, 0}});  // same shape, other values: kept
    return std::make_tuple(same, grown, shifted);
  })(zeros({2, 3}));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_EQ(out.outvars[0], out.invars[0]) << out.str();
  EXPECT_EQ(count(out, Prim::slice), 1);
  EXPECT_EQ(count(out, Prim::pad), 2);
  expect_equivalent(*jaxpr, out, {random_array({2, 3}, DType::f32, 14)});
}

// The gradient of a weight used in three slices (a combined QKV projection):
// three zero pads summed become one concatenate, with the bits of the sums
// (a -0.0 padded with +0.0 becomes +0.0); pads apart or along two axes stay.
TEST(Simplify, SummedPadsOfSideBySideSlabsBecomeOneConcatenate) {
  auto jaxpr = make_jaxpr([](const Array& q, const Array& k, const Array& v) {
    auto slab = [](const Array& a, int64_t at) {
      return lax::pad(a, scalar(0.0f), {{0, 0, 0}, {at, 2 - at, 0}, {0, 0, 0}});
    };
    return slab(k, 1) + slab(v, 2) + slab(q, 0);
  })(zeros({4, 1, 5}), zeros({4, 1, 5}), zeros({4, 1, 5}));
  const Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_EQ(count(out, Prim::pad), 0) << out.str();
  EXPECT_EQ(count(out, Prim::concatenate), 1) << out.str();
  const Array minus_zeros = lax::broadcast_in_dim(scalar(-0.0f), {4, 1, 5}, {});
  const std::vector<Array> args{minus_zeros, random_array({4, 1, 5}, DType::f32, 15),
                                random_array({4, 1, 5}, DType::f32, 16)};
  expect_equivalent(*jaxpr, out, args);
  const std::vector<float> want = eval_jaxpr(*jaxpr, args)[0].to_vector<float>(),
                           got = eval_jaxpr(out, args)[0].to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  EXPECT_FALSE(std::signbit(got[0]));  // -0.0 + +0.0

  auto kept = make_jaxpr([](const Array& a, const Array& b) {
    const Array apart =
        lax::pad(a, scalar(0.0f), {{0, 0, 0}, {0, 2, 0}}) + lax::pad(b, scalar(0.0f), {{0, 0, 0}, {2, 0, 0}});
    const Array two_axes =
        lax::pad(a, scalar(0.0f), {{1, 0, 0}, {0, 1, 0}}) + lax::pad(b, scalar(0.0f), {{0, 1, 0}, {1, 0, 0}});
    const Array one =
        lax::pad(a, scalar(1.0f), {{0, 0, 0}, {0, 1, 0}}) + lax::pad(b, scalar(0.0f), {{0, 0, 0}, {1, 0, 0}});
    // Zeros of two signs: the sum's padding is +0.0 and only a's -0.0 turn +0.0.
    const Array signs =
        lax::pad(a, scalar(-0.0f), {{0, 0, 0}, {0, 1, 0}}) + lax::pad(b, scalar(0.0f), {{0, 0, 0}, {1, 0, 0}});
    return std::make_tuple(apart, two_axes, one, signs);
  })(zeros({4, 1}), zeros({4, 1}));
  // -0.0 pads join without the + 0.0.
  auto minus = make_jaxpr([](const Array& a, const Array& b) {
    return lax::pad(a, scalar(-0.0f), {{0, 0, 0}, {0, 1, 0}}) + lax::pad(b, scalar(-0.0f), {{0, 0, 0}, {1, 0, 0}});
  })(zeros({4, 1}), zeros({4, 1}));
  const Jaxpr minus_out = dce(simplify(*minus));
  EXPECT_EQ(count(minus_out, Prim::concatenate), 1) << minus_out.str();
  EXPECT_EQ(count(minus_out, Prim::add), 0) << minus_out.str();
  const Array neg = lax::broadcast_in_dim(scalar(-0.0f), {4, 1}, {});
  const std::vector<Array> negs{neg, neg};
  EXPECT_TRUE(std::signbit(eval_jaxpr(minus_out, negs)[0].to_vector<float>()[0]));

  const Jaxpr same = dce(simplify(*kept));
  EXPECT_EQ(count(same, Prim::concatenate), 0) << same.str();
  expect_equivalent(*kept, same, {random_array({4, 1}, DType::f32, 17), random_array({4, 1}, DType::f32, 18)});
}

// Parameter casts emitted between two halves of a layer's elementwise work
// move to the start, so that the second half can join the first's loop.
TEST(Hoist, ComputationsOfInputsAloneMoveFirst) {
  auto jaxpr = make_jaxpr([](const Array& x, const Array& scale, const Array& step) {
    Array h = exp(x) * 2.0;                                  // (256, 512) activations: above the size limit
    Array s = scale.astype(DType::bf16).astype(DType::f32);  // (512,): hoisted
    Array c = step * 0.5;                                    // scalar: hoisted
    Array big = broadcast_to(scale, {256, 512}) + step;      // above the size limit: stays
    return std::make_tuple(h * s + c, big);
  })(zeros({256, 512}), zeros({512}), scalar(0.0f));
  Jaxpr out = hoist_input_computations(*jaxpr);
  ASSERT_EQ(out.eqns.size(), jaxpr->eqns.size());
  EXPECT_EQ(out.eqns[0].prim, Prim::convert_element_type) << out.str();
  EXPECT_EQ(out.eqns[1].prim, Prim::convert_element_type) << out.str();
  EXPECT_EQ(out.eqns[2].prim, Prim::mul) << out.str();
  EXPECT_EQ(out.eqns[3].prim, Prim::exp) << out.str();
  EXPECT_EQ(out.eqns.back().prim, Prim::add) << out.str();
  expect_equivalent(*jaxpr, out,
                    {random_array({256, 512}, DType::f32, 15), random_array({512}, DType::f32, 16), scalar(3.0f)});
}

TEST(Simplify, ConstantSelector) {
  auto jaxpr = make_jaxpr([](const Array& a, const Array& b, const Array& c) {
    Array hi = lax::select_n(scalar(int32_t(7)), {a, b, c});   // clamped to case 2
    Array lo = lax::select_n(scalar(int32_t(-3)), {a, b, c});  // clamped to case 0
    Array same = lax::select_n(lax::gt(a, b), {c, c});
    return std::make_tuple(hi, lo, same);
  })(zeros({4}), zeros({4}), zeros({4}));
  Jaxpr out = dce(simplify(*jaxpr));
  EXPECT_EQ(count(out, Prim::select_n), 0);
  EXPECT_EQ(out.outvars[0], out.invars[2]);
  EXPECT_EQ(out.outvars[1], out.invars[0]);
  EXPECT_EQ(out.outvars[2], out.invars[2]);
}

// A bf16 product the backend has no kernel for becomes converts around an f32
// product: the same bits as widening by hand, a weight read by two products
// widened once, and products the backend runs natively left alone.
TEST(Widen, SixteenBitProductsWithoutAKernelGoThroughF32) {
  auto f = [](const Array& x, const Array& w, const Array& y) {
    return std::make_tuple(matmul(x, w), lax::dot_general(y, w, {{1}, {1}, {}, {}}, DType::f32));  // x w, y wT
  };
  const std::vector<Array> args = {random_array({5, 8}, DType::bf16, 21), random_array({8, 8}, DType::bf16, 22),
                                   random_array({3, 8}, DType::bf16, 23)};
  auto jaxpr = make_jaxpr(f)(args[0], args[1], args[2]);
  const Jaxpr widened =
      optimize(*jaxpr, PassOptions{kDefaultFoldLimit, [](const Jaxpr&, const Eqn&) { return false; }});
  EXPECT_EQ(count(widened, Prim::dot_general), 2);
  EXPECT_EQ(count(widened, Prim::convert_element_type), 4) << widened;  // x, w (once), y, x w's result
  for (const Eqn& e : widened.eqns)
    if (e.prim == Prim::dot_general) EXPECT_EQ(widened.aval(e.inputs[0]).dtype, DType::f32) << widened;
  const std::vector<Array> got = eval_jaxpr(widened, args);
  const Array x = args[0].astype(DType::f32), w = args[1].astype(DType::f32), y = args[2].astype(DType::f32);
  EXPECT_EQ(got[0].dtype(), DType::bf16);
  EXPECT_TRUE(all_close(got[0], matmul(x, w).astype(DType::bf16), 0, 0));
  EXPECT_EQ(got[1].dtype(), DType::f32);
  EXPECT_TRUE(all_close(got[1], matmul(y, transpose(w)), 0, 0));

  const Jaxpr native = optimize(*jaxpr, PassOptions{kDefaultFoldLimit, [](const Jaxpr&, const Eqn&) { return true; }});
  EXPECT_EQ(count(native, Prim::convert_element_type), 0) << native;
}

// A product plus a bias broadcast along its leading dims becomes one
// dot_general with the bias as its third operand; other adds stay.
TEST(FoldBias, ALeadingBiasJoinsItsProduct) {
  const ProductBias always = [](const Jaxpr&, const Eqn&) { return true; };
  auto folded_count = [](const Jaxpr& j) {
    int n = 0;
    for (const Eqn& e : j.eqns) n += e.prim == Prim::dot_general && e.params.has("has_bias");
    return n;
  };
  const Array x = random_array({8, 16}, DType::f32, 1), w = random_array({16, 4, 2}, DType::f32, 2);
  const Array b = random_array({4, 2}, DType::f32, 3), r = random_array({8}, DType::f32, 4);
  auto project = [](const Array& x, const Array& w) { return lax::dot_general(x, w, {{1}, {0}, {}, {}}); };
  {
    auto jaxpr = make_jaxpr([&](const Array& x, const Array& w, const Array& b) { return project(x, w) + b; })(x, w, b);
    const Jaxpr out = dce(fold_bias_into_products(*jaxpr, always));
    EXPECT_EQ(folded_count(out), 1) << out.str();
    EXPECT_EQ(count(out, Prim::add), 0) << out.str();
    EXPECT_EQ(count(out, Prim::broadcast_in_dim), 0) << out.str();
    typecheck(out);
    const std::vector<Array> args{x, w, b};
    EXPECT_TRUE(all_close(eval_jaxpr(out, args)[0], eval_jaxpr(*jaxpr, args)[0], 1e-6, 1e-6));
    // The backend says no: nothing changes.
    const Jaxpr kept = fold_bias_into_products(*jaxpr, [](const Jaxpr&, const Eqn&) { return false; });
    EXPECT_EQ(folded_count(kept), 0);
  }
  // Through a reshape of the product's rows ([8, 4, 2] viewed as [2, 4, 4, 2]).
  {
    auto jaxpr = make_jaxpr([&](const Array& x, const Array& w, const Array& b) {
      return reshape(project(x, w), {2, 4, 4, 2}) + b;
    })(x, w, b);
    const Jaxpr out = dce(fold_bias_into_products(*jaxpr, always));
    EXPECT_EQ(folded_count(out), 1) << out.str();
    EXPECT_EQ(count(out, Prim::add), 0) << out.str();
    typecheck(out);
    const std::vector<Array> args{x, w, b};
    EXPECT_TRUE(all_close(eval_jaxpr(out, args)[0], eval_jaxpr(*jaxpr, args)[0], 1e-6, 1e-6));
    // A reshape that regroups the bias's dims: the add stays.
    auto regrouped = make_jaxpr([&](const Array& x, const Array& w, const Array& c) {
      return reshape(project(x, w), {8, 2, 4}) + c;
    })(x, w, random_array({2, 4}, DType::f32, 6));
    EXPECT_EQ(folded_count(fold_bias_into_products(*regrouped, always)), 0);
  }
  // The product read twice; a bias along the rows (leading dims); a bias
  // over lhs free dims too: the adds stay.
  auto twice = make_jaxpr([&](const Array& x, const Array& w, const Array& b) {
    const Array y = project(x, w);
    return (y + b) * y;
  })(x, w, b);
  EXPECT_EQ(folded_count(fold_bias_into_products(*twice, always)), 0);
  auto rows = make_jaxpr([&](const Array& x, const Array& w, const Array& r) {
    return project(x, w) + lax::broadcast_in_dim(r, {8, 4, 2}, {0});
  })(x, w, r);
  EXPECT_EQ(folded_count(fold_bias_into_products(*rows, always)), 0);
  const Array full_bias = random_array({8, 4, 2}, DType::f32, 5);
  auto full =
      make_jaxpr([&](const Array& x, const Array& w, const Array& c) { return project(x, w) + c; })(x, w, full_bias);
  EXPECT_EQ(folded_count(fold_bias_into_products(*full, always)), 0);
}

// A product times an array of its result's shape (directly or through a
// reshape) becomes one dot_general with the array as its multiplier; a
// product read twice, or a multiplier that broadcasts, stays.
TEST(FoldMultiplier, ASameShapedFactorJoinsItsProduct) {
  const ProductEpilogue always = [](const Jaxpr&, const Eqn&) { return true; };
  auto folded_count = [](const Jaxpr& j) {
    int n = 0;
    for (const Eqn& e : j.eqns) n += e.prim == Prim::dot_general && e.params.has("has_multiplier");
    return n;
  };
  const Array x = random_array({8, 16}, DType::f32, 1), w = random_array({16, 6}, DType::f32, 2);
  const Array g = random_array({8, 6}, DType::f32, 3), g3 = random_array({2, 4, 6}, DType::f32, 4);
  const Array row = random_array({6}, DType::f32, 5);
  auto check_folded = [&](const Jaxpr& jaxpr, const std::vector<Array>& args) {
    const Jaxpr out = dce(fold_multipliers_into_products(jaxpr, always));
    EXPECT_EQ(folded_count(out), 1) << out.str();
    EXPECT_EQ(count(out, Prim::mul), 0) << out.str();
    typecheck(out);
    EXPECT_TRUE(all_close(eval_jaxpr(out, args)[0], eval_jaxpr(jaxpr, args)[0], 1e-6, 1e-6));
    EXPECT_EQ(folded_count(fold_multipliers_into_products(jaxpr, [](const Jaxpr&, const Eqn&) { return false; })), 0);
  };
  // m * (x . w), the factor first.
  check_folded(*make_jaxpr([](const Array& x, const Array& w, const Array& g) { return g * matmul(x, w); })(x, w, g),
               {x, w, g});
  // Through a reshape of the product, with the factor computed after it.
  check_folded(*make_jaxpr([](const Array& x, const Array& w, const Array& g) {
    return reshape(matmul(x, w), {2, 4, 6}) * exp(g);
  })(x, w, g3),
               {x, w, g3});
  auto twice = make_jaxpr([](const Array& x, const Array& w, const Array& g) {
    const Array y = matmul(x, w);
    return y * g + y;
  })(x, w, g);
  EXPECT_EQ(folded_count(fold_multipliers_into_products(*twice, always)), 0);
  auto broadcast =
      make_jaxpr([](const Array& x, const Array& w, const Array& r) { return matmul(x, w) * r; })(x, w, row);
  EXPECT_EQ(folded_count(fold_multipliers_into_products(*broadcast, always)), 0);
  auto squared = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    return y * y;
  })(x, w);
  EXPECT_EQ(folded_count(fold_multipliers_into_products(*squared, always)), 0);
}

// A ReLU of a product becomes one dot_general with has_relu; its backward's
// mask reads the ReLU's result instead of the product, and the gradients
// stay those of the unfolded program. A product read twice, a ReLU of
// another value, or a comparison with another bound stays.
TEST(FoldRelu, AReLUOfAProductJoinsItsProduct) {
  const ProductEpilogue always = [](const Jaxpr&, const Eqn&) { return true; };
  auto folded_count = [](const Jaxpr& j) {
    int n = 0;
    for (const Eqn& e : j.eqns) n += e.prim == Prim::dot_general && e.params.has("has_relu");
    return n;
  };
  const Array x = random_array({8, 16}, DType::f32, 1), w = random_array({16, 6}, DType::f32, 2);
  const Array b = random_array({6}, DType::f32, 3), g = random_array({8, 6}, DType::f32, 4);
  {
    auto jaxpr = make_jaxpr([](const Array& x, const Array& w) { return nn::relu(matmul(x, w)); })(x, w);
    const Jaxpr out = dce(fold_relus_into_products(*jaxpr, always));
    EXPECT_EQ(folded_count(out), 1) << out.str();
    EXPECT_EQ(count(out, Prim::select_n), 0) << out.str();
    EXPECT_EQ(count(out, Prim::le), 0) << out.str();
    typecheck(out);
    const std::vector<Array> args{x, w};
    EXPECT_TRUE(all_close(eval_jaxpr(out, args)[0], eval_jaxpr(*jaxpr, args)[0], 1e-6, 1e-6));
    EXPECT_EQ(folded_count(fold_relus_into_products(*jaxpr, [](const Jaxpr&, const Eqn&) { return false; })), 0);
  }
  // Through a reshape of the product.
  {
    auto jaxpr = make_jaxpr([](const Array& x, const Array& w) {
      return nn::relu(reshape(matmul(x, w), {2, 4, 6}));
    })(x, w);
    const Jaxpr out = dce(fold_relus_into_products(*jaxpr, always));
    EXPECT_EQ(folded_count(out), 1) << out.str();
    EXPECT_EQ(count(out, Prim::select_n), 0) << out.str();
    typecheck(out);
    const std::vector<Array> args{x, w};
    EXPECT_TRUE(all_close(eval_jaxpr(out, args)[0], eval_jaxpr(*jaxpr, args)[0], 1e-6, 1e-6));
  }
  // A layer's forward and backward, its bias folded first (as lower() does).
  auto loss = [](const Array& x, const Array& w, const Array& b, const Array& g) {
    return sum(nn::relu(matmul(x, w) + b) * g);
  };
  auto step = make_jaxpr([&](const Array& x, const Array& w, const Array& b, const Array& g) {
    auto [l, grads] = value_and_grad<0, 1, 2>(loss)(x, w, b, g);
    return std::make_tuple(l, std::get<0>(grads), std::get<1>(grads), std::get<2>(grads));
  })(x, w, b, g);
  const Jaxpr plain = optimize(*step);
  const Jaxpr biased = dce(fold_bias_into_products(plain, always));
  const Jaxpr out = dce(fold_relus_into_products(biased, always));
  EXPECT_EQ(folded_count(out), 1) << out.str();
  EXPECT_EQ(count(out, Prim::le), 1) << out.str();  // the mask, of the ReLU's result
  typecheck(out);
  const std::vector<Array> args{x, w, b, g};
  const std::vector<Array> want = eval_jaxpr(plain, args), got = eval_jaxpr(out, args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-5, 1e-5)) << i;
  // Not folded.
  auto twice = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    return nn::relu(y) + y;
  })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*twice, always)), 0);
  auto of_exp = make_jaxpr([](const Array& x, const Array& w) { return nn::relu(exp(matmul(x, w))); })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*of_exp, always)), 0);
  auto clipped = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    return where(y <= 1.0, zeros_like(y), y);
  })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*clipped, always)), 0);
  // A fill of -0.0 is not the ReLU the kernel computes (+0.0).
  auto negative_zero = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    return where(y <= 0.0, full_like(y, -0.0), y);
  })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*negative_zero, always)), 0);
  // The mask read before the ReLU (its le(y, 0) would come too late), or
  // returned: kept.
  auto mask_first = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    const Array m = y <= 0.0;
    const Array early = where(m, full_like(y, 1.0), full_like(y, 2.0));
    return early + where(m, zeros_like(y), y);
  })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*mask_first, always)), 0);
  auto mask_out = make_jaxpr([](const Array& x, const Array& w) {
    const Array y = matmul(x, w);
    const Array m = y <= 0.0;
    return std::make_tuple(where(m, zeros_like(y), y), m);
  })(x, w);
  EXPECT_EQ(folded_count(fold_relus_into_products(*mask_out, always)), 0);
  // A product that already has a multiplier keeps its ReLU loop.
  auto multiplied =
      make_jaxpr([](const Array& x, const Array& w, const Array& g) { return nn::relu(matmul(x, w) * g); })(x, w, g);
  const Jaxpr with_multiplier = dce(fold_multipliers_into_products(*multiplied, always));
  EXPECT_EQ(count(with_multiplier, Prim::mul), 0) << with_multiplier.str();
  EXPECT_EQ(folded_count(fold_relus_into_products(with_multiplier, always)), 0);
}

TEST(Optimize, TrainingStepTypechecksAfterEveryPass) {
  // An MLP loss and its gradient: every pass runs on a realistic program.
  auto loss = [](const Array& w1, const Array& w2, const Array& x) {
    Array h = nn::relu(matmul(x, w1) + 0.1);
    return mean(square(matmul(h, w2) - 1.0));
  };
  auto step = [loss](const Array& w1, const Array& w2, const Array& x) {
    auto [l, g] = value_and_grad<0, 1>(loss)(w1, w2, x);
    return std::make_tuple(l, w1 - 0.01 * std::get<0>(g), w2 - 0.01 * std::get<1>(g));
  };
  std::vector<Array> args = {random_array({8, 16}, DType::f32, 14), random_array({16, 4}, DType::f32, 15),
                             random_array({5, 8}, DType::f32, 16)};
  auto jaxpr = make_jaxpr(step)(args[0], args[1], args[2]);
  Jaxpr out = optimize(*jaxpr);
  EXPECT_LE(out.eqns.size(), jaxpr->eqns.size());
  std::vector<Array> want = eval_jaxpr(*jaxpr, args);
  std::vector<Array> got = eval_jaxpr(out, args);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-6, 1e-6));
}

}  // namespace
}  // namespace pax

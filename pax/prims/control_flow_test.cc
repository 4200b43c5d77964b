// The control-flow primitives at the primitive level: shape-rule errors for
// malformed equations, the residual outputs reverse mode uses (stacked
// carries of scan, kept matmul results of remat), and the jaxprs the rules
// produce type-checking.
#include "pax/prims/control_flow.h"

#include <gtest/gtest.h>

#include "pax/api/control_flow.h"
#include "pax/interp/vjp.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;

cf::ClosedFn traced(const FlatFn& f, std::vector<AVal> avals) { return cf::trace_closed(f, avals, "fn"); }

AVal f32(Shape s) { return AVal{std::move(s), DType::f32}; }

TEST(ControlFlowPrims, CondShapeRuleErrors) {
  cf::ClosedFn id = traced([](std::span<const Array> x) { return std::vector<Array>{x[0]}; }, {f32({3})});
  cf::ClosedFn sum3 = traced([](std::span<const Array> x) { return std::vector<Array>{sum(x[0])}; }, {f32({3})});
  std::vector<cf::ClosedFn> both{id, sum3};
  std::vector<Array> op{zeros({3})};
  EXPECT_PAX_ERROR(cf::cond(scalar(int32_t(0)), both, op),
                   "cond: branch 0 returns (f32[3]) but branch 1 returns (f32[]); every branch must return the same");
  std::vector<cf::ClosedFn> one{id};
  EXPECT_PAX_ERROR(cf::cond(scalar(0.0f), one, op),
                   "cond: the index (operand 0) must be an int32 scalar or a bool predicate, got f32[]");
  EXPECT_PAX_ERROR(cf::cond(scalar(true), one, op), "cond: a bool predicate selects between 2 branches, got 1");
  cf::ClosedFn neg = traced([](std::span<const Array> x) { return std::vector<Array>{-x[0]}; }, {f32({3})});
  std::vector<cf::ClosedFn> id_neg{id, neg};
  std::vector<Array> v{array<float>({1, 2, 3})};
  EXPECT_TRUE(all_close(cf::cond(scalar(true), id_neg, v)[0], {-1, -2, -3}));
  EXPECT_TRUE(all_close(cf::cond(scalar(false), id_neg, v)[0], {1, 2, 3}));
  std::vector<Array> wrong{zeros({4})};
  EXPECT_PAX_ERROR(cf::cond(scalar(int32_t(0)), one, wrong),
                   "cond: branch 0 takes (f32[3]) but the operands are (f32[4])");
  EXPECT_PAX_ERROR(cf::cond(scalar(int32_t(0)), std::vector<cf::ClosedFn>{}, op), "cond: needs at least one branch");
}

TEST(ControlFlowPrims, WhileShapeRuleErrors) {
  cf::ClosedFn not_bool = traced([](std::span<const Array> x) { return std::vector<Array>{x[0]}; }, {f32({})});
  cf::ClosedFn pred = traced([](std::span<const Array> x) { return std::vector<Array>{x[0] < 1.0f}; }, {f32({})});
  cf::ClosedFn widen =
      traced([](std::span<const Array> x) { return std::vector<Array>{x[0].astype(DType::f64)}; }, {f32({})});
  std::vector<Array> init{scalar(0.0f)};
  EXPECT_PAX_ERROR(cf::while_loop(not_bool, not_bool, init),
                   "while: the cond function must return one bool scalar, got (f32[])");
  EXPECT_PAX_ERROR(cf::while_loop(pred, widen, init),
                   "while: the body function returns (f64[]) but the carry is (f32[])");
  std::vector<Array> two{scalar(0.0f), scalar(1.0f)};
  EXPECT_PAX_ERROR(cf::while_loop(not_bool, not_bool, two),
                   "while: the cond function takes (f32[]) but is given (f32[], f32[])");
}

TEST(ControlFlowPrims, ScanShapeRuleErrors) {
  // body: (c: f32[], x: f32[3]) -> (c + sum(x), x)
  cf::ClosedFn body = traced(
      [](std::span<const Array> a) {
        return std::vector<Array>{a[0] + sum(a[1]), a[1]};
      },
      {f32({}), f32({3})});
  cf::ScanSpec spec{body.program, 0, 1, 5, false};
  std::vector<Array> ok{scalar(0.0f), ones({5, 3})};
  std::vector<Array> out = cf::scan(spec, ok);
  EXPECT_TRUE(all_close(out[0], {15}));
  EXPECT_EQ(out[1].shape(), (Shape{5, 3}));
  std::vector<Array> short_xs{scalar(0.0f), ones({4, 3})};
  EXPECT_PAX_ERROR(cf::scan(spec, short_xs),
                   "scan: xs operand 0 is f32[4,3] but must be the body's x f32[3] stacked along a leading axis of "
                   "length 5");
  std::vector<Array> bad_carry{scalar(0.0), ones({5, 3})};
  EXPECT_PAX_ERROR(cf::scan(spec, bad_carry), "scan: operand 0 is f64[] but the body takes f32[]");
  cf::ClosedFn grows = traced([](std::span<const Array> a) { return std::vector<Array>{a[1]}; }, {f32({}), f32({3})});
  EXPECT_PAX_ERROR(cf::scan(cf::ScanSpec{grows.program, 0, 1, 5, false}, ok),
                   "scan: the body returns carry 0 as f32[3] but it enters as f32[]");
  EXPECT_PAX_ERROR(cf::scan(cf::ScanSpec{body.program, 0, 3, 5, false}, ok), "num_carry 3 exceed the 2 operands");
}

TEST(ControlFlowPrims, RematShapeRuleErrors) {
  cf::ClosedFn f = traced([](std::span<const Array> a) { return std::vector<Array>{a[0] + a[0]}; }, {f32({2})});
  std::vector<Array> wrong{zeros({3})};
  EXPECT_PAX_ERROR(cf::remat(f.program, RematPolicy::nothing_saveable, wrong),
                   "remat: the function takes (f32[2]) but the operands are (f32[3])");
}

TEST(ControlFlowPrims, ScanStackedCarriesAreTheIterationInputs) {
  // carry c -> 2 c + x; the stacked carries are the values entering each step.
  cf::ClosedFn body = traced([](std::span<const Array> a) { return std::vector<Array>{a[0] + a[0] + a[1]}; },
                             {AVal{Shape{}, DType::f64}, AVal{Shape{}, DType::f64}});
  std::vector<Array> ops{scalar(1.0), array<double>({1, 2, 3})};
  std::vector<Array> fwd = cf::scan(cf::ScanSpec{body.program, 0, 1, 3, false}, ops, /*want_carries=*/true);
  ASSERT_EQ(fwd.size(), 2u);
  EXPECT_TRUE(all_close(fwd[0], {19}));  // 1 -> 3 -> 8 -> 19
  EXPECT_TRUE(all_close(fwd[1], {1, 3, 8}));
  std::vector<Array> rev = cf::scan(cf::ScanSpec{body.program, 0, 1, 3, true}, ops, true);
  // Reverse: x = 3, 2, 1 in that order: 1 -> 5 -> 12 -> 25; entering carries sit at their x's index.
  EXPECT_TRUE(all_close(rev[0], {25}));
  EXPECT_TRUE(all_close(rev[1], {12, 5, 1}));
}

// The tape entry a grad level records for one primitive application of `f`.
const TapeEntry& only_entry(const VjpTrace& trace) {
  EXPECT_EQ(trace.tape().size(), 1u);
  return trace.tape().back();
}

TEST(ControlFlowPrims, ResidualsOnlyUnderGrad) {
  auto step = [](const Array& c, const Array& x) { return std::make_pair(c * x, c); };
  Array xs = array<double>({1, 2, 3, 4});
  // Eagerly no residual outputs are computed...
  auto jaxpr = make_jaxpr([&](const Array& c) { return scan(step, c, xs).first; })(scalar(1.0));
  EXPECT_NE(jaxpr->str().find("save_carries=False"), std::string::npos) << jaxpr->str();
  // ... under grad the scan returns the stacked carries as well.
  auto trace = std::make_shared<VjpTrace>();
  {
    TraceScope scope(trace, /*dynamic=*/false);
    auto [c, ys] = scan(step, trace->track(scalar(1.0)), xs);
    EXPECT_EQ(c.aval().str(), "f64[]");
    EXPECT_EQ(ys.aval().str(), "f64[4]");
  }
  const TapeEntry& e = only_entry(*trace);
  EXPECT_EQ(e.prim, Prim::scan);
  EXPECT_TRUE(e.params.b("save_carries"));
  ASSERT_EQ(e.out_primals.size(), 3u);
  EXPECT_TRUE(all_close(e.out_primals[2], {1, 1, 2, 6}));
  // dots_saveable keeps the matmul results as residual outputs of remat.
  auto mm = checkpoint([](const Array& a, const Array& b) { return tanh(matmul(tanh(matmul(a, b)), b)); },
                       RematPolicy::dots_saveable);
  auto trace2 = std::make_shared<VjpTrace>();
  {
    TraceScope scope(trace2, /*dynamic=*/false);
    mm(trace2->track(ones({2, 2})), ones({2, 2}));
  }
  const TapeEntry& r = only_entry(*trace2);
  EXPECT_EQ(r.prim, Prim::remat);
  EXPECT_EQ(r.params.i("num_res"), 2);
  EXPECT_EQ(r.out_primals.size(), 3u);
  EXPECT_EQ(r.params.s("policy"), "dots_saveable");
}

TEST(ControlFlowPrims, TransformedJaxprsTypecheck) {
  Array w = array<double>({0.5, -1.0});
  auto loss = [&](const Array& h0, const Array& xs) {
    auto [h, ys] = scan(
        [&](const Array& h, const Array& x) {
          Array h2 = cond(
              sum(h) > 0.0, [&](const Array& v) { return tanh(v * w + x); }, [&](const Array& v) { return v * x; }, h);
          return std::make_pair(h2, sum(h2));
        },
        h0, xs);
    return sum(ys) + sum(checkpoint([](const Array& a) { return sin(a) * a; })(h));
  };
  Array h0 = array<double>({0.1, 0.2}), xs = array<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto second = [&](const Array& h) { return sum(grad(loss)(h, xs)); };
  typecheck(*make_jaxpr(loss)(h0, xs));
  typecheck(*make_jaxpr(grad<0, 1>(loss))(h0, xs));
  typecheck(*make_jaxpr(grad(second))(h0));
  EXPECT_TRUE(all_close(jit(grad(second))(h0), grad(second)(h0), 1e-13, 1e-13));
  // The grad's value agrees with a jitted and an eager evaluation.
  auto [g0, g1] = grad<0, 1>(loss)(h0, xs);
  auto [j0, j1] = jit(grad<0, 1>(loss))(h0, xs);
  EXPECT_TRUE(all_close(j0, g0, 1e-14, 1e-14));
  EXPECT_TRUE(all_close(j1, g1, 1e-14, 1e-14));
}

}  // namespace
}  // namespace pax

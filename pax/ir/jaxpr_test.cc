// The jaxpr: its text form from a trace, and a program written by hand that
// type-checks, evaluates and prints, with the errors typecheck gives for an
// equation whose output is not what its shape rule says and for a variable
// used before it is defined.
#include "pax/ir/jaxpr.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

TEST(MakeJaxpr, PrintsTheProgram) {
  auto jaxpr = make_jaxpr([](const Array& x) { return sum(x * 2.0); })(zeros({3}));
  const std::string text = jaxpr->str();
  EXPECT_NE(text.find("{ lambda "), std::string::npos) << text;
  EXPECT_NE(text.find("a:f32[3]. let"), std::string::npos) << text;
  EXPECT_NE(text.find("mul"), std::string::npos) << text;
  EXPECT_NE(text.find("reduce_sum[axes=(0,)]"), std::string::npos) << text;
  typecheck(*jaxpr);
  // Ops without traced inputs are recorded too, not computed.
  auto j2 = make_jaxpr([](const Array& x) { return x + zeros({3}); })(zeros({3}));
  EXPECT_NE(j2->str().find("broadcast_in_dim"), std::string::npos) << j2->str();
}

// { lambda a:f32[3] b:f32[3]. let c:f32[3] = add a b; d:f32[3] = mul c a in (d,) }
Jaxpr hand_built() {
  Jaxpr j;
  const AVal v3{Shape{3}, DType::f32};
  const Var a = j.new_var(v3), b = j.new_var(v3), c = j.new_var(v3), d = j.new_var(v3);
  j.invars = {a, b};
  j.eqns.push_back(Eqn{Prim::add, {a, b}, {c}, {}});
  j.eqns.push_back(Eqn{Prim::mul, {c, a}, {d}, {}});
  j.outvars = {d};
  return j;
}

TEST(Jaxpr, AHandBuiltProgramTypeChecksEvaluatesAndPrints) {
  const Jaxpr j = hand_built();
  typecheck(j);
  const std::vector<Array> out = eval_jaxpr(j, std::vector<Array>{array<float>({1, 2, 3}), array<float>({10, 20, 30})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(testing::all_close(out[0], {11, 44, 99}, 0, 0));
  const std::string text = j.str();
  EXPECT_NE(text.find("c:f32[3] = add a b"), std::string::npos) << text;
  EXPECT_NE(text.find("d:f32[3] = mul c a"), std::string::npos) << text;
}

TEST(Jaxpr, TypecheckNamesTheEquationAtFault) {
  Jaxpr wrong_aval = hand_built();
  wrong_aval.avals[2] = AVal{Shape{4}, DType::f32};  // c: add of two f32[3] is f32[3]
  EXPECT_PAX_ERROR(typecheck(wrong_aval),
                   "equation 0 (add) output c is declared f32[4] but the shape rule gives f32[3]");
  Jaxpr early = hand_built();
  std::swap(early.eqns[0], early.eqns[1]);  // mul reads c before add defines it
  EXPECT_PAX_ERROR(typecheck(early), "equation 0 (mul) uses variable c before it is defined");
}

}  // namespace
}  // namespace pax

// The primitive table covers the whole closed list: every primitive has a
// shape rule and a CPU kernel (or shares its input's buffer), and names
// round-trip.
#include "pax/prims/registry.h"

#include <gtest/gtest.h>

#include <string_view>

#include "pax/api/transforms.h"
#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/ops/lax.h"

namespace pax {
namespace {

TEST(Registry, EveryPrimitiveIsComplete) {
  for (int i = 0; i < kNumPrims; ++i) {
    Prim p = Prim(i);
    const PrimDef& def = prim_def(p);
    EXPECT_NE(def.shape_rule, nullptr) << prim_name(p);
    EXPECT_TRUE(default_backend().kernel(p) != nullptr || def.output_aliases_input >= 0 || def.impl != nullptr)
        << prim_name(p);
    EXPECT_EQ(prim_from_name(prim_name(p)), p);
  }
  EXPECT_STREQ(prim_name(Prim::bitwise_not), "not");
  EXPECT_EQ(prim_arity(Prim::select_n), -1);
  EXPECT_THROW(prim_from_name("nonexistent"), Error);
}

// Primitives whose outputs are never floating (or that are differentiated by
// the interpreter levels themselves) need no VJP / JVP rule.
bool non_differentiable(Prim p) {
  switch (p) {
    case Prim::is_finite:
    case Prim::bitwise_not:
    case Prim::bitcast_convert_type:
    case Prim::bitwise_and:
    case Prim::bitwise_or:
    case Prim::bitwise_xor:
    case Prim::eq:
    case Prim::ne:
    case Prim::lt:
    case Prim::le:
    case Prim::gt:
    case Prim::ge:
    case Prim::shift_left:
    case Prim::shift_right_logical:
    case Prim::shift_right_arithmetic:
    case Prim::reduce_and:
    case Prim::reduce_or:
    case Prim::argmax:
    case Prim::argmin:
    case Prim::iota:
    case Prim::threefry2x32:
    case Prim::random_bits:
    case Prim::axis_index:
    case Prim::jit_call: return true;
    default: return false;
  }
}

TEST(Registry, EveryPrimitiveHasItsTransformRules) {
  for (int i = 0; i < kNumPrims; ++i) {
    const Prim p = Prim(i);
    const PrimDef& def = prim_def(p);
    // jit_call is batched through its body by the vmap level.
    if (p != Prim::jit_call) EXPECT_NE(def.batch, nullptr) << prim_name(p);
    if (non_differentiable(p)) continue;
    // A primitive defined by a composite (expand) is differentiated through
    // it where it has no rule of its own.
    EXPECT_TRUE(def.vjp || def.expand) << prim_name(p);
    // custom_vjp has no forward mode, as in JAX; stop_gradient's VJP is the level's.
    if (p != Prim::custom_vjp_call) EXPECT_TRUE(def.jvp || def.expand) << prim_name(p);
  }
}

TEST(Registry, ArityIsChecked) {
  AVal a{Shape{2}, DType::f32};
  std::vector<AVal> one{a};
  EXPECT_THROW(infer_avals(Prim::add, one, {}), Error);
}

TEST(Backend, ThreadCountIsAdjustable) {
  const int before = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_STREQ(backend_for(DeviceKind::cpu).name, "cpu");
}

}  // namespace
}  // namespace pax

namespace pax {
namespace {

// An operand `p` accepts (prims.def's accepts column).
Array operand_for(Prim p) {
  const std::optional<Accepts> a = prim_accepts(p);
  const bool integral = a && (*a == Accepts::integer || *a == Accepts::int_or_bool);
  return integral ? array<int32_t>({1, 2, 3}) : array<float>({0.5f, 1.5f, 2.5f});
}

// prims.def's wrapper column: each generated lax1 / lax2 function traces to
// exactly its own primitive (a wrong expansion binds another one or fails
// its dtype check).
TEST(Registry, LaxWrappersBindTheirOwnPrimitive) {
  int checked = 0;
  auto expect_binds = [&](Prim p, const JaxprPtr& jaxpr) {
    ASSERT_EQ(jaxpr->eqns.size(), 1u) << prim_name(p);
    EXPECT_EQ(jaxpr->eqns[0].prim, p) << prim_name(p);
    ++checked;
  };
#define PAX_LAX_none(id)
#define PAX_LAX_lax1(id) \
  expect_binds(Prim::id, make_jaxpr([](const Array& x) { return lax::id(x); })(operand_for(Prim::id)));
#define PAX_LAX_lax2(id)                                                                           \
  expect_binds(Prim::id, make_jaxpr([](const Array& a, const Array& b) { return lax::id(a, b); })( \
                             operand_for(Prim::id), operand_for(Prim::id)));
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PAX_LAX_##wrapper(id)
#include "pax/ir/prims.def"
#undef PAX_PRIM
#undef PAX_LAX_none
#undef PAX_LAX_lax1
#undef PAX_LAX_lax2
  // Every lax1 / lax2 line of prims.def was checked.
  int wrappers = 0;
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) \
  wrappers += std::string_view(#wrapper) != "none";
#include "pax/ir/prims.def"
#undef PAX_PRIM
  EXPECT_EQ(checked, wrappers);
  EXPECT_GE(wrappers, 39);  // 19 unary (with is_finite and bitwise_not) and 20 binary functions at least
}

}  // namespace
}  // namespace pax

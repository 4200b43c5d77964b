// The primitive table covers the whole closed list: every primitive has a
// shape rule and a CPU kernel (or shares its input's buffer), and names
// round-trip.
#include "pax/prims/registry.h"

#include <gtest/gtest.h>

#include "pax/backend/backend.h"
#include "pax/core/error.h"

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
  EXPECT_STREQ(prim_name(Prim::not_), "not");
  EXPECT_EQ(prim_arity(Prim::select_n), -1);
  EXPECT_THROW(prim_from_name("nonexistent"), Error);
}

// Primitives whose outputs are never floating (or that are differentiated by
// the interpreter levels themselves) need no VJP / JVP rule.
bool non_differentiable(Prim p) {
  switch (p) {
    case Prim::is_finite:
    case Prim::not_:
    case Prim::bitcast_convert_type:
    case Prim::and_:
    case Prim::or_:
    case Prim::xor_:
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
    // jit_call and custom_vjp_call are batched through their bodies by the vmap level.
    if (p != Prim::jit_call && p != Prim::custom_vjp_call) EXPECT_NE(def.batch, nullptr) << prim_name(p);
    if (non_differentiable(p)) continue;
    EXPECT_NE(def.vjp, nullptr) << prim_name(p);
    // custom_vjp has no forward mode, as in JAX; stop_gradient's VJP is the level's.
    if (p != Prim::custom_vjp_call) EXPECT_NE(def.jvp, nullptr) << prim_name(p);
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
  EXPECT_STREQ(default_backend().name, "cpu");
}

}  // namespace
}  // namespace pax

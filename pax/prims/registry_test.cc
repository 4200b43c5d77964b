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
    EXPECT_TRUE(cpu_backend().kernel(p) != nullptr || def.output_aliases_input >= 0 || def.impl != nullptr)
        << prim_name(p);
    EXPECT_EQ(prim_from_name(prim_name(p)), p);
  }
  EXPECT_STREQ(prim_name(Prim::not_), "not");
  EXPECT_EQ(prim_arity(Prim::select_n), -1);
  EXPECT_THROW(prim_from_name("nonexistent"), Error);
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
  EXPECT_STREQ(cpu_backend().name, "cpu");
}

}  // namespace
}  // namespace pax

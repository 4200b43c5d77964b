// PAX_PROFILE's table: times summed per label, heaviest first, and
// reset_step_profile's forgetting (what gpt_step does after its warm-up).
#include "pax/backend/cpu/step_profile.h"

#include <gtest/gtest.h>

#include <string>

namespace pax::cpu {
namespace {

TEST(StepProfile, SumsPerLabelHeaviestFirstAndForgetsOnReset) {
  StepProfile profile;
  EXPECT_EQ(profile.table(), "");
  profile.add("fusion{add} f32[4]", 0.002);
  profile.add("dot_general f32[4,4]", 0.010);
  profile.add("fusion{add} f32[4]", 0.001);
  const std::string table = profile.table();
  EXPECT_EQ(table.rfind("PAX_PROFILE: 0.013 s in executable steps\n", 0), 0u) << table;
  const size_t dot = table.find("     10.00  76.92        1  dot_general f32[4,4]\n");
  const size_t add = table.find("      3.00  23.08        2  fusion{add} f32[4]\n");
  ASSERT_NE(dot, std::string::npos) << table;
  ASSERT_NE(add, std::string::npos) << table;
  EXPECT_LT(dot, add) << table;
  profile.reset();
  EXPECT_EQ(profile.table(), "");
  profile.add("fusion{add} f32[4]", 0.004);
  EXPECT_NE(profile.table().find("      4.00 100.00        1  fusion{add} f32[4]\n"), std::string::npos)
      << profile.table();
}

}  // namespace
}  // namespace pax::cpu

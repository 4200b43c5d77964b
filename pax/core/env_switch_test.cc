// Environment switches: unset and empty give the fallback, the off words (in
// any case) turn a switch off, any other value turns it on.
#include "pax/core/env_switch.h"

#include <gtest/gtest.h>

#include "pax/testing/scoped_env.h"

namespace pax {
namespace {

constexpr const char* kName = "PAX_TEST_ENV_SWITCH";

TEST(EnvSwitch, OffWordsOnWordsAndTheFallback) {
  {
    testing::ScopedEnv unset(kName, nullptr);
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
  }
  {
    testing::ScopedEnv empty(kName, "");
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
  }
  for (const char* off : {"0", "false", "No", "OFF"}) {
    testing::ScopedEnv set(kName, off);
    EXPECT_FALSE(env_switch(kName, true)) << off;
  }
  for (const char* on : {"1", "true", "yes", "On", "2"}) {
    testing::ScopedEnv set(kName, on);
    EXPECT_TRUE(env_switch(kName, false)) << on;
  }
}

}  // namespace
}  // namespace pax

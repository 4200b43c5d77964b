// PAX_MAX_ISA: a cap reaches Highway's dispatch, oneDNN and the code
// generator's flags together; an unknown cap is an error naming the valid ones.
#include "pax/backend/cpu/isa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "pax/core/error.h"
#include "pax/testing/scoped_env.h"

namespace pax::cpu {
namespace {

bool has_flag(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

TEST(Isa, CapReachesHighwayOneDnnAndTheCodeGenerator) {
  const std::string cap = isa_cap();
  const std::vector<std::string> flags = codegen_isa_flags();
  const char* march = std::getenv("PAX_CODEGEN_MARCH");
  EXPECT_TRUE(has_flag(flags, std::string("-march=") + (march && *march ? march : "native")));
  // Under -march=native the flags (and so the cache key) name this CPU.
  const bool names_cpu = std::any_of(flags.begin(), flags.end(),
                                     [](const std::string& f) { return f.rfind("-DPAX_HOST_CPU=0x", 0) == 0; });
  EXPECT_EQ(names_cpu, !(march && *march));
  EXPECT_TRUE(has_flag(flags, "-DHWY_DISABLED_TARGETS=" + std::to_string(hwy_target() - 1)));
  EXPECT_NE(isa_summary().find(hwy_target_name()), std::string::npos) << isa_summary();
  if (cap == "avx2") {
    // The test suite runs capped to AVX2 on machines that have more.
    EXPECT_EQ(hwy_target_name(), "AVX2");
    EXPECT_EQ(dnnl_isa_name(), "avx2");
    EXPECT_TRUE(has_flag(flags, "-mno-avx512f"));
  } else {
    EXPECT_FALSE(has_flag(flags, "-mno-avx512f"));
  }
}

TEST(Isa, UnknownCapNamesTheValidOnes) {
  testing::ScopedEnv cap("PAX_MAX_ISA", "avx9000");
  try {
    (void)isa_cap();
    ADD_FAILURE() << "no error for PAX_MAX_ISA=avx9000";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("avx9000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("avx2, avx512"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace pax::cpu

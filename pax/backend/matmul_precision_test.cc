// The matmul precision setting: JAX's names, a bad name's error, and scopes
// that restore the previous setting.
#include "pax/backend/matmul_precision.h"

#include <gtest/gtest.h>

#include <string>

#include "pax/core/error.h"

namespace pax {
namespace {

TEST(MatmulPrecision, JaxNames) {
  EXPECT_EQ(parse_matmul_precision("float32"), MatmulPrecision::float32);
  EXPECT_EQ(parse_matmul_precision("highest"), MatmulPrecision::float32);
  EXPECT_EQ(parse_matmul_precision("tensorfloat32"), MatmulPrecision::tensorfloat32);
  EXPECT_EQ(parse_matmul_precision("high"), MatmulPrecision::tensorfloat32);
  EXPECT_EQ(parse_matmul_precision("bfloat16"), MatmulPrecision::bfloat16);
  EXPECT_EQ(parse_matmul_precision("default"), MatmulPrecision::bfloat16);
  EXPECT_EQ(parse_matmul_precision("fastest"), MatmulPrecision::bfloat16);
  for (MatmulPrecision p : {MatmulPrecision::float32, MatmulPrecision::tensorfloat32, MatmulPrecision::bfloat16}) {
    EXPECT_EQ(parse_matmul_precision(matmul_precision_name(p)), p);
  }
}

TEST(MatmulPrecision, BadNameNamesTheValidOnes) {
  try {
    parse_matmul_precision("tf32");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'tf32'"), std::string::npos) << what;
    EXPECT_NE(what.find("tensorfloat32"), std::string::npos) << what;
  }
}

TEST(MatmulPrecision, F32UnlessAskedAndScopesRestore) {
  ASSERT_EQ(default_matmul_precision(), MatmulPrecision::float32);  // ctest sets no PAX_DEFAULT_MATMUL_PRECISION
  EXPECT_FALSE(f32_products_in_tf32());
  {
    const DefaultMatmulPrecision tf32("tensorfloat32");
    EXPECT_TRUE(f32_products_in_tf32());
    {
      const DefaultMatmulPrecision f32(MatmulPrecision::float32);
      EXPECT_FALSE(f32_products_in_tf32());
    }
    EXPECT_EQ(default_matmul_precision(), MatmulPrecision::tensorfloat32);
  }
  EXPECT_EQ(default_matmul_precision(), MatmulPrecision::float32);
}

}  // namespace
}  // namespace pax

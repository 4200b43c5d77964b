// The bf16 paths of the dot_general and conv_general_dilated kernels on this
// CPU: oneDNN's bf16 kernels where the CPU has them (AVX-512 on), otherwise
// operands widened to f32 (AVX2; PAX_MAX_ISA=avx2, which test.sh runs), where
// the result is exactly the f32 result of the widened operands, rounded.
#include <gtest/gtest.h>

#include "pax/backend/cpu/cpu_info.h"
#include "pax/backend/cpu/gemm_dnnl.h"
#include "pax/backend/cpu/isa.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::random_array;

TEST(DotGeneral, Bf16PathOfThisCpu) {
  const cpu::GemmShape g{1, 17, 23, 40};
  const bool native = cpu::gemm_dnnl_supported(g, DType::bf16, DType::bf16);
  // oneDNN's own ISA decides (PAX_MAX_ISA or ONEDNN_MAX_CPU_ISA may cap it).
  if (cpu::cpu_info().arch == "x86_64") {
    EXPECT_EQ(native, cpu::dnnl_isa_name().rfind("avx512", 0) == 0) << "oneDNN has bf16 matmuls from AVX-512 on";
  }
  const lax::DotDimensionNumbers dn{{1}, {0}, {}, {}};
  Array a = random_array({17, 40}, DType::bf16, 3), b = random_array({40, 23}, DType::bf16, 4);
  Array out = lax::dot_general(a, b, dn);
  Array widened = lax::dot_general(a.astype(DType::f32), b.astype(DType::f32), dn).astype(DType::bf16);
  if (native) GTEST_SKIP() << "native bf16 matmul on this CPU; the widened path runs under PAX_MAX_ISA=avx2";
  EXPECT_EQ(out.to_vector<double>(), widened.to_vector<double>());
}

TEST(ConvGeneralDilated, Bf16PathOfThisCpu) {
  const lax::ConvDimensionNumbers dn = lax::conv_dimension_numbers("NHWC", "HWIO", "NHWC");
  auto conv = [&](const Array& x, const Array& w) {
    return lax::conv_general_dilated(x, w, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, dn);
  };
  Array lhs = random_array({2, 9, 8, 16}, DType::bf16, 1), rhs = random_array({3, 3, 16, 8}, DType::bf16, 2);
  Array out = conv(lhs, rhs);
  Array widened = conv(lhs.astype(DType::f32), rhs.astype(DType::f32)).astype(DType::bf16);
  if (cpu::dnnl_isa_name().rfind("avx512", 0) == 0) {
    GTEST_SKIP() << "native bf16 convolution; the widened path runs under PAX_MAX_ISA=avx2";
  }
  EXPECT_EQ(out.to_vector<double>(), widened.to_vector<double>());
}

}  // namespace
}  // namespace pax

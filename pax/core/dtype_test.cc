// DType promotion table, weak promotion, names and the bf16 / f16 conversions.
#include "pax/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "pax/core/error.h"

namespace pax {
namespace {

constexpr DType kAll[] = {DType::bool_, DType::u8,  DType::u32, DType::i32, DType::i64,
                          DType::bf16,  DType::f16, DType::f32, DType::f64};

TEST(DType, SizesAndNames) {
  EXPECT_EQ(itemsize(DType::bool_), 1u);
  EXPECT_EQ(itemsize(DType::bf16), 2u);
  EXPECT_EQ(itemsize(DType::u32), 4u);
  EXPECT_EQ(itemsize(DType::f64), 8u);
  for (DType d : kAll) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    EXPECT_EQ(dtype_from_name(dtype_short_name(d)), d);
  }
  EXPECT_THROW(dtype_from_name("float8"), Error);
}

TEST(DType, PromotionTableMatchesJaxNumpy) {
  using D = DType;
  // Spot checks from jax.numpy.promote_types.
  EXPECT_EQ(promote_types(D::bool_, D::i32), D::i32);
  EXPECT_EQ(promote_types(D::u8, D::i32), D::i32);
  EXPECT_EQ(promote_types(D::u32, D::i32), D::i64);
  EXPECT_EQ(promote_types(D::u8, D::u32), D::u32);
  EXPECT_EQ(promote_types(D::i64, D::bf16), D::bf16);
  EXPECT_EQ(promote_types(D::i32, D::f16), D::f16);
  EXPECT_EQ(promote_types(D::bf16, D::f16), D::f32);
  EXPECT_EQ(promote_types(D::f16, D::f32), D::f32);
  EXPECT_EQ(promote_types(D::bf16, D::f64), D::f64);
  // The table is symmetric, idempotent, and a join (associative).
  for (DType a : kAll) {
    EXPECT_EQ(promote_types(a, a), a);
    for (DType b : kAll) {
      EXPECT_EQ(promote_types(a, b), promote_types(b, a));
      for (DType c : kAll) {
        EXPECT_EQ(promote_types(promote_types(a, b), c), promote_types(a, promote_types(b, c)))
            << dtype_name(a) << " " << dtype_name(b) << " " << dtype_name(c);
      }
    }
  }
}

TEST(DType, WeakPromotion) {
  using D = DType;
  // bf16 array + float literal stays bf16; int array + float literal is weak f32.
  WeakDType r = promote_weak({D::bf16, false}, {D::f32, true});
  EXPECT_EQ(r.dtype, D::bf16);
  EXPECT_FALSE(r.weak);
  r = promote_weak({D::u8, false}, {D::i32, true});
  EXPECT_EQ(r.dtype, D::u8);
  r = promote_weak({D::i32, false}, {D::f32, true});
  EXPECT_EQ(r.dtype, D::f32);
  EXPECT_TRUE(r.weak);
  r = promote_weak({D::i32, true}, {D::f32, true});
  EXPECT_EQ(r.dtype, D::f32);
  EXPECT_TRUE(r.weak);
  r = promote_weak({D::f16, false}, {D::bf16, false});
  EXPECT_EQ(r.dtype, D::f32);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + 1.5f / 256), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.4e38f)), INFINITY);  // rounds past the largest bf16
  // Every bf16 value round-trips exactly.
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), b);
  }
}

TEST(DType, F16ConversionIsExactAndRounds) {
  // Every f16 value round-trips and matches a direct decoding.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_float(uint16_t(h));
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exp == 0x1f) {
      if (mant) EXPECT_TRUE(std::isnan(f));
      else EXPECT_EQ(f, float(sign * INFINITY));
      continue;
    }
    double want = exp == 0 ? sign * std::ldexp(double(mant), -24)
                           : sign * std::ldexp(1.0 + mant / 1024.0, int(exp) - 15);
    EXPECT_EQ(double(f), want) << h;
    EXPECT_EQ(float_to_f16(f), h);
  }
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(65520.0f)), INFINITY);           // halfway to 2^16 rounds up
  EXPECT_EQ(f16_to_float(float_to_f16(std::ldexp(1.0f, -25))), 0.0f);  // tie to even (zero)
  EXPECT_EQ(f16_to_float(float_to_f16(std::ldexp(1.5f, -25))), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie to even
}

TEST(DType, HostConversionSaturates) {
  float in[] = {1e10f, -1e10f, NAN, 2.7f, -2.7f};
  int32_t out[5];
  convert_host(DType::f32, in, DType::i32, out, 5);
  EXPECT_EQ(out[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(out[1], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], 2);
  EXPECT_EQ(out[4], -2);
  int64_t big = (int64_t(1) << 53) + 1;
  int64_t back;
  convert_host(DType::i64, &big, DType::i64, &back, 1);
  EXPECT_EQ(back, big);
}

}  // namespace
}  // namespace pax

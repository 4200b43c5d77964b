// The bf16 products of the attention kernels (attention_bf16.h) against
// loops in double on the same bf16 values, on every unit this CPU has:
// product() over padded sizes, product_add() with plain and pair-major left
// operands at sizes that are not multiples of the register tile (what lies
// outside m x n must stay untouched), and pair() in each of its layouts
// (contiguous columns, contiguous depth, neither) against its definition.
#include "pax/backend/cpu/attention_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/dtype.h"

namespace pax::cpu::attention_bf16 {
namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Random values that bf16 holds exactly, so the loops below see the same
// numbers the products do.
std::vector<float> bf16_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_float(float_to_bf16(dist(rng)));
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// Runs f(unit) on each bf16 unit this CPU has; returns how many.
template <class F>
int for_each_unit(F f) {
  int units = 0;
  for (Unit unit : {Unit::amx, Unit::avx512_bf16}) {
    if (!has(unit)) continue;
    ++units;
    f(unit);
  }
  return units;
}

// Sums of products in double are exact to f32's rounding at these depths;
// the products sum in f32, in another order.
void expect_near(const std::string& what, double want, float got) {
  EXPECT_NEAR(got, want, 1e-4 * std::max(1.0, std::abs(want))) << what;
}

TEST(AttentionBf16, ProductMatchesLoops) {
  const int units = for_each_unit([](Unit unit) {
    const int64_t m = 64, n = 80, k = 96;  // 64 rows: a partial tile of rows last
    const std::vector<float> a = bf16_values(size_t(m * k), 1), b = bf16_values(size_t(k * n), 2);
    std::vector<uint16_t> paired(size_t(k * n));
    pair(k, n, k, n, to_bf16(b).data(), n, 1, paired.data(), n);
    std::vector<float> c(size_t(m * n), -7.0f);
    product(unit, m, n, k, to_bf16(a).data(), k, paired.data(), n, c.data(), n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += double(a[i * k + p]) * b[p * n + j];
        expect_near("C[" + std::to_string(i) + ", " + std::to_string(j) + "]", want, c[i * n + j]);
      }
  });
  if (units == 0) GTEST_SKIP() << "this CPU has no bf16 products";
}

constexpr uint16_t kNaN = 0x7FC0;  // a bf16 quiet NaN

// C += alpha A B on m x n of a larger C; A is the transpose of an f32 block
// (as dK and dV take P and dS), given plain (convert_transposed) or
// pair-major (convert_pair_major) where the unit takes it.
TEST(AttentionBf16, ProductAddTouchesOnlyItsBlock) {
  const int units = for_each_unit([](Unit unit) {
    for (const auto& [m, n, depth] :
         {std::array<int64_t, 3>{37, 19, 45}, {6, 64, 32}, {70, 5, 1}, {1, 33, 64}, {20, 83, 40}, {9, 128, 64}}) {
      SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " depth " + std::to_string(depth));
      const int64_t k = round_up(depth, kDepthPad), m16 = round_up(m, kRowsPad), n16 = round_up(n, kRowsPad);
      // src: depth x m f32 rows (lds m + 3); A = src^T rounded to bf16.
      const int64_t lds = m + 3;
      const std::vector<float> src = bf16_values(size_t(depth * lds), 3);
      const std::vector<float> b = bf16_values(size_t(depth * n), 4);
      std::vector<uint16_t> paired(size_t(k * n16), kNaN);
      pair(depth, n, k, n16, to_bf16(b).data(), n, 1, paired.data(), n16);
      // NaN in B's padding columns and A's padding rows: none of it may
      // reach C (AMX computes it into scratch; AVX512_BF16 masks it off).
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = n; j < n16; ++j) paired[size_t((p / 2) * 2 * n16 + 2 * j + p % 2)] = kNaN;
      const float alpha = 0.75f;
      const int64_t ldc = n + 5, rows_c = m + 2;
      const std::vector<float> c0 = bf16_values(size_t(rows_c * ldc), 5);
      std::vector<std::pair<std::string, Left>> lefts;
      // NaN before the conversions: the zeros past `depth` must be theirs.
      // Plain rows past m stay NaN (AMX reads whole tiles of rows); the
      // pair-major operand has exactly m rows (AVX512_BF16 reads no others).
      std::vector<uint16_t> plain(size_t(m16 * k), kNaN), pair_major(size_t(k * m), kNaN);
      convert_transposed(depth, m, k, src.data(), lds, plain.data(), k);
      lefts.push_back({"plain", rows_left(plain.data(), k)});
      if (takes_pair_major(unit)) {
        convert_pair_major(depth, m, k, src.data(), lds, pair_major.data(), m);
        lefts.push_back({"pair-major", pair_major_left(pair_major.data(), m)});
      }
      for (const auto& [name, left] : lefts) {
        std::vector<float> c = c0, scratch(size_t(m16 * n16));
        product_add(unit, m, n, k, left, paired.data(), n16, alpha, c.data(), ldc, scratch.data());
        for (int64_t i = 0; i < rows_c; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const std::string at = name + " C[" + std::to_string(i) + ", " + std::to_string(j) + "]";
            const float before = c0[size_t(i * ldc + j)], got = c[size_t(i * ldc + j)];
            if (i >= m || j >= n) {
              EXPECT_EQ(got, before) << at << " is outside the block";
              continue;
            }
            double sum = 0;
            for (int64_t p = 0; p < depth; ++p) sum += double(src[size_t(p * lds + i)]) * b[size_t(p * n + j)];
            expect_near(at, before + alpha * sum, got);
          }
      }
    }
  });
  if (units == 0) GTEST_SKIP() << "this CPU has no bf16 products";
}

// pair()'s definition: element (p, j) at dst[(p / 2) * 2 * ldb + 2 * j + p % 2],
// zero in rows [k, k_pad) and columns [n, n_pad).
TEST(AttentionBf16, PairInEveryLayout) {
  const int64_t k = 7, n = 21, k_pad = 10, n_pad = 32, ldb = 35;
  std::vector<uint16_t> src(200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(1000 + i);
  struct Layout {
    const char* name;
    int64_t p_stride, j_stride;
  };
  for (const Layout& l :
       {Layout{"contiguous columns", 25, 1}, Layout{"contiguous depth", 1, 9}, Layout{"neither", 2, 9}}) {
    std::vector<uint16_t> dst(size_t(k_pad / 2 * 2 * ldb), 0xFFFF);
    pair(k, n, k_pad, n_pad, src.data(), l.p_stride, l.j_stride, dst.data(), ldb);
    for (int64_t p = 0; p < k_pad; ++p)
      for (int64_t j = 0; j < n_pad; ++j) {
        const uint16_t want = p < k && j < n ? src[size_t(p * l.p_stride + j * l.j_stride)] : 0;
        EXPECT_EQ(dst[size_t((p / 2) * 2 * ldb + 2 * j + p % 2)], want) << l.name << ": (" << p << ", " << j << ")";
      }
    for (int64_t q = 0; q < k_pad / 2; ++q)  // past 2 n_pad: untouched
      for (int64_t i = 2 * n_pad; i < 2 * ldb; ++i)
        EXPECT_EQ(dst[size_t(q * 2 * ldb + i)], 0xFFFF) << l.name << ": line " << q << " lane " << i;
  }
}

}  // namespace
}  // namespace pax::cpu::attention_bf16

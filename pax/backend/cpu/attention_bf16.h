// bf16 products for the CPU attention kernels (attention.cc), on the unit
// this CPU multiplies bf16 with: AMX tiles (TDPBF16PS, a 16 x 16 f32 tile
// from 16 x 32 by 32 x 16 bf16 in one instruction), or AVX512_BF16
// (VDPBF16PS: pairs of bf16 products into one f32 lane). Sums are f32.
// Everything here is single-threaded; the caller runs it inside its own
// parallel tasks.
//
// The right operand of a product is "paired": element (p, j) of a k x n
// matrix sits at b[(p / 2) * 2 * ldb + 2 * j + p % 2], so that rows p and
// p + 1 of 16 columns are 64 contiguous bytes (a row of an AMX B tile, or the
// operand VDPBF16PS takes). The left operand is plain bf16 rows with k
// contiguous, or (product_add on AVX512_BF16) pair-major: see Left.
#pragma once

#include <cstdint>

namespace pax::cpu::attention_bf16 {

enum class Unit : uint8_t {
  none,         // no bf16 products: the kernels multiply in f32
  avx512_bf16,  // VDPBF16PS
  amx,          // AMX-BF16 tiles
};

// The unit attention's bf16 products run on: AMX where the CPU has it (and
// Linux grants the process its tile state); AVX512_BF16 on AMD CPUs, whose
// VDPBF16PS does twice the products of an f32 FMA per cycle (Intel's does
// as many as its two f32 FMA pipes, so f32 stays there); none otherwise.
// PAX_MAX_ISA's cap applies. override_unit replaces the choice (tests run
// every unit the CPU has); a unit the CPU lacks is refused.
Unit unit();
void override_unit(Unit unit);
// Whether the CPU has the unit (within PAX_MAX_ISA).
bool has(Unit unit);

// The padding product() needs on AMX: m and n multiples of kRowsPad, k of
// kDepthPad.
inline constexpr int64_t kRowsPad = 16, kDepthPad = 32;

// Whether product() needs those padded sizes on this unit (AMX's whole
// tiles do); on AVX512_BF16 m and n may be any and k any even number.
bool needs_padding(Unit unit);

// C[i, j] = sum_p a[i * lda + p] B(p, j) for i < m, j < n, p < k (C
// overwritten, rows ldc apart), B paired with row length ldb; sizes as
// needs_padding says. Reads every element of those extents (zeros where the
// caller pads).
void product(Unit unit, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
             float* c, int64_t ldc);

// A left operand: the pair of depths (2q, 2q + 1) of row i is the 32-bit
// word at a + i * row_step + q * pair_step (uint16 units). Plain rows
// (rows_left) have pair_step 2; pair-major ones (pair_major_left: the words
// of one pair of depths for every row side by side, rows ld words apart in
// ld-sized groups) have row_step 2.
struct Left {
  const uint16_t* a;
  int64_t row_step, pair_step;
};
inline Left rows_left(const uint16_t* a, int64_t lda) { return {a, lda, 2}; }
inline Left pair_major_left(const uint16_t* a, int64_t ld) { return {a, 2, 2 * ld}; }

// Whether product_add takes pair-major left operands on this unit
// (AVX512_BF16 does; AMX tiles load plain rows only).
bool takes_pair_major(Unit unit);

// C[i, j] += alpha sum_p A(i, p) B(p, j) for i < m, j < n (nothing else of C
// written; rows ldc apart), B paired with row length ldb (AMX reads its
// columns up to round_up(n, 16), AVX512_BF16 up to n), k a multiple of 32. AVX512_BF16 reads A's rows
// below m; AMX (plain rows only) reads round_up(m, 16) rows and uses scratch
// (round_up(m, 16) x round_up(n, 16) floats).
void product_add(Unit unit, int64_t m, int64_t n, int64_t k, Left a, const uint16_t* b, int64_t ldb, float alpha,
                 float* c, int64_t ldc, float* scratch);

// Pairs a k x n matrix given as element (p, j) = src[p * p_stride + j *
// j_stride] into dst (row length ldb >= n_pad), zero in rows [k, k_pad) and
// columns [n, n_pad); k_pad even.
void pair(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src, int64_t p_stride, int64_t j_stride,
          uint16_t* dst, int64_t ldb);

// dst[i * ldd + j] = bf16(src[i * lds + j]) (round to nearest even) for
// i < m, j < n; 0 for n <= j < n_pad.
void convert_rows(int64_t m, int64_t n, int64_t n_pad, const float* src, int64_t lds, uint16_t* dst, int64_t ldd);

// The transpose: dst[j * ldd + i] = bf16(src[i * lds + j]) for i < m, j < n;
// 0 for m <= i < m_pad.
void convert_transposed(int64_t m, int64_t n, int64_t m_pad, const float* src, int64_t lds, uint16_t* dst, int64_t ldd);

// The transpose as a pair-major left operand (pair_major_left(dst, ld)):
// row j < n of A is column j of src, its depth the m rows of src (zero in
// [m, m_pad), m_pad even); ld >= n.
void convert_pair_major(int64_t m, int64_t n, int64_t m_pad, const float* src, int64_t lds, uint16_t* dst, int64_t ld);

}  // namespace pax::cpu::attention_bf16

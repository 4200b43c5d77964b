// bf16 products for the CPU attention kernels (attention_bf16.h). The
// functions that use AMX or AVX-512 carry their own target attribute, so
// this file builds with the project's flags and that code runs only where
// has() says the CPU has the unit.
// - AMX: C is computed in blocks of 2 x 2 tiles (32 x 32 floats): per 32 of
//   the depth, two A tiles and two B tiles loaded, four TDPBF16PS.
// - AVX512_BF16: a tile of up to kRows rows by up to kVecs vectors of 16 columns
//   in registers: per pair of the depth, one load of B per column vector,
//   one broadcast of A per row and kRows x kVecs VDPBF16PS; the result
//   stored or added (times alpha) under masks, so no padding is written.
//   A is read with a row step and a pair step, so one kernel takes plain
//   rows and pair-major transposes.
// - pair() and convert_pair_major() interleave two rows with one VPERMW or
//   VPERMT2W.
#include "pax/backend/cpu/attention_bf16.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <utility>

#include "pax/backend/cpu/cpu_info.h"
#include "pax/core/dtype.h"
#include "pax/core/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PAX_ATTENTION_X86 1
#define PAX_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define PAX_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace pax::cpu::attention_bf16 {
namespace {

// Linux gives a process AMX's tile state only when it asks for it.
bool amx_permitted() {
#ifdef PAX_ATTENTION_X86
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool ok = syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  return ok;
#else
  return false;
#endif
}

Unit chosen_unit() {
  const CpuInfo& cpu = cpu_info();
  if (cpu.amx_bf16 && amx_permitted()) return Unit::amx;
  if (cpu.avx512_bf16 && cpu.vendor == "AuthenticAMD") return Unit::avx512_bf16;
  return Unit::none;
}

std::atomic<int> overridden{-1};

}  // namespace

bool has(Unit u) {
#ifdef PAX_ATTENTION_X86
  const CpuInfo& cpu = cpu_info();
  switch (u) {
    case Unit::none: return true;
    case Unit::avx512_bf16: return cpu.avx512_bf16;
    case Unit::amx: return cpu.amx_bf16 && amx_permitted();
  }
  return false;
#else
  return u == Unit::none;
#endif
}

Unit unit() {
  static const Unit chosen = chosen_unit();
  const int o = overridden.load(std::memory_order_relaxed);
  return o < 0 ? chosen : Unit(o);
}

bool takes_pair_major(Unit u) { return u == Unit::avx512_bf16; }

bool needs_padding(Unit u) { return u == Unit::amx; }

void override_unit(Unit u) {
  PAX_CHECK(has(u), "attention_bf16: this CPU has no ", u == Unit::amx ? "AMX-BF16" : "AVX512_BF16",
            " products (within PAX_MAX_ISA)");
  overridden.store(int(u), std::memory_order_relaxed);
}

namespace {

#ifdef PAX_ATTENTION_X86
PAX_BF16_TARGET void pair_rows(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src,
                               int64_t p_stride, uint16_t* dst, int64_t ldb);  // below, with the AVX-512 code
#endif

// pair() where the depth is contiguous (p_stride 1): each pair of depths is
// already adjacent, so it is copied as one word, 16 columns at a time (16
// source rows read side by side, one output line written per pair).
void pair_words(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src, int64_t j_stride,
                uint16_t* dst, int64_t ldb) {
  for (int64_t j0 = 0; j0 < n_pad; j0 += 16) {
    const int64_t j1 = std::min<int64_t>(n_pad, j0 + 16);
    for (int64_t q = 0; 2 * q < k_pad; ++q) {
      uint16_t* out = dst + q * 2 * ldb;
      for (int64_t j = j0; j < j1; ++j) {
        uint16_t two[2] = {0, 0};
        if (j < n && 2 * q + 1 < k) std::memcpy(two, src + j * j_stride + 2 * q, sizeof(two));
        else if (j < n && 2 * q < k) two[0] = src[j * j_stride + 2 * q];
        std::memcpy(out + 2 * j, two, sizeof(two));
      }
    }
  }
}

}  // namespace

void pair(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src, int64_t p_stride, int64_t j_stride,
          uint16_t* dst, int64_t ldb) {
#ifdef PAX_ATTENTION_X86
  if (j_stride == 1 && has(Unit::avx512_bf16)) return pair_rows(k, n, k_pad, n_pad, src, p_stride, dst, ldb);
#endif
  if (p_stride == 1) return pair_words(k, n, k_pad, n_pad, src, j_stride, dst, ldb);
  for (int64_t p = 0; p < k_pad; p += 2) {
    uint16_t* out = dst + (p / 2) * 2 * ldb;
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t row = p + half;
      if (row >= k) {
        for (int64_t j = 0; j < n_pad; ++j) out[2 * j + half] = 0;
        continue;
      }
      const uint16_t* in = src + row * p_stride;
      for (int64_t j = 0; j < n; ++j) out[2 * j + half] = in[j * j_stride];
      for (int64_t j = n; j < n_pad; ++j) out[2 * j + half] = 0;
    }
  }
}

#ifdef PAX_ATTENTION_X86
namespace {

constexpr int kRows = 6, kVecs = 4, kLanes = 16;

// The first min(count, 16) lanes of a vector (count >= 0).
__mmask16 first_lanes(int64_t count) { return count >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1u); }

// ---- AVX512_BF16

// Every loop over rows and column vectors is unrolled before GCC decides
// where acc lives: left as loops, acc is kept on the stack and all of it is
// stored there on every pair of the depth (a third of the instructions).
// kR rows (1 to kRows) by kNV vectors; kAdd: C += alpha acc, else C = acc.
template <int kR, int kNV, bool kAdd>
PAX_BF16_TARGET void tile(__mmask16 last, int64_t pairs, Left a, const uint16_t* b, int64_t ldb, float alpha, float* c,
                          int64_t ldc) {
  const uint16_t* ar[kR];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) ar[r] = a.a + r * a.row_step;
  __m512 acc[kR][kNV];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[kNV];
    const uint16_t* bp = b + p * 2 * ldb;
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) {
      const __m512i v = j + 1 == kNV ? _mm512_maskz_loadu_epi32(last, bp + j * 2 * kLanes)
                                     : _mm512_loadu_si512(bp + j * 2 * kLanes);
      bv[j] = (__m512bh)v;
    }
    const int64_t at = p * a.pair_step;
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      int32_t two;
      std::memcpy(&two, ar[r] + at, sizeof(two));
      const __m512bh av = (__m512bh)_mm512_set1_epi32(two);
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) {
      float* cr = c + r * ldc + j * kLanes;
      const __mmask16 lanes = j + 1 == kNV ? last : __mmask16(0xFFFF);
      if (kAdd) _mm512_mask_storeu_ps(cr, lanes, _mm512_fmadd_ps(scale, acc[r][j], _mm512_maskz_loadu_ps(lanes, cr)));
      else _mm512_mask_storeu_ps(cr, lanes, acc[r][j]);
    }
  }
}

using TileFn = void (*)(__mmask16, int64_t, Left, const uint16_t*, int64_t, float, float*, int64_t);

// The tiles of every height (1 to kRows) and width (1 to kVecs vectors), so
// that a short last row tile computes no row twice: kTiles[add][rows - 1][vecs - 1].
template <bool kAdd, int... kR>
constexpr std::array<std::array<TileFn, kVecs>, kRows> tiles_by_height(std::integer_sequence<int, kR...>) {
  return {{{tile<kR + 1, 1, kAdd>, tile<kR + 1, 2, kAdd>, tile<kR + 1, 3, kAdd>, tile<kR + 1, 4, kAdd>}...}};
}
constexpr std::array<std::array<TileFn, kVecs>, kRows> kTiles[2] = {
    tiles_by_height<false>(std::make_integer_sequence<int, kRows>{}),
    tiles_by_height<true>(std::make_integer_sequence<int, kRows>{})};

// C (m x n, or C += alpha times it) in panels of kVecs vectors of columns by
// kRows rows.
void product_avx512(int64_t m, int64_t n, int64_t k, Left a, const uint16_t* b, int64_t ldb, bool add, float alpha,
                    float* c, int64_t ldc) {
  constexpr int64_t panel = kVecs * kLanes;
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t width = std::min(panel, n - j0);
    const int64_t vecs = (width + kLanes - 1) / kLanes, tail = width - (vecs - 1) * kLanes;
    const __mmask16 last = first_lanes(tail);
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, m - i0));
      const Left ai{a.a + i0 * a.row_step, a.row_step, a.pair_step};
      kTiles[add][rows - 1][vecs - 1](last, k / 2, ai, b + 2 * j0, ldb, alpha, c + i0 * ldc + j0, ldc);
    }
  }
}

// c[i, j] += alpha x[i, j] for i < m, j < n.
PAX_BF16_TARGET void add_scaled(int64_t m, int64_t n, float alpha, const float* x, int64_t ldx, float* c, int64_t ldc) {
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; j += kLanes) {
      const __mmask16 lanes = first_lanes(n - j);
      const __m512 sum = _mm512_fmadd_ps(scale, _mm512_maskz_loadu_ps(lanes, x + i * ldx + j),
                                         _mm512_maskz_loadu_ps(lanes, c + i * ldc + j));
      _mm512_mask_storeu_ps(c + i * ldc + j, lanes, sum);
    }
}

// ---- AMX

// Tiles 0-3: C (16 x 16 f32); 4, 5: A (16 rows x 32 bf16); 6, 7: B (16
// pairs x 16 columns). All 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

PAX_AMX_TARGET void configure_tiles() {
  // Per call: another library's kernels (oneDNN's) may have loaded their own
  // configuration on this thread since.
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// One block of kM x kN tiles of C over the whole depth.
template <int kM, int kN>
PAX_AMX_TARGET void amx_block(int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* c,
                              int64_t ldc) {
  const int64_t a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;  // bytes
  _tile_zero(0);
  if (kN > 1) _tile_zero(1);
  if (kM > 1) _tile_zero(2);
  if (kM > 1 && kN > 1) _tile_zero(3);
  for (int64_t p = 0; p < k; p += 32) {
    const uint16_t* bp = b + (p / 2) * 2 * ldb;
    _tile_loadd(4, a + p, a_stride);
    _tile_loadd(6, bp, b_stride);
    if (kN > 1) _tile_loadd(7, bp + 32, b_stride);
    if (kM > 1) _tile_loadd(5, a + 16 * lda + p, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    if (kN > 1) _tile_dpbf16ps(1, 4, 7);
    if (kM > 1) _tile_dpbf16ps(2, 5, 6);
    if (kM > 1 && kN > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, c_stride);
  if (kN > 1) _tile_stored(1, c + 16, c_stride);
  if (kM > 1) _tile_stored(2, c + 16 * ldc, c_stride);
  if (kM > 1 && kN > 1) _tile_stored(3, c + 16 * ldc + 16, c_stride);
}

PAX_AMX_TARGET void product_amx(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                                int64_t ldb, float* c, int64_t ldc) {
  configure_tiles();
  asm volatile("" ::: "memory");  // the tile loads read what the caller just wrote
  for (int64_t j0 = 0; j0 < n; j0 += 32) {
    const bool two_cols = j0 + 32 <= n;
    for (int64_t i0 = 0; i0 < m; i0 += 32) {
      const bool two_rows = i0 + 32 <= m;
      const uint16_t* ai = a + i0 * lda;
      const uint16_t* bj = b + 2 * j0;
      float* cij = c + i0 * ldc + j0;
      if (two_rows && two_cols) amx_block<2, 2>(k, ai, lda, bj, ldb, cij, ldc);
      else if (two_rows) amx_block<2, 1>(k, ai, lda, bj, ldb, cij, ldc);
      else if (two_cols) amx_block<1, 2>(k, ai, lda, bj, ldb, cij, ldc);
      else amx_block<1, 1>(k, ai, lda, bj, ldb, cij, ldc);
    }
  }
}

}  // namespace

void product(Unit u, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
             float* c, int64_t ldc) {
  if (u == Unit::amx) {
    PAX_CHECK(m % kRowsPad == 0 && n % kRowsPad == 0 && k % kDepthPad == 0, "attention_bf16::product: sizes ", m, " x ",
              n, " x ", k, " must be multiples of 16, 16 and 32 on AMX");
    return product_amx(m, n, k, a, lda, b, ldb, c, ldc);
  }
  PAX_CHECK(u == Unit::avx512_bf16, "attention_bf16::product: no bf16 unit");
  PAX_CHECK(k % 2 == 0, "attention_bf16::product: the depth ", k, " must be even");
  product_avx512(m, n, k, rows_left(a, lda), b, ldb, false, 1.0f, c, ldc);
}

void product_add(Unit u, int64_t m, int64_t n, int64_t k, Left a, const uint16_t* b, int64_t ldb, float alpha, float* c,
                 int64_t ldc, float* scratch) {
  PAX_CHECK(k % kDepthPad == 0, "attention_bf16::product_add: depth ", k, " must be a multiple of 32");
  if (u == Unit::amx) {
    PAX_CHECK(a.pair_step == 2, "attention_bf16::product_add: AMX takes plain rows only");
    const int64_t m16 = (m + kRowsPad - 1) / kRowsPad * kRowsPad, n16 = (n + kRowsPad - 1) / kRowsPad * kRowsPad;
    product_amx(m16, n16, k, a.a, a.row_step, b, ldb, scratch, n16);
    return add_scaled(m, n, alpha, scratch, n16, c, ldc);
  }
  PAX_CHECK(u == Unit::avx512_bf16, "attention_bf16::product_add: no bf16 unit");
  product_avx512(m, n, k, a, b, ldb, true, alpha, c, ldc);
}

PAX_BF16_TARGET void convert_rows(int64_t m, int64_t n, int64_t n_pad, const float* src, int64_t lds, uint16_t* dst,
                                  int64_t ldd) {
  for (int64_t i = 0; i < m; ++i) {
    const float* s = src + i * lds;
    uint16_t* d = dst + i * ldd;
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + j)));
    for (; j < n; ++j) d[j] = float_to_bf16(s[j]);
    for (; j < n_pad; ++j) d[j] = 0;
  }
}

PAX_BF16_TARGET void convert_transposed(int64_t m, int64_t n, int64_t m_pad, const float* src, int64_t lds,
                                        uint16_t* dst, int64_t ldd) {
  // Blocks of 16 x 16: rows of src read as vectors, written down columns.
  alignas(64) uint16_t block[kLanes][kLanes];
  for (int64_t i0 = 0; i0 < m; i0 += kLanes) {
    const int64_t mi = std::min<int64_t>(kLanes, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
      const int64_t nj = std::min<int64_t>(kLanes, n - j0);
      const __mmask16 cols = first_lanes(nj);
      for (int64_t i = 0; i < mi; ++i) {
        const __m512 v = _mm512_maskz_loadu_ps(cols, src + (i0 + i) * lds + j0);
        _mm256_store_si256(reinterpret_cast<__m256i*>(block[i]), (__m256i)_mm512_cvtneps_pbh(v));
      }
      for (int64_t j = 0; j < nj; ++j) {
        uint16_t* d = dst + (j0 + j) * ldd + i0;
        for (int64_t i = 0; i < mi; ++i) d[i] = block[i][j];
      }
    }
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = m; i < m_pad; ++i) dst[j * ldd + i] = 0;
}

namespace {

// Lanes 2j and 2j + 1 of the result: lane j of lo and of hi (lo in lanes
// 0-15 of x, hi in 16-31).
PAX_BF16_TARGET __m512i interleave_halves(__m512i x) {
  alignas(64) static constexpr uint16_t kOrder[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kOrder), x);
}

// Lanes 2j and 2j + 1 of the result: lane j of even and of odd (j < 16).
PAX_BF16_TARGET __m512i interleave_rows(__m512i even, __m512i odd) {
  alignas(64) static constexpr uint16_t kOrder[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  return _mm512_permutex2var_epi16(even, _mm512_load_si512(kOrder), odd);
}

PAX_BF16_TARGET __mmask32 pair_lanes(int64_t count) {  // the first 2 count lanes, count <= 16
  return count >= kLanes ? ~__mmask32(0) : __mmask32((1u << (2 * count)) - 1u);
}

}  // namespace

PAX_BF16_TARGET void convert_pair_major(int64_t m, int64_t n, int64_t m_pad, const float* src, int64_t lds,
                                        uint16_t* dst, int64_t ld) {
  for (int64_t q = 0; 2 * q < m_pad; ++q) {
    const int64_t r0 = 2 * q, r1 = 2 * q + 1;
    uint16_t* out = dst + q * 2 * ld;
    for (int64_t j = 0; j < n; j += kLanes) {
      const __mmask16 cols = first_lanes(n - j);
      const __m512 even = r0 < m ? _mm512_maskz_loadu_ps(cols, src + r0 * lds + j) : _mm512_setzero_ps();
      const __m512 odd = r1 < m ? _mm512_maskz_loadu_ps(cols, src + r1 * lds + j) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // even in lanes 0-15
      _mm512_mask_storeu_epi16(out + 2 * j, pair_lanes(n - j), interleave_halves(both));
    }
  }
}

namespace {

// pair() where the columns are contiguous (j_stride 1): two rows
// interleaved, 16 columns at a time.
PAX_BF16_TARGET void pair_rows(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src,
                               int64_t p_stride, uint16_t* dst, int64_t ldb) {
  for (int64_t p = 0; p < k_pad; p += 2) {
    uint16_t* out = dst + (p / 2) * 2 * ldb;
    for (int64_t j = 0; j < n_pad; j += kLanes) {
      const __mmask32 cols = first_lanes(std::max<int64_t>(n - j, 0));  // of lanes 0-15: a row
      const __m512i even = p < k ? _mm512_maskz_loadu_epi16(cols, src + p * p_stride + j) : _mm512_setzero_si512();
      const __m512i odd = p + 1 < k ? _mm512_maskz_loadu_epi16(cols, src + (p + 1) * p_stride + j)
                                    : _mm512_setzero_si512();
      _mm512_mask_storeu_epi16(out + 2 * j, pair_lanes(n_pad - j), interleave_rows(even, odd));
    }
  }
}

}  // namespace

#else  // no bf16 units on this architecture: has() is false for them

void product(Unit, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t) {
  PAX_FAIL("attention_bf16::product: this CPU has no bf16 products");
}
void convert_rows(int64_t, int64_t, int64_t, const float*, int64_t, uint16_t*, int64_t) {
  PAX_FAIL("attention_bf16::convert_rows: this CPU has no bf16 products");
}
void convert_transposed(int64_t, int64_t, int64_t, const float*, int64_t, uint16_t*, int64_t) {
  PAX_FAIL("attention_bf16::convert_transposed: this CPU has no bf16 products");
}
void product_add(Unit, int64_t, int64_t, int64_t, Left, const uint16_t*, int64_t, float, float*, int64_t, float*) {
  PAX_FAIL("attention_bf16::product_add: this CPU has no bf16 products");
}
void convert_pair_major(int64_t, int64_t, int64_t, const float*, int64_t, uint16_t*, int64_t) {
  PAX_FAIL("attention_bf16::convert_pair_major: this CPU has no bf16 products");
}

#endif

}  // namespace pax::cpu::attention_bf16

// bf16 products for the CPU attention kernels (attention_bf16.h). The
// functions that use AMX or AVX-512 carry their own target attribute, so
// this file builds with the project's flags and that code runs only where
// has() says the CPU has the unit.
// - AMX: C is computed in blocks of 2 x 2 tiles (32 x 32 floats): per 32 of
//   the depth, two A tiles and two B tiles loaded, four TDPBF16PS.
// - AVX512_BF16: a tile of kRows rows by up to kVecs vectors of 16 columns
//   in registers: per pair of the depth, one load of B per column vector,
//   one broadcast of A per row and kRows x kVecs VDPBF16PS.
#include "pax/backend/cpu/attention_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstring>

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

void override_unit(Unit u) {
  PAX_CHECK(has(u), "attention_bf16: this CPU has no ", u == Unit::amx ? "AMX-BF16" : "AVX512_BF16",
            " products (within PAX_MAX_ISA)");
  overridden.store(int(u), std::memory_order_relaxed);
}

void pair(int64_t k, int64_t n, int64_t k_pad, int64_t n_pad, const uint16_t* src, int64_t p_stride, int64_t j_stride,
          uint16_t* dst, int64_t ldb) {
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

// ---- AVX512_BF16

template <int kNV>
PAX_BF16_TARGET void tile(int rows, __mmask16 last, int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b,
                          int64_t ldb, float* c, int64_t ldc) {
  const uint16_t* ar[kRows];
  for (int r = 0; r < kRows; ++r) ar[r] = a + std::min(r, rows - 1) * lda;
  __m512 acc[kRows][kNV];
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kNV; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[kNV];
    const uint16_t* bp = b + p * 2 * ldb;
    for (int j = 0; j < kNV; ++j) {
      const __m512i v = j + 1 == kNV ? _mm512_maskz_loadu_epi32(last, bp + j * 2 * kLanes)
                                     : _mm512_loadu_si512(bp + j * 2 * kLanes);
      bv[j] = (__m512bh)v;
    }
    for (int r = 0; r < kRows; ++r) {
      int32_t two;
      std::memcpy(&two, ar[r] + 2 * p, sizeof(two));
      const __m512bh av = (__m512bh)_mm512_set1_epi32(two);
      for (int j = 0; j < kNV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < kNV; ++j)
      _mm512_mask_storeu_ps(c + r * ldc + j * kLanes, j + 1 == kNV ? last : __mmask16(0xFFFF), acc[r][j]);
}

using TileFn = void (*)(int, __mmask16, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t);
constexpr TileFn kTiles[kVecs] = {tile<1>, tile<2>, tile<3>, tile<4>};

void product_avx512(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                    float* c, int64_t ldc) {
  constexpr int64_t panel = kVecs * kLanes;
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t width = std::min(panel, n - j0);
    const int64_t vecs = (width + kLanes - 1) / kLanes, tail = width - (vecs - 1) * kLanes;
    const auto last = __mmask16((1u << tail) - 1u);
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, m - i0));
      kTiles[vecs - 1](rows, last, k / 2, a + i0 * lda, lda, b + 2 * j0, ldb, c + i0 * ldc + j0, ldc);
    }
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
  PAX_CHECK(m % kRowsPad == 0 && n % kRowsPad == 0 && k % kDepthPad == 0, "attention_bf16::product: sizes ", m, " x ",
            n, " x ", k, " must be multiples of 16, 16 and 32");
  if (u == Unit::amx) return product_amx(m, n, k, a, lda, b, ldb, c, ldc);
  PAX_CHECK(u == Unit::avx512_bf16, "attention_bf16::product: no bf16 unit");
  product_avx512(m, n, k, a, lda, b, ldb, c, ldc);
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
      const auto cols = __mmask16((1u << nj) - 1u);
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

#endif

}  // namespace pax::cpu::attention_bf16

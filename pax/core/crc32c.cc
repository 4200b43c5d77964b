// CRC-32C: slicing-by-8 tables, the SSE4.2 path with three interleaved
// streams, and GF(2) polynomial arithmetic to shift and combine CRCs.
#include "pax/core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PAX_CRC32C_X86 1
#endif

namespace pax {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// kTables[k][b]: the CRC register after byte b followed by k zero bytes, so
// that eight bytes are folded with eight independent lookups.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}
constexpr Tables kTables = make_tables();

uint64_t load_le64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return w;
}

// Register update without the initial/final inversion.
uint32_t update_portable(uint32_t crc, const unsigned char* p, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = kTables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    --n;
  }
  for (; n >= 8; p += 8, n -= 8) {
    const uint64_t w = load_le64(p) ^ crc;
    crc = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
          kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
          kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
  }
  while (n-- > 0) crc = kTables[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

// a * b modulo the polynomial, both in reflected bit order (x^0 is bit 31).
constexpr uint32_t mult_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// kX2n[k] = x^(2^k) mod p.
constexpr std::array<uint32_t, 64> make_x2n() {
  std::array<uint32_t, 64> t{};
  uint32_t p = 1u << 30;  // x^1
  for (auto& v : t) {
    v = p;
    p = mult_mod_p(p, p);
  }
  return t;
}
constexpr std::array<uint32_t, 64> kX2n = make_x2n();

// x^(8 * nbytes) mod p: multiplying a register by it appends nbytes zeros.
constexpr uint32_t zeros_operator(uint64_t nbytes) {
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;         // 8 = 2^3 bits per byte
  for (; nbytes != 0; nbytes >>= 1, ++k) {
    if (nbytes & 1) p = mult_mod_p(kX2n[k & 63], p);
  }
  return p;
}

#ifdef PAX_CRC32C_X86
// Each stream covers kStride bytes per round; the crc32 instruction has a
// latency of three cycles and a throughput of one, so three streams keep it busy.
constexpr size_t kStride = 4096;
constexpr uint32_t kShift1 = zeros_operator(kStride);
constexpr uint32_t kShift2 = zeros_operator(2 * kStride);

__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t crc, const unsigned char* p, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = _mm_crc32_u8(crc, *p++);
    --n;
  }
  uint64_t c0 = crc;
  for (; n >= 3 * kStride; p += 3 * kStride, n -= 3 * kStride) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      c0 = _mm_crc32_u64(c0, load_le64(p + i));
      c1 = _mm_crc32_u64(c1, load_le64(p + kStride + i));
      c2 = _mm_crc32_u64(c2, load_le64(p + 2 * kStride + i));
    }
    c0 = mult_mod_p(kShift2, uint32_t(c0)) ^ mult_mod_p(kShift1, uint32_t(c1)) ^ uint32_t(c2);
  }
  for (; n >= 8; p += 8, n -= 8) c0 = _mm_crc32_u64(c0, load_le64(p));
  crc = uint32_t(c0);
  while (n-- > 0) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}
#endif

using UpdateFn = uint32_t (*)(uint32_t, const unsigned char*, size_t);

UpdateFn pick_update() {
#ifdef PAX_CRC32C_X86
  if (__builtin_cpu_supports("sse4.2")) return update_sse42;
#endif
  return update_portable;
}

}  // namespace

namespace detail {

bool crc32c_sse42_available() {
#ifdef PAX_CRC32C_X86
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  return ~update_portable(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t crc32c_extend_sse42(uint32_t crc, const void* data, size_t n) {
#ifdef PAX_CRC32C_X86
  return ~update_sse42(~crc, static_cast<const unsigned char*>(data), n);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

}  // namespace detail

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  static const UpdateFn update = pick_update();
  return ~update(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return mult_mod_p(zeros_operator(len_b), crc_a) ^ crc_b;
}

}  // namespace pax

// CRC-32C against published check values and a bitwise reference, both
// implementations, every alignment and length class, extend and combine.
#include "pax/core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace pax {
namespace {

// One bit at a time, straight from the definition (reflected 0x82F63B78).
uint32_t reference_crc32c(const unsigned char* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(gen());
  return v;
}

TEST(Crc32c, CheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, BothImplementationsMatchTheReference) {
  // Lengths around the 8-byte words and the 3 x 4096-byte interleaved rounds,
  // at every starting alignment.
  const std::vector<unsigned char> data = random_bytes(3 * 4096 * 3 + 64, 7);
  const size_t lengths[] = {0, 1, 7, 8, 9, 63, 64, 65, 4095, 4096, 12287, 12288, 12289, 24583, 3 * 4096 * 3};
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : lengths) {
      const unsigned char* p = data.data() + offset;
      const uint32_t want = reference_crc32c(p, n);
      EXPECT_EQ(detail::crc32c_extend_portable(0, p, n), want) << "portable, offset " << offset << " n " << n;
      if (detail::crc32c_sse42_available()) {
        EXPECT_EQ(detail::crc32c_extend_sse42(0, p, n), want) << "sse4.2, offset " << offset << " n " << n;
      }
      EXPECT_EQ(crc32c(p, n), want);
    }
  }
}

TEST(Crc32c, ExtendAndCombine) {
  const std::vector<unsigned char> data = random_bytes(100000, 11);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split : {size_t(0), size_t(1), size_t(5000), size_t(65536), data.size()}) {
    const uint32_t a = crc32c(data.data(), split);
    const uint32_t b = crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(crc32c_extend(a, data.data() + split, data.size() - split), whole) << split;
    EXPECT_EQ(crc32c_combine(a, b, data.size() - split), whole) << split;
  }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  std::vector<unsigned char> data = random_bytes(256, 3);
  const uint32_t good = crc32c(data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_NE(crc32c(data.data(), data.size()), good) << bit;
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace pax

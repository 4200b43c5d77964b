// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum stored for every tensor of a checkpoint and, masked, for every
// TFRecord record (summaries, datasets). It uses the SSE4.2 crc32
// instruction (three interleaved streams) when the CPU has it, a table-driven
// slicing-by-8 loop otherwise; both give identical results.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pax {

// CRC-32C of `n` bytes: crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// Continues a CRC over more bytes: crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
// crc32c(a + b) from crc32c(a), crc32c(b) and the length of b.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

namespace detail {
// The two implementations behind crc32c_extend, exposed so that tests can
// compare them. The SSE4.2 one must only be called when it is available.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_extend_sse42(uint32_t crc, const void* data, size_t n);
bool crc32c_sse42_available();
}  // namespace detail

}  // namespace pax

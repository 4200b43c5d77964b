// Reading and writing the safetensors format (Hugging Face), the tensor file
// of a checkpoint:
//
//   8 bytes    N, the header length, unsigned little-endian
//   N bytes    a UTF-8 JSON object: for each tensor
//                "<name>": {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}
//              and optionally "__metadata__": {"<key>": "<string>", ...};
//              the writer pads it with spaces to a multiple of 8 bytes
//   the rest   the byte buffer; offsets are relative to its start, row-major
//              little-endian data, tensors back to back covering it exactly
//
// paxcc dtypes map to BOOL, U8, U32, I32, I64, BF16, F16, F32, F64. The writer
// lays data out by decreasing element size so that every tensor is aligned
// for zero-copy readers. The reader treats its input as hostile: every number
// is checked before use (header length against the file and a 100 MB cap,
// offsets against each other and the buffer, shapes against dtypes with
// overflow checks, duplicate names, non-JSON, BOOL bytes other than 0 and 1),
// and every failure is a pax::Error naming the file and, where there is one,
// the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pax/core/array.h"

namespace pax::train {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct NamedArray {
  std::string name;
  Array array;  // concrete, on the host
};

// Writes `tensors` to a new file at `path` (replacing it) and fsyncs it.
// Returns the CRC32C of each tensor's bytes, in the order given. Names must be
// unique and not "__metadata__".
std::vector<uint32_t> write_safetensors(const std::string& path, std::span<const NamedArray> tensors,
                                        const std::map<std::string, std::string>& metadata = {});
// The same bytes in memory (for tests and tools).
std::string serialize_safetensors(std::span<const NamedArray> tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// "F32", "BF16", ... and back (throws pax::Error for other names).
const char* safetensors_dtype_name(DType dtype);
DType safetensors_dtype_from_name(const std::string& name, const std::string& context);

// One tensor of a header. Offsets are relative to the byte buffer.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the byte buffer (8 + N)
  uint64_t data_size = 0;
};

// Parses and validates a header (the JSON text) for a buffer of `data_size`
// bytes. `file` names the file in error messages.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_size, const std::string& file);

// An open safetensors file with a validated header; tensors are read on demand.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // nullptr when there is no tensor of that name.
  const SafetensorsEntry* find(const std::string& name) const;
  // Reads a tensor into a new host Array; *crc receives the CRC32C of its
  // bytes, computed while reading.
  Array read(const SafetensorsEntry& entry, uint32_t* crc = nullptr, bool weak_type = false) const;
  // Reads bytes [offset, offset + n) of a tensor's data into dst (a partial
  // read: the caller checks CRCs); a range past the tensor is an error.
  void read_bytes(const SafetensorsEntry& entry, uint64_t offset, uint64_t n, void* dst) const;

 private:
  struct Impl;
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
  std::unique_ptr<Impl> impl_;
};

// A whole file (or an in-memory image of one), validated and read.
struct SafetensorsContents {
  std::vector<NamedArray> tensors;  // in data order
  std::vector<uint32_t> crc32c;     // of each tensor's bytes
  std::map<std::string, std::string> metadata;
};
SafetensorsContents read_safetensors(const std::string& path);
SafetensorsContents read_safetensors(std::span<const std::byte> bytes, const std::string& what = "<memory>");

}  // namespace pax::train

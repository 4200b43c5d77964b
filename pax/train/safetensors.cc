// safetensors: header layout and serialisation, validating header parser,
// file reader (positional reads, CRC computed chunk by chunk) and in-memory
// reader.
#include "pax/train/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "pax/core/buffer.h"
#include "pax/core/device_put.h"
#include "pax/core/error.h"
#include "pax/core/crc32c.h"
#include "pax/train/fs_util.h"
#include "pax/train/json_check.h"

namespace pax::train {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";
// Headers only nest as deep as {"t": {"shape": [..]}}; anything deeper is malformed.
constexpr int kMaxHeaderDepth = 8;
// Reads are split so that the CRC of each chunk runs while it is still in cache.
constexpr size_t kReadChunk = size_t(4) << 20;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::bool_, "BOOL"}, {DType::u8, "U8"},   {DType::u32, "U32"}, {DType::i32, "I32"}, {DType::i64, "I64"},
    {DType::bf16, "BF16"},  {DType::f16, "F16"}, {DType::f32, "F32"}, {DType::f64, "F64"},
};
// Valid safetensors dtypes that paxcc has no array type for.
constexpr const char* kForeignDTypes[] = {"I8", "I16", "U16", "U64", "F8_E5M2", "F8_E4M3"};

std::string file_context(const std::string& file) { return "safetensors file '" + file + "'"; }
std::string tensor_context(const std::string& file, const std::string& name) {
  return file_context(file) + ": tensor '" + name + "'";
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = char((v >> (8 * i)) & 0xFF);
}

// The header length N from the first 8 bytes, checked against the file size.
uint64_t checked_header_length(const unsigned char* first8, uint64_t file_size, const std::string& file) {
  const uint64_t n = load_le64(first8);
  PAX_CHECK(n <= kSafetensorsMaxHeaderBytes, file_context(file), ": header length ", n, " is over the 100 MB limit (",
            kSafetensorsMaxHeaderBytes, " bytes); the length field is corrupted");
  PAX_CHECK(n <= file_size - 8, file_context(file), ": header length ", n, " runs past the end of the file (",
            file_size, " bytes); the file is truncated or the length field is corrupted");
  return n;
}

void check_file_size(uint64_t size, const std::string& file) {
  PAX_CHECK(size >= 8, file_context(file), ": the file is ", size,
            " bytes, too short to hold the 8-byte header length (truncated file)");
}

uint64_t json_offset(const json& v, const std::string& context) {
  PAX_CHECK(v.is_number_unsigned(), context, ": data_offsets must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, const std::string& file) {
  const std::string ctx = tensor_context(file, name);
  PAX_CHECK(v.is_object(), ctx, ": expected an object {dtype, shape, data_offsets}, got ", v.dump());
  for (const auto& [key, value] : v.items()) {
    PAX_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", ctx, ": unexpected field \"", key,
              "\" (valid: dtype, shape, data_offsets)");
  }
  PAX_CHECK(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), ctx,
            ": needs the fields dtype, shape and data_offsets, got ", v.dump());
  const json& dt = v["dtype"];
  PAX_CHECK(dt.is_string(), ctx, ": dtype must be a string, got ", dt.dump());
  SafetensorsEntry e;
  e.name = name;
  e.dtype = safetensors_dtype_from_name(dt.get<std::string>(), ctx);

  const json& shape = v["shape"];
  PAX_CHECK(shape.is_array(), ctx, ": shape must be a list of non-negative integers, got ", shape.dump());
  std::vector<int64_t> dims;
  // The product of the non-zero dimensions must fit, so that strides of an
  // empty array cannot overflow either.
  int64_t nonzero_product = 1;
  bool empty = false;
  for (const json& d : shape) {
    PAX_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()), ctx,
              ": shape must be a list of non-negative integers, got ", shape.dump());
    const int64_t dim = int64_t(d.get<uint64_t>());
    if (dim == 0) {
      empty = true;
    } else {
      PAX_CHECK(!__builtin_mul_overflow(nonzero_product, dim, &nonzero_product), ctx, ": shape ", shape.dump(),
                " has more elements than fit in 64 bits");
    }
    dims.push_back(dim);
  }
  e.shape = Shape(std::move(dims));
  uint64_t nbytes = 0;
  PAX_CHECK(!__builtin_mul_overflow(uint64_t(empty ? 0 : nonzero_product), uint64_t(itemsize(e.dtype)), &nbytes), ctx,
            ": shape ", shape.dump(), " has more bytes than fit in 64 bits");

  const json& off = v["data_offsets"];
  PAX_CHECK(off.is_array() && off.size() == 2, ctx, ": data_offsets must be [begin, end], got ", off.dump());
  e.begin = json_offset(off[0], ctx);
  e.end = json_offset(off[1], ctx);
  PAX_CHECK(e.begin <= e.end, ctx, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  PAX_CHECK(e.end - e.begin == nbytes, ctx, ": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
            " bytes but dtype ", dt.get<std::string>(), " and shape ", shape.dump(), " need ", nbytes);
  return e;
}

// Tensors in data order must tile [0, data_size) exactly.
void check_layout(std::vector<SafetensorsEntry>& tensors, uint64_t data_size, const std::string& file) {
  std::sort(tensors.begin(), tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expect = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : tensors) {
    PAX_CHECK(e.end <= data_size, tensor_context(file, e.name), ": data_offsets [", e.begin, ", ", e.end,
              "] extend past the end of the data (", data_size, " bytes); the file is truncated or corrupted");
    PAX_CHECK(e.begin >= expect, tensor_context(file, e.name), ": data_offsets [", e.begin, ", ", e.end,
              "] overlap tensor '", prev ? prev->name : "", "' [", prev ? prev->begin : 0, ", ", prev ? prev->end : 0,
              "]");
    PAX_CHECK(e.begin == expect, tensor_context(file, e.name), ": data_offsets [", e.begin, ", ", e.end,
              "] leave bytes [", expect, ", ", e.begin, ") of the data unused");
    expect = e.end;
    prev = &e;
  }
  PAX_CHECK(expect == data_size, file_context(file), ": the data is ", data_size, " bytes but the tensors end at ",
            expect, prev ? " (last tensor '" + prev->name + "')" : std::string(),
            "; the file has trailing bytes or its header is corrupted");
}

struct Layout {
  std::string prefix;              // 8-byte length + padded header
  std::vector<size_t> data_order;  // tensor indices in data order
  uint64_t data_size = 0;
};

Layout plan_layout(std::span<const NamedArray> tensors, const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string> names;
  for (const NamedArray& t : tensors) {
    PAX_CHECK(t.name != kMetadataKey, "write_safetensors: a tensor cannot be named \"__metadata__\"");
    PAX_CHECK(names.insert(t.name).second, "write_safetensors: two tensors are named '", t.name, "'");
    PAX_CHECK(t.array.defined() && t.array.is_concrete(), "write_safetensors: tensor '", t.name,
              "' is not a concrete array (a traced value cannot be saved)");
  }
  Layout layout;
  layout.data_order.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) layout.data_order[i] = i;
  // Larger elements first: with an 8-aligned buffer every tensor is aligned.
  std::stable_sort(layout.data_order.begin(), layout.data_order.end(), [&](size_t a, size_t b) {
    return itemsize(tensors[a].array.dtype()) > itemsize(tensors[b].array.dtype());
  });
  std::vector<uint64_t> begin(tensors.size());
  for (size_t i : layout.data_order) {
    begin[i] = layout.data_size;
    layout.data_size += tensors[i].array.nbytes();
  }
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Array& a = tensors[i].array;
    header[tensors[i].name] = {{"dtype", safetensors_dtype_name(a.dtype())},
                               {"shape", a.shape().dims()},
                               {"data_offsets", {begin[i], begin[i] + a.nbytes()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  PAX_CHECK(text.size() <= kSafetensorsMaxHeaderBytes, "write_safetensors: the header would be ", text.size(),
            " bytes, over the 100 MB that readers accept (too many tensors or too long names)");
  layout.prefix.resize(8);
  store_le64(text.size(), layout.prefix.data());
  layout.prefix += text;
  return layout;
}

SafetensorsHeader parse_header_checked(std::string_view text, uint64_t header_length, uint64_t file_size,
                                       const std::string& file) {
  SafetensorsHeader h = parse_safetensors_header(text, file_size - 8 - header_length, file);
  h.data_start = 8 + header_length;
  return h;
}

// A C++ bool holding anything but 0 or 1 is undefined behaviour in every
// kernel that reads it, so BOOL bytes from a file are checked before use.
void check_bool_bytes(const SafetensorsEntry& e, const unsigned char* p, size_t n, uint64_t first_element,
                      const std::string& file) {
  if (e.dtype != DType::bool_) return;
  unsigned char bad = 0;
  for (size_t i = 0; i < n; ++i) bad |= p[i] & 0xFE;  // one vectorised pass; find the culprit only on failure
  if (bad == 0) return;
  size_t i = 0;
  while ((p[i] & 0xFE) == 0) ++i;
  PAX_FAIL(tensor_context(file, e.name), ": element ", first_element + i, " of a BOOL tensor is byte ", int(p[i]),
           " (BOOL bytes must be 0 or 1); the file is corrupted");
}

Array new_array(const SafetensorsEntry& e, std::shared_ptr<Buffer> buffer, bool weak_type) {
  // Read on the host, placed where arrays made from host values go.
  return move_uncommitted(Array(AVal{e.shape, e.dtype, weak_type}, std::move(buffer)), default_device());
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  PAX_FAIL("safetensors: no safetensors name for dtype ", dtype);
}

DType safetensors_dtype_from_name(const std::string& name, const std::string& context) {
  for (const DTypeName& d : kDTypeNames) {
    if (name == d.name) return d.dtype;
  }
  for (const char* foreign : kForeignDTypes) {
    PAX_CHECK(name != foreign, context, ": dtype ", name,
              " has no paxcc array type (paxcc reads BOOL, U8, U32, I32, I64, BF16, F16, F32, F64)");
  }
  PAX_FAIL(context, ": unknown dtype \"", name, "\" (valid: BOOL, U8, U32, I32, I64, BF16, F16, F32, F64)");
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_size, const std::string& file) {
  PAX_CHECK(!text.empty() && text.front() == '{', file_context(file),
            ": the header does not start with '{' (not a safetensors file, or a corrupted header)");
  check_json(text, file_context(file) + ": header", kMaxHeaderDepth);
  const json j = json::parse(text.begin(), text.end());
  PAX_CHECK(j.is_object(), file_context(file), ": the header is not a JSON object");
  SafetensorsHeader h;
  h.data_size = data_size;
  for (const auto& [name, value] : j.items()) {
    if (name == kMetadataKey) {
      PAX_CHECK(value.is_object(), file_context(file), ": __metadata__ must be an object of strings, got ",
                value.dump());
      for (const auto& [k, v] : value.items()) {
        PAX_CHECK(v.is_string(), file_context(file), ": __metadata__ entry \"", k, "\" must be a string, got ",
                  v.dump());
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(name, value, file));
  }
  check_layout(h.tensors, data_size, file);
  return h;
}

std::string serialize_safetensors(std::span<const NamedArray> tensors,
                                  const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan_layout(tensors, metadata);
  std::string out = layout.prefix;
  out.reserve(out.size() + layout.data_size);
  for (size_t i : layout.data_order) {
    const Array a = device_get(tensors[i].array);  // staged on the host
    out.append(static_cast<const char*>(a.data()), a.nbytes());
  }
  return out;
}

std::vector<uint32_t> write_safetensors(const std::string& path, std::span<const NamedArray> tensors,
                                        const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan_layout(tensors, metadata);
  std::vector<uint32_t> crcs(tensors.size());
  std::vector<fs::ConstBuffer> buffers{{layout.prefix.data(), layout.prefix.size()}};
  // Arrays on a device are staged on the host (held until written).
  std::vector<Array> staged;
  staged.reserve(tensors.size());
  for (size_t i : layout.data_order) {
    staged.push_back(device_get(tensors[i].array));
    const Array& a = staged.back();
    crcs[i] = crc32c(a.data(), a.nbytes());
    buffers.push_back({a.data(), a.nbytes()});
  }
  fs::File f = fs::File::create(path);
  f.write_all(buffers);
  f.sync();
  f.close();
  return crcs;
}

// ---------------------------------------------------------------------------
// File reader

struct SafetensorsReader::Impl {
  fs::File file;
};

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), impl_(std::make_unique<Impl>()) {
  impl_->file = fs::File::open_read(path);
  const uint64_t size = impl_->file.size();
  check_file_size(size, path);
  unsigned char first8[8];
  impl_->file.pread_exact(first8, 8, 0);
  const uint64_t n = checked_header_length(first8, size, path);
  std::string text(size_t(n), '\0');
  impl_->file.pread_exact(text.data(), text.size(), 8);
  header_ = parse_header_checked(text, n, size, path);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Array SafetensorsReader::read(const SafetensorsEntry& e, uint32_t* crc, bool weak_type) const {
  const uint64_t nbytes = e.end - e.begin;
  auto buffer = Buffer::allocate(size_t(nbytes));
  auto* dst = static_cast<unsigned char*>(buffer->data());
  uint32_t c = 0;
  for (uint64_t done = 0; done < nbytes;) {
    const size_t len = size_t(std::min<uint64_t>(kReadChunk, nbytes - done));
    impl_->file.pread_exact(dst + done, len, header_.data_start + e.begin + done);
    c = crc32c_extend(c, dst + done, len);
    check_bool_bytes(e, dst + done, len, done, path_);
    done += len;
  }
  if (crc) *crc = c;
  return new_array(e, std::move(buffer), weak_type);
}

void SafetensorsReader::read_bytes(const SafetensorsEntry& e, uint64_t offset, uint64_t n, void* dst) const {
  PAX_CHECK(offset <= e.end - e.begin && n <= e.end - e.begin - offset, tensor_context(path_, e.name), ": bytes [",
            offset, ", ", offset + n, ") are outside its ", e.end - e.begin, " bytes");
  auto* p = static_cast<unsigned char*>(dst);
  for (uint64_t done = 0; done < n;) {
    const size_t len = size_t(std::min<uint64_t>(kReadChunk, n - done));
    impl_->file.pread_exact(p + done, len, header_.data_start + e.begin + offset + done);
    check_bool_bytes(e, p + done, len, offset + done, path_);
    done += len;
  }
}

SafetensorsContents read_safetensors(const std::string& path) {
  SafetensorsReader reader(path);
  SafetensorsContents out;
  out.metadata = reader.header().metadata;
  for (const SafetensorsEntry& e : reader.header().tensors) {
    uint32_t crc = 0;
    out.tensors.push_back({e.name, reader.read(e, &crc)});
    out.crc32c.push_back(crc);
  }
  return out;
}

SafetensorsContents read_safetensors(std::span<const std::byte> bytes, const std::string& what) {
  check_file_size(bytes.size(), what);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint64_t n = checked_header_length(p, bytes.size(), what);
  const SafetensorsHeader h =
      parse_header_checked(std::string_view(reinterpret_cast<const char*>(p + 8), size_t(n)), n, bytes.size(), what);
  SafetensorsContents out;
  out.metadata = h.metadata;
  for (const SafetensorsEntry& e : h.tensors) {
    const size_t nbytes = size_t(e.end - e.begin);
    auto buffer = Buffer::allocate(nbytes);
    if (nbytes > 0) std::memcpy(buffer->data(), p + h.data_start + e.begin, nbytes);
    check_bool_bytes(e, static_cast<const unsigned char*>(buffer->data()), nbytes, 0, what);
    out.crc32c.push_back(crc32c(buffer->data(), nbytes));
    out.tensors.push_back({e.name, new_array(e, std::move(buffer), false)});
  }
  return out;
}

}  // namespace pax::train

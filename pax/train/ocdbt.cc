// OCDBT, read-only: object framing (magic, length, version, compression,
// CRC-32C), the data file table, the manifest's latest version, and a walk
// of the B+tree that indexes every key to an inline value or a byte range of
// a data file. Encodings (TensorStore's format): unsigned LEB128 varints,
// little-endian fixed-width numbers, big-endian magics, and arrays of
// records stored a field at a time.
#include "pax/train/ocdbt.h"

#include <fmt/format.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <variant>

#include "pax/core/crc32c.h"
#include "pax/core/error.h"
#include "pax/train/fs_util.h"

namespace pax::train {

namespace stdfs = std::filesystem;

namespace {

constexpr uint32_t kManifestMagic = 0x0CDB3A2A, kBtreeNodeMagic = 0x0CDB20DE;
constexpr uint64_t kMissing = ~uint64_t(0);
constexpr size_t kMaxDecodedBytes = size_t(1) << 31;  // a node is at most max_decoded_node_bytes (Orbax: 100 MB)

// Reads an encoded body front to back; every error names `what`.
class Cursor {
 public:
  Cursor(std::string_view data, std::string what) : d_(data), what_(std::move(what)) {}
  uint8_t byte() {
    need(1);
    return uint8_t(d_[p_++]);
  }
  std::string_view bytes(uint64_t n) {
    need(n);
    std::string_view v = d_.substr(p_, size_t(n));
    p_ += size_t(n);
    return v;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      const uint8_t b = byte();
      PAX_CHECK(shift < 63 || b <= 1, what_, ": a varint overflows 64 bits at byte ", p_ - 1);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    PAX_FAIL(what_, ": a varint longer than 10 bytes at byte ", p_);
  }
  // A varint that must be at most `limit` (a count or length).
  uint64_t bounded(uint64_t limit, const char* field) {
    const uint64_t v = varint();
    PAX_CHECK(v <= limit, what_, ": ", field, " ", v, " is above ", limit);
    return v;
  }
  template <class T>
  T little_endian() {
    const std::string_view b = bytes(sizeof(T));
    T v = 0;
    for (size_t i = sizeof(T); i-- > 0;) v = T((uint64_t(v) << 8) | uint8_t(b[i]));
    return v;
  }
  void expect_end() const {
    PAX_CHECK(p_ == d_.size(), what_, ": ", d_.size() - p_, " bytes left over after the encoding ends");
  }
  const std::string& what() const { return what_; }
  size_t position() const { return p_; }

 private:
  void need(uint64_t n) const {
    PAX_CHECK(n <= d_.size() - p_, what_, ": cut short (", n, " more bytes needed at byte ", p_, " of ", d_.size(),
              ")");
  }
  std::string_view d_;
  size_t p_ = 0;
  std::string what_;
};

std::string zstd_frame(std::string_view in, const std::string& what) {
  ZSTD_DStream* z = ZSTD_createDStream();
  PAX_CHECK(z, what, ": zstd cannot start");
  std::string out;
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  size_t rc = 1;
  while (rc != 0) {
    const size_t have = out.size();
    PAX_CHECK(have < kMaxDecodedBytes, what, ": decompresses to more than ", kMaxDecodedBytes, " bytes");
    out.resize(have + std::max<size_t>(ZSTD_DStreamOutSize(), have));
    ZSTD_outBuffer dst{out.data(), out.size(), have};
    rc = ZSTD_decompressStream(z, &dst, &src);
    out.resize(dst.pos);
    if (ZSTD_isError(rc)) {
      const std::string why = ZSTD_getErrorName(rc);
      ZSTD_freeDStream(z);
      PAX_FAIL(what, ": zstd: ", why);
    }
    if (rc != 0 && src.pos == src.size && dst.pos < dst.size) {
      ZSTD_freeDStream(z);
      PAX_FAIL(what, ": the zstd frame is cut short");
    }
  }
  ZSTD_freeDStream(z);
  PAX_CHECK(src.pos == src.size, what, ": ", src.size - src.pos, " bytes after the zstd frame");
  return out;
}

// The body of one stored object: magic, length and CRC checked, decompressed.
std::string unframe(std::string_view stored, uint32_t magic, const std::string& what) {
  PAX_CHECK(stored.size() >= 12 + 2 + 4, what, ": ", stored.size(), " bytes is too short for an OCDBT object");
  uint32_t got_magic = 0;
  for (int i = 0; i < 4; ++i) got_magic = (got_magic << 8) | uint8_t(stored[size_t(i)]);
  PAX_CHECK(got_magic == magic, what, fmt::format(": magic {:#010x}, expected {:#010x}", got_magic, magic));
  Cursor header(stored.substr(4, 8), what);
  const uint64_t length = header.little_endian<uint64_t>();
  PAX_CHECK(length == stored.size(), what, ": the header says ", length, " bytes, there are ", stored.size());
  Cursor tail(stored.substr(stored.size() - 4), what);
  const uint32_t crc = tail.little_endian<uint32_t>();
  const uint32_t computed = crc32c(stored.data(), stored.size() - 4);
  PAX_CHECK(crc == computed, what, fmt::format(": CRC-32C {:#010x} does not match the bytes' {:#010x}", crc, computed));
  Cursor c(stored.substr(12, stored.size() - 16), what);
  const uint64_t version = c.varint();
  PAX_CHECK(version == 0, what, ": format version ", version, "; paxcc reads version 0");
  const uint64_t compression = c.varint();
  PAX_CHECK(compression <= 1, what, ": compression method ", compression, " (0: none, 1: zstd)");
  // The body: what follows the two varints, up to the CRC.
  const std::string_view body = stored.substr(12 + c.position(), stored.size() - 16 - c.position());
  return compression == 1 ? zstd_frame(body, what) : std::string(body);
}

struct DataFile {
  std::string base, relative;
};

std::vector<DataFile> read_file_table(Cursor& c) {
  const uint64_t n = c.bounded(1u << 24, "data file count");
  std::vector<uint64_t> prefix(n, 0), suffix(n), base(n);
  for (uint64_t i = 1; i < n; ++i) prefix[i] = c.bounded(65535, "path prefix length");
  for (uint64_t i = 0; i < n; ++i) suffix[i] = c.bounded(65535, "path suffix length");
  for (uint64_t i = 0; i < n; ++i) base[i] = c.bounded(65535, "base path length");
  std::vector<DataFile> files(n);
  std::string previous;
  for (uint64_t i = 0; i < n; ++i) {
    PAX_CHECK(prefix[i] <= previous.size(), c.what(), ": data file ", i, " shares ", prefix[i],
              " bytes with a path of ", previous.size());
    std::string path = previous.substr(0, size_t(prefix[i])) + std::string(c.bytes(suffix[i]));
    PAX_CHECK(base[i] <= path.size(), c.what(), ": data file ", i, "'s base path is longer than its path");
    files[i] = {path.substr(0, size_t(base[i])), path.substr(size_t(base[i]))};
    previous = std::move(path);
  }
  return files;
}

struct Ref {
  uint64_t file = 0, offset = 0, length = 0;
  bool missing() const { return offset == kMissing && length == kMissing; }
};

// n references stored a field at a time.
std::vector<Ref> read_refs(Cursor& c, size_t n, size_t num_files) {
  std::vector<Ref> refs(n);
  for (Ref& r : refs) r.file = c.bounded(num_files ? num_files - 1 : 0, "data file index");
  for (Ref& r : refs) r.offset = c.varint();
  for (Ref& r : refs) r.length = c.varint();
  for (const Ref& r : refs)
    PAX_CHECK(r.missing() || (r.offset <= (uint64_t(1) << 62) && r.length <= (uint64_t(1) << 62)), c.what(),
              ": a reference of offset ", r.offset, " and length ", r.length, " is out of range");
  return refs;
}

// Where a value is: its bytes, or a range of a file below the database's directory.
struct Location {
  std::string path;  // relative to the database's directory
  uint64_t offset = 0, length = 0;
};
using Value = std::variant<std::string, Location>;

class OcdbtStore : public KeyValueReader {
 public:
  explicit OcdbtStore(std::string dir) : dir_(std::move(dir)) {
    const std::string manifest_path = (stdfs::path(dir_) / "manifest.ocdbt").string();
    std::string body = unframe(fs::read_file(manifest_path, kMaxCheckpointFileBytes), kManifestMagic, manifest_path);
    Cursor c(body, manifest_path);
    c.bytes(16);  // uuid
    const uint8_t kind = c.byte();
    PAX_CHECK(kind <= 1, manifest_path, ": manifest kind ", int(kind), " (0: single, 1: numbered)");
    c.bounded(uint64_t(1) << 32, "max_inline_value_bytes");
    c.bounded(uint64_t(1) << 32, "max_decoded_node_bytes");
    const uint8_t arity_log2 = c.byte();
    PAX_CHECK(arity_log2 >= 1 && arity_log2 <= 16, manifest_path, ": version tree arity log2 ", int(arity_log2));
    if (c.bounded(1, "compression method") == 1) c.little_endian<uint32_t>();  // zstd level
    std::string where = manifest_path;
    if (kind == 1) {  // the versions are in the highest numbered manifest.<016x>
      std::string latest;
      for (const auto& e : stdfs::directory_iterator(dir_)) {
        const std::string n = e.path().filename().string();
        if (n.size() == 9 + 16 && n.starts_with("manifest.") && n != "manifest.ocdbt" && n > latest) latest = n;
      }
      PAX_CHECK(!latest.empty(), manifest_path, ": a numbered manifest without manifest.<generation> files beside it");
      c.expect_end();
      where = (stdfs::path(dir_) / latest).string();
      body = unframe(fs::read_file(where, kMaxCheckpointFileBytes), kManifestMagic, where);
      c = Cursor(body, where);
      c.bytes(16);
      c.byte();
      c.varint();
      c.varint();
      c.byte();
      if (c.varint() == 1) c.little_endian<uint32_t>();
    }
    const std::vector<DataFile> files = read_file_table(c);
    // The inline versions (a version tree leaf); the last is the latest.
    const uint64_t n = c.bounded(uint64_t(1) << arity_log2, "inline version count");
    PAX_CHECK(n >= 1, where, ": no versions");
    for (uint64_t i = 0; i < n; ++i) c.varint();  // generation numbers
    std::vector<uint8_t> heights(n);
    for (uint8_t& h : heights) h = c.byte();
    const std::vector<Ref> roots = read_refs(c, size_t(n), files.size());
    // Statistics, commit times and the version tree nodes are not needed.
    const Ref root = roots.back();
    if (!root.missing()) visit(root, files, "", heights.back(), "");
  }

  std::optional<std::string> read(const std::string& key) const override {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    if (const std::string* inline_value = std::get_if<std::string>(&it->second)) return *inline_value;
    const Location& at = std::get<Location>(it->second);
    return read_range(at.path, at.offset, at.length);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    for (const auto& [key, value] : index_) out.push_back(key);
    return out;
  }
  std::string description() const override { return "OCDBT database '" + dir_ + "'"; }

 private:
  std::string read_range(const std::string& relative, uint64_t offset, uint64_t length) const {
    const std::string path = (stdfs::path(dir_) / relative).string();
    const fs::File file = fs::File::open_read(path);
    PAX_CHECK(offset + length <= file.size(), description(), ": '", path, "' has no bytes [", offset, ", ",
              offset + length, ")");
    std::string out(size_t(length), '\0');
    file.pread_exact(out.data(), out.size(), offset);
    return out;
  }

  // Indexes the keys below the B+tree node at `ref` (files: the table of
  // the object holding the reference; base: the base path it inherits;
  // prefix: the keys' implicit prefix).
  void visit(const Ref& ref, const std::vector<DataFile>& files, const std::string& base, uint64_t height,
             const std::string& prefix) {
    PAX_CHECK(ref.file < files.size(), description(), ": a node reference names data file ", ref.file, " of ",
              files.size());
    const std::string inherited = base + files[ref.file].base;
    const std::string relative = inherited + files[ref.file].relative;
    const std::string what =
        fmt::format("{}: B+tree node at '{}' [{}, +{})", description(), relative, ref.offset, ref.length);
    PAX_CHECK(ref.length <= kMaxDecodedBytes, what, ": too large");
    const std::string body = unframe(read_range(relative, ref.offset, ref.length), kBtreeNodeMagic, what);
    Cursor c(body, what);
    const uint8_t node_height = c.byte();
    PAX_CHECK(node_height == height, what, ": height ", int(node_height), ", its parent says ", height);
    const std::vector<DataFile> node_files = read_file_table(c);
    const uint64_t n = c.bounded(1u << 20, "entry count");
    PAX_CHECK(n >= 1, what, ": no entries");
    std::vector<uint64_t> key_prefix(n, 0), key_suffix(n), common(n, 0);
    for (uint64_t i = 1; i < n; ++i) key_prefix[i] = c.bounded(65535, "key prefix length");
    for (uint64_t i = 0; i < n; ++i) key_suffix[i] = c.bounded(65535, "key suffix length");
    if (height > 0)
      for (uint64_t i = 0; i < n; ++i) common[i] = c.bounded(65535, "subtree common prefix length");
    std::vector<std::string> keys(n);
    for (uint64_t i = 0; i < n; ++i) {
      PAX_CHECK(i == 0 || key_prefix[i] <= keys[i - 1].size(), what, ": key ", i, " shares more than the last key");
      keys[i] =
          (i ? keys[i - 1].substr(0, size_t(key_prefix[i])) : std::string()) + std::string(c.bytes(key_suffix[i]));
      PAX_CHECK(common[i] <= keys[i].size(), what, ": entry ", i, "'s common prefix is longer than its key");
    }
    if (height > 0) {
      const std::vector<Ref> children = read_refs(c, size_t(n), node_files.size());
      for (int stat = 0; stat < 3; ++stat)
        for (uint64_t i = 0; i < n; ++i) c.varint();  // subtree statistics
      c.expect_end();
      for (uint64_t i = 0; i < n; ++i)
        visit(children[i], node_files, inherited, height - 1, prefix + keys[i].substr(0, size_t(common[i])));
      return;
    }
    std::vector<uint64_t> lengths(n);
    for (uint64_t& l : lengths) l = c.varint();
    std::vector<uint8_t> kinds(n);
    for (uint8_t& k : kinds) {
      k = c.byte();
      PAX_CHECK(k <= 1, what, ": value kind ", int(k), " (0: inline, 1: in a data file)");
    }
    const size_t indirect = size_t(std::count(kinds.begin(), kinds.end(), uint8_t(1)));
    std::vector<uint64_t> ids(indirect), offsets(indirect);
    for (uint64_t& id : ids) id = c.bounded(node_files.empty() ? 0 : node_files.size() - 1, "data file index");
    for (uint64_t& off : offsets) off = c.varint();
    for (size_t i = 0, k = 0; i < n; ++i) {
      std::string key = prefix + keys[i];
      if (kinds[i] == 0) {
        index_[std::move(key)] = std::string(c.bytes(lengths[i]));
      } else {
        PAX_CHECK(ids[k] < node_files.size(), what, ": a value names data file ", ids[k], " of ", node_files.size());
        const DataFile& f = node_files[ids[k]];
        index_[std::move(key)] = Location{inherited + f.base + f.relative, offsets[k], lengths[i]};
        ++k;
      }
    }
    c.expect_end();
  }

  std::string dir_;
  std::map<std::string, Value> index_;
};

}  // namespace

std::unique_ptr<KeyValueReader> open_ocdbt_store(const std::string& dir) { return std::make_unique<OcdbtStore>(dir); }

}  // namespace pax::train

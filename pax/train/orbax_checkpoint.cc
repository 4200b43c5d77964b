// Orbax / Pax checkpoints: the directory store, zarr v2 arrays (metadata,
// chunk codecs, assembly of chunks into the array), and the tree from
// Orbax's _METADATA or from per-array directory names.
#include "pax/train/orbax_checkpoint.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "pax/core/error.h"
#include "pax/train/fs_util.h"
#include "pax/train/ocdbt.h"

namespace pax::train {

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace {

// The file's bytes; nullopt when there is no regular file there.
std::optional<std::string> read_whole_file(const stdfs::path& path) {
  std::error_code ec;
  if (!stdfs::is_regular_file(path, ec)) return std::nullopt;
  return fs::read_file(path.string(), kMaxCheckpointFileBytes);
}

class DirectoryStore : public KeyValueReader {
 public:
  explicit DirectoryStore(std::string dir) : dir_(std::move(dir)) {}
  std::optional<std::string> read(const std::string& key) const override {
    return read_whole_file(stdfs::path(dir_) / key);
  }
  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    std::error_code ec;
    for (stdfs::recursive_directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) out.push_back(stdfs::relative(it->path(), dir_).generic_string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string description() const override { return "directory '" + dir_ + "'"; }

 private:
  std::string dir_;
};

// --- zarr v2 ---

struct ZarrDType {
  DType dtype;
  size_t itemsize;
};

std::optional<ZarrDType> zarr_dtype(const std::string& name) {
  static const std::map<std::string, ZarrDType> kTypes = {
      {"<f4", {DType::f32, 4}},       {"<f8", {DType::f64, 8}}, {"<f2", {DType::f16, 2}},
      {"bfloat16", {DType::bf16, 2}}, {"<i4", {DType::i32, 4}}, {"<i8", {DType::i64, 8}},
      {"<u4", {DType::u32, 4}},       {"|u1", {DType::u8, 1}},  {"|b1", {DType::bool_, 1}}};
  auto it = kTypes.find(name);
  return it == kTypes.end() ? std::nullopt : std::optional(it->second);
}

std::string inflate_bytes(const std::string& in, size_t expected, const std::string& what) {
  std::string out(expected, '\0');
  z_stream z{};
  PAX_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, what, ": zlib cannot start");  // gzip or zlib headers
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const size_t produced = expected - z.avail_out;
  inflateEnd(&z);
  PAX_CHECK(rc == Z_STREAM_END && produced == expected, what, ": the compressed chunk does not inflate to ", expected,
            " bytes (", produced, " bytes, zlib status ", rc, ")");
  return out;
}

// `in` decompressed to exactly `expected` bytes (one zstd frame).
std::string zstd_decompress(std::string_view in, size_t expected, const std::string& what) {
  std::string out(expected, '\0');
  const size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  PAX_CHECK(!ZSTD_isError(n), what, ": zstd: ", ZSTD_isError(n) ? ZSTD_getErrorName(n) : "");
  PAX_CHECK(n == expected, what, ": zstd gave ", n, " bytes, expected ", expected);
  return out;
}

}  // namespace

std::unique_ptr<KeyValueReader> open_directory_store(const std::string& dir) {
  return std::make_unique<DirectoryStore>(dir);
}

Array read_zarr_array(const KeyValueReader& store, const std::string& name) {
  const std::string who = "zarr array '" + name + "' in " + store.description();
  const std::optional<std::string> meta_text = store.read(name + "/.zarray");
  PAX_CHECK(meta_text, who, ": no ", name, "/.zarray",
            store.read(name + "/zarr.json") ? " (a zarr v3 array; paxcc reads zarr v2, Orbax's default)" : "");
  json meta;
  try {
    meta = json::parse(*meta_text);
  } catch (const json::exception& e) {
    PAX_FAIL(who, ": .zarray is not JSON: ", e.what());
  }
  PAX_CHECK(meta.value("zarr_format", 0) == 2, who, ": zarr_format ", meta.value("zarr_format", 0), ", expected 2");
  const std::string dtype_name = meta.value("dtype", std::string("?"));
  const std::optional<ZarrDType> dt = zarr_dtype(dtype_name);
  PAX_CHECK(dt, who, ": dtype '", dtype_name,
            "' is not one paxcc holds (little-endian <f4 <f8 <f2 bfloat16 <i4 <i8 <u4 |u1 |b1)");
  PAX_CHECK(meta.value("order", std::string("C")) == "C", who, ": order '", meta.value("order", std::string()),
            "'; only C order is read");
  PAX_CHECK(meta.contains("filters") ? meta["filters"].is_null() : true, who, ": filters ", meta["filters"].dump(),
            " are not supported");
  std::vector<int64_t> shape = meta.at("shape").get<std::vector<int64_t>>();
  std::vector<int64_t> chunks = meta.at("chunks").get<std::vector<int64_t>>();
  PAX_CHECK(shape.size() == chunks.size(), who, ": shape ", meta["shape"].dump(), " and chunks ", meta["chunks"].dump(),
            " differ in rank");
  for (size_t d = 0; d < shape.size(); ++d)
    PAX_CHECK(shape[d] >= 0 && chunks[d] >= 1, who, ": bad shape or chunks (", meta["shape"].dump(), ", ",
              meta["chunks"].dump(), ")");
  std::string codec = "none";
  if (meta.contains("compressor") && !meta["compressor"].is_null())
    codec = meta["compressor"].value("id", std::string("?"));
  PAX_CHECK(codec == "none" || codec == "zstd" || codec == "gzip" || codec == "zlib", who, ": compressor '", codec,
            "' is not supported (zstd, gzip, zlib or none)");
  const std::string sep = meta.value("dimension_separator", std::string("."));
  const size_t item = dt->itemsize;

  // The fill value of missing chunks: zero, or the number given.
  std::string fill(item, '\0');
  if (meta.contains("fill_value") && meta["fill_value"].is_number() && meta["fill_value"].get<double>() != 0) {
    scalar(meta["fill_value"].get<double>(), dt->dtype).copy_to_host(dt->dtype, fill.data());
  }
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  std::string data(size_t(numel) * item, '\0');
  for (int64_t i = 0; i < numel; ++i) std::memcpy(data.data() + size_t(i) * item, fill.data(), item);

  // Every chunk: its grid index, decoded bytes (the whole chunk, also at the
  // edges), copied row by row into the array.
  const size_t rank = shape.size();
  std::vector<int64_t> grid(rank), index(rank, 0);
  int64_t chunk_numel = 1, num_chunks = 1;
  for (size_t d = 0; d < rank; ++d) {
    grid[d] = (shape[d] + chunks[d] - 1) / chunks[d];
    chunk_numel *= chunks[d];
    num_chunks *= grid[d];
  }
  if (numel == 0) num_chunks = 0;
  std::vector<int64_t> strides(rank, 1), chunk_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) {
    strides[d - 1] = strides[d] * shape[d];
    chunk_strides[d - 1] = chunk_strides[d] * chunks[d];
  }
  for (int64_t c = 0; c < num_chunks; ++c) {
    std::string key = name + "/";
    for (size_t d = 0; d < rank; ++d) key += (d ? sep : "") + std::to_string(index[d]);
    if (rank == 0) key += "0";
    if (std::optional<std::string> raw = store.read(key)) {
      const size_t bytes = size_t(chunk_numel) * item;
      const std::string what = who + ", chunk '" + key + "'";
      std::string chunk = codec == "zstd"   ? zstd_decompress(*raw, bytes, what)
                          : codec == "none" ? std::move(*raw)
                                            : inflate_bytes(*raw, bytes, what);
      PAX_CHECK(chunk.size() == bytes, what, ": ", chunk.size(), " bytes, a chunk of ", meta["chunks"].dump(), " ",
                dtype_name, " holds ", bytes);
      // Copy the chunk's part inside the array, a run along the last dimension at a time.
      const int64_t last = rank ? std::min(chunks[rank - 1], shape[rank - 1] - index[rank - 1] * chunks[rank - 1]) : 1;
      std::vector<int64_t> at(rank, 0);  // position within the chunk (last dimension 0)
      const int64_t runs = rank ? chunk_numel / chunks[rank - 1] : 1;
      for (int64_t r = 0; r < runs; ++r) {
        bool inside = true;
        int64_t dst = 0, src = 0;
        for (size_t d = 0; d + 1 < rank; ++d) {
          const int64_t g = index[d] * chunks[d] + at[d];
          inside = inside && g < shape[d];
          dst += g * strides[d];
          src += at[d] * chunk_strides[d];
        }
        if (rank) dst += index[rank - 1] * chunks[rank - 1];
        if (inside)
          std::memcpy(data.data() + size_t(dst) * item, chunk.data() + size_t(src) * item, size_t(last) * item);
        for (size_t d = rank >= 1 ? rank - 1 : 0; d-- > 0;) {  // next run: odometer over all but the last dimension
          if (++at[d] < chunks[d]) break;
          at[d] = 0;
        }
      }
    }
    for (size_t d = rank; d-- > 0;) {  // next chunk
      if (++index[d] < grid[d]) break;
      index[d] = 0;
    }
  }
  return from_host(data.data(), Shape(shape), dt->dtype);
}

namespace {

// The directory whose contents are one PyTree: `dir` itself, the highest
// numbered step of a manager's directory, or the single item of a step.
std::string pytree_directory(const std::string& dir) {
  std::error_code ec;
  PAX_CHECK(stdfs::is_directory(dir, ec), "'", dir, "' is not a directory (an Orbax checkpoint is one)");
  if (stdfs::exists(stdfs::path(dir) / "_METADATA", ec)) return dir;
  std::vector<stdfs::path> items;
  std::optional<std::pair<int64_t, stdfs::path>> latest;
  bool zarr_arrays = false;
  for (const auto& e : stdfs::directory_iterator(dir, ec)) {
    if (!e.is_directory()) continue;
    const std::string n = e.path().filename().string();
    if (stdfs::exists(e.path() / ".zarray")) zarr_arrays = true;
    if (stdfs::exists(e.path() / "_METADATA")) items.push_back(e.path());
    if (!n.empty() && n.size() < 19 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        (!latest || std::stoll(n) > latest->first))
      latest = {std::stoll(n), e.path()};
  }
  if (zarr_arrays) return dir;
  if (items.size() == 1) return items[0].string();
  if (latest) return pytree_directory(latest->second.string());
  PAX_FAIL("'", dir, "' holds no Orbax checkpoint: no _METADATA in it", items.size() > 1 ? " (and several items" : "",
           items.size() > 1 ? " with one: name the item's directory)" : "",
           ", no numbered step directories and no per-array zarr directories (.zarray)");
}

// Puts `leaf` at `path` in the nested dict `root`.
void insert_leaf(Tree& root, const std::vector<std::string>& path, const Array& leaf) {
  Tree* node = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!node->contains(path[i])) node->set(path[i], Tree::dict({}));
    node = &(*node)[path[i]];
  }
  node->set(path.back(), Tree(leaf));
}

// Dicts whose keys are 0..n-1 from sequence keys become lists.
Tree lists_where_sequences(const Tree& t, const std::set<std::string>& sequence_paths, const std::string& prefix) {
  if (!t.is_dict()) return t;
  if (sequence_paths.count(prefix)) {
    Tree out = Tree::list();
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string k = std::to_string(i);
      PAX_CHECK(t.contains(k), "Orbax metadata: the sequence at '", prefix, "' lacks element ", i);
      out.push_back(lists_where_sequences(t[k], sequence_paths, prefix + "/" + k));
    }
    return out;
  }
  Tree out = Tree::dict({});
  for (const std::string& k : t.keys())
    out.set(k, lists_where_sequences(t[k], sequence_paths, prefix.empty() ? k : prefix + "/" + k));
  return out;
}

}  // namespace

bool is_orbax_checkpoint(const std::string& dir) {
  try {
    pytree_directory(dir);
    return true;
  } catch (const Error&) {
    return false;
  }
}

Tree read_orbax_checkpoint(const std::string& path) {
  const std::string dir = pytree_directory(path);
  std::error_code ec;
  const bool ocdbt = stdfs::exists(stdfs::path(dir) / "manifest.ocdbt", ec);
  const std::unique_ptr<KeyValueReader> store = ocdbt ? open_ocdbt_store(dir) : open_directory_store(dir);
  Tree root = Tree::dict({});
  const std::optional<std::string> meta_text = read_whole_file(stdfs::path(dir) / "_METADATA");
  if (!meta_text) {
    // Older Pax: a directory per array, named by its path joined with '.'.
    for (const auto& e : stdfs::directory_iterator(dir)) {
      if (!e.is_directory() || !stdfs::exists(e.path() / ".zarray")) continue;
      const std::string name = e.path().filename().string();
      std::vector<std::string> parts;
      for (size_t start = 0, dot; start <= name.size(); start = dot + 1) {
        dot = name.find('.', start);
        if (dot == std::string::npos) dot = name.size();
        parts.push_back(name.substr(start, dot - start));
      }
      insert_leaf(root, parts, read_zarr_array(*store, name));
    }
    return root;
  }
  json meta;
  try {
    meta = json::parse(*meta_text);
  } catch (const json::exception& e) {
    PAX_FAIL("'", dir, "/_METADATA' is not JSON: ", e.what());
  }
  PAX_CHECK(meta.contains("tree_metadata") && meta["tree_metadata"].is_object(), "'", dir,
            "/_METADATA' has no tree_metadata (not an Orbax PyTree checkpoint)");
  PAX_CHECK(!meta.value("use_zarr3", false), "'", dir,
            "' was saved with use_zarr3=True; paxcc reads Orbax's default zarr v2 arrays");
  std::set<std::string> sequence_paths;
  for (const auto& [tuple, entry] : meta["tree_metadata"].items()) {
    const json& keys = entry.at("key_metadata");
    std::vector<std::string> path;
    std::string joined, prefix;
    for (const json& k : keys) {
      const std::string key = k.at("key").is_string() ? k["key"].get<std::string>() : k["key"].dump();
      if (k.value("key_type", 2) == 1) sequence_paths.insert(prefix);
      path.push_back(key);
      joined += (joined.empty() ? "" : ".") + key;
      prefix += (prefix.empty() ? "" : "/") + key;
    }
    const json& value = entry.value("value_metadata", json::object());
    const std::string type = value.value("value_type", std::string());
    if (value.value("skip_deserialize", false) || path.empty()) continue;
    if (type != "np.ndarray" && type != "jax.Array" && type != "scalar") continue;  // strings, None
    insert_leaf(root, path, read_zarr_array(*store, joined));
  }
  return lists_where_sequences(root, sequence_paths, "");
}

}  // namespace pax::train

// metadata.json: serialisation with a fixed field order, and a validating
// parser. Tree structures are written nested, as JSON readers expect:
// None -> null, a leaf -> its tensor name, a list -> [...], a dict ->
// {"dict": [["key", child], ...]} (pairs keep the insertion order, which a
// JSON object would not).
#include "pax/train/checkpoint_metadata.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "pax/core/error.h"
#include "pax/core/version.h"
#include "pax/train/json_check.h"
#include "pax/train/safetensors.h"

namespace pax::train {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kFormat = "paxcc-checkpoint";
// Three JSON levels per dict level plus the envelope: ample for any real tree.
constexpr int kMaxMetadataDepth = 600;

uint32_t parse_hex32(const json& v, const std::string& ctx) {
  PAX_CHECK(v.is_string() && v.get_ref<const std::string&>().size() == 8, ctx,
            ": crc32c must be a string of 8 hex digits, got ", v.dump());
  uint32_t out = 0;
  for (char c : v.get_ref<const std::string&>()) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    PAX_CHECK(d >= 0, ctx, ": crc32c must be a string of 8 lowercase hex digits, got ", v.dump());
    out = (out << 4) | uint32_t(d);
  }
  return out;
}

uint64_t parse_u64(const json& v, const std::string& ctx, const char* field, uint64_t max) {
  PAX_CHECK(v.is_number_unsigned() && v.get<uint64_t>() <= max, ctx, ": ", field,
            " must be a non-negative integer no larger than ", max, ", got ", v.dump());
  return v.get<uint64_t>();
}

CheckpointStep parse_step(const json& v, const std::string& ctx) {
  if (v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true)) {
    return v.get<int64_t>();
  }
  PAX_CHECK(v.is_number_float() && std::isfinite(v.get<double>()), ctx,
            ": step must be an integer in int64's range or a finite float, got ", v.dump());
  return v.get<double>();
}

const json& field(const json& obj, const char* name, const std::string& ctx) {
  auto it = obj.find(name);
  PAX_CHECK(it != obj.end(), ctx, ": missing field \"", name, "\"");
  return *it;
}

void check_fields(const json& obj, std::initializer_list<const char*> allowed, const std::string& ctx) {
  PAX_CHECK(obj.is_object(), ctx, ": expected a JSON object, got ", obj.dump());
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    PAX_CHECK(ok, ctx, ": unexpected field \"", key, "\"");
  }
}

// File names are derived from item names; the stored one only documents it.
void check_file_field(const json& item, const std::string& expected, const std::string& ctx) {
  const json& f = field(item, "file", ctx);
  PAX_CHECK(f.is_string() && f.get_ref<const std::string&>() == expected, ctx, ": file must be \"", expected,
            "\", got ", f.dump());
}

// ---- tree structure ----

ordered_json structure_to_json(std::span<const TreeNodeRecord> s, size_t& i, const std::vector<TensorRecord>& tensors,
                               size_t& leaf) {
  const TreeNodeRecord& r = s[i++];
  switch (r.kind) {
    case Tree::Kind::none: return nullptr;
    case Tree::Kind::leaf: return tensors[leaf++].name;
    case Tree::Kind::list: {
      ordered_json items = ordered_json::array();
      for (size_t c = 0; c < r.num_children; ++c) items.push_back(structure_to_json(s, i, tensors, leaf));
      return items;
    }
    case Tree::Kind::dict: {
      ordered_json pairs = ordered_json::array();
      for (size_t c = 0; c < r.num_children; ++c) {
        ordered_json pair = ordered_json::array();
        pair.push_back(s[i].key);
        pair.push_back(structure_to_json(s, i, tensors, leaf));
        pairs.push_back(std::move(pair));
      }
      ordered_json out = ordered_json::object();
      out["dict"] = std::move(pairs);
      return out;
    }
  }
  return nullptr;
}

void parse_structure(const json& v, const std::string& key, const std::string& ctx, std::vector<TreeNodeRecord>& out,
                     std::vector<std::string>& leaf_names) {
  if (v.is_null()) {
    out.push_back({Tree::Kind::none, key, 0});
  } else if (v.is_string()) {
    out.push_back({Tree::Kind::leaf, key, 0});
    leaf_names.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    out.push_back({Tree::Kind::list, key, v.size()});
    for (const json& c : v) parse_structure(c, "", ctx, out, leaf_names);
  } else if (v.is_object()) {
    check_fields(v, {"dict"}, ctx + ": tree node");
    const json& pairs = field(v, "dict", ctx + ": tree node");
    PAX_CHECK(pairs.is_array(), ctx, ": a dict node must hold a list of [key, value] pairs, got ", pairs.dump());
    out.push_back({Tree::Kind::dict, key, pairs.size()});
    std::set<std::string> keys;
    for (const json& p : pairs) {
      PAX_CHECK(p.is_array() && p.size() == 2 && p[0].is_string(), ctx,
                ": a dict node must hold [key, value] pairs with string keys, got ", p.dump().substr(0, 200));
      const std::string& k = p[0].get_ref<const std::string&>();
      PAX_CHECK(keys.insert(k).second, ctx, ": a dict node has the key '", k, "' twice");
      parse_structure(p[1], k, ctx, out, leaf_names);
    }
  } else {
    PAX_FAIL(ctx, ": a tree node must be null, a tensor name, a list or {\"dict\": [...]}, got ", v.dump());
  }
}

TensorRecord parse_tensor(const json& v, const std::string& item_ctx, bool sharded) {
  if (sharded) {
    check_fields(v, {"name", "dtype", "shape", "split", "blocks"}, item_ctx + ": tensor entry");
  } else {
    check_fields(v, {"name", "dtype", "shape", "crc32c"}, item_ctx + ": tensor entry");
  }
  const json& name = field(v, "name", item_ctx + ": tensor entry");
  PAX_CHECK(name.is_string(), item_ctx, ": a tensor name must be a string, got ", name.dump());
  TensorRecord t;
  t.name = name.get<std::string>();
  const std::string ctx = item_ctx + ": tensor '" + t.name + "'";
  const json& dtype = field(v, "dtype", ctx);
  PAX_CHECK(dtype.is_string(), ctx, ": dtype must be a string, got ", dtype.dump());
  t.dtype = safetensors_dtype_from_name(dtype.get<std::string>(), ctx);
  const json& shape = field(v, "shape", ctx);
  PAX_CHECK(shape.is_array(), ctx, ": shape must be a list, got ", shape.dump());
  std::vector<int64_t> dims;
  for (const json& d : shape)
    dims.push_back(int64_t(parse_u64(d, ctx, "a dimension", std::numeric_limits<int64_t>::max())));
  t.shape = Shape(std::move(dims));
  if (!sharded) t.crc32c = parse_hex32(field(v, "crc32c", ctx), ctx);
  return t;
}

// "split" and "blocks" of a sharded item's tensor entry, checked against the
// item's files and chunk size.
void parse_tensor_blocks(const json& v, TensorRecord& t, const TreeItemRecord& item, const std::string& item_ctx) {
  const std::string ctx = item_ctx + ": tensor '" + t.name + "'";
  const json& split = field(v, "split", ctx);
  if (!split.is_null()) {
    const bool outer = split.is_object() && split.contains("outer_dim");
    if (outer) {
      check_fields(split, {"dim", "count", "outer_dim", "outer_count"}, ctx + ": split");
    } else {
      check_fields(split, {"dim", "count"}, ctx + ": split");
    }
    t.split_dim = int64_t(parse_u64(field(split, "dim", ctx), ctx, "split dim", 64));
    t.split_count = int64_t(parse_u64(field(split, "count", ctx), ctx, "split count", 1u << 30));
    PAX_CHECK(t.split_dim < t.shape.rank() && t.split_count >= 1 && t.shape[t.split_dim] % t.split_count == 0, ctx,
              ": cannot split ", t.shape, " along dimension ", t.split_dim, " into ", t.split_count, " blocks");
    if (outer) {
      t.outer_dim = int64_t(parse_u64(field(split, "outer_dim", ctx), ctx, "split outer_dim", 64));
      t.outer_count = int64_t(parse_u64(field(split, "outer_count", ctx), ctx, "split outer_count", 1u << 30));
      PAX_CHECK(t.outer_dim < t.shape.rank() && t.outer_dim != t.split_dim && t.outer_count >= 1 &&
                    t.shape[t.outer_dim] % t.outer_count == 0 && t.block_count() <= (int64_t(1) << 30),
                ctx, ": cannot split ", t.shape, " along dimension ", t.outer_dim, " into ", t.outer_count,
                " outer blocks beside dimension ", t.split_dim);
    }
  }
  const json& blocks = field(v, "blocks", ctx);
  PAX_CHECK(blocks.is_array() && int64_t(blocks.size()) == t.block_count(), ctx, ": blocks must be a list of ",
            t.block_count(), " entries (one per block), got ", blocks.dump().substr(0, 200));
  const Shape block = t.block_shape();
  uint64_t nbytes = itemsize(t.dtype);
  for (int64_t d : block.dims()) {
    PAX_CHECK(!__builtin_mul_overflow(nbytes, uint64_t(d), &nbytes), ctx, ": a block of ", block, " is too large");
  }
  const uint64_t chunks = nbytes > item.crc_chunk_bytes ? (nbytes - 1) / item.crc_chunk_bytes + 1 : 0;
  for (const json& b : blocks) {
    check_fields(b, {"file", "crc32c", "chunks"}, ctx + ": block");
    ShardBlockRecord r;
    r.file = size_t(parse_u64(field(b, "file", ctx), ctx, "block file", item.files.size() - 1));
    r.crc32c = parse_hex32(field(b, "crc32c", ctx), ctx);
    if (b.contains("chunks")) {
      const json& c = b["chunks"];
      PAX_CHECK(c.is_array(), ctx, ": block chunks must be a list, got ", c.dump().substr(0, 200));
      for (const json& x : c) r.chunk_crc32c.push_back(parse_hex32(x, ctx));
    }
    PAX_CHECK(r.chunk_crc32c.size() == chunks, ctx, ": a block of ", nbytes, " bytes in chunks of ",
              item.crc_chunk_bytes, " bytes has ", chunks, " chunk CRCs, not ", r.chunk_crc32c.size());
    t.blocks.push_back(std::move(r));
  }
}

TreeItemRecord parse_tree_item(const std::string& name, const json& v, const std::string& file, uint64_t version) {
  const std::string ctx = "checkpoint metadata '" + file + "': item '" + name + "'";
  TreeItemRecord item;
  const bool sharded = v.is_object() && v.contains("files");
  PAX_CHECK(!sharded || version >= kShardedCheckpointFormatVersion, ctx,
            ": a sharded item (\"files\") needs format_version ", kShardedCheckpointFormatVersion, ", got ", version);
  if (sharded) {
    check_fields(v, {"files", "crc_chunk_bytes", "tree", "tensors"}, ctx);
    const json& files = field(v, "files", ctx);
    PAX_CHECK(files.is_array() && !files.empty(), ctx, ": files must be a non-empty list, got ",
              files.dump().substr(0, 200));
    for (const json& f : files) {
      check_fields(f, {"name", "bytes"}, ctx + ": file");
      // File names are derived from the item and the position; the stored one only documents it.
      const std::string expected = shard_file_name(name, int64_t(item.files.size()));
      const json& n = field(f, "name", ctx);
      PAX_CHECK(n.is_string() && n.get_ref<const std::string&>() == expected, ctx, ": file ", item.files.size(),
                " must be \"", expected, "\", got ", n.dump());
      item.files.push_back({expected, parse_u64(field(f, "bytes", ctx), ctx, "bytes", uint64_t(INT64_MAX))});
    }
    item.crc_chunk_bytes = parse_u64(field(v, "crc_chunk_bytes", ctx), ctx, "crc_chunk_bytes", uint64_t(INT64_MAX));
    PAX_CHECK(item.crc_chunk_bytes > 0, ctx, ": crc_chunk_bytes must be positive");
  } else {
    check_fields(v, {"file", "tree", "tensors"}, ctx);
    check_file_field(v, name + ".safetensors", ctx);
  }
  std::vector<std::string> leaf_names;
  parse_structure(field(v, "tree", ctx), "", ctx, item.structure, leaf_names);
  const json& tensors = field(v, "tensors", ctx);
  PAX_CHECK(tensors.is_array(), ctx, ": tensors must be a list, got ", tensors.dump().substr(0, 200));
  std::set<std::string> names;
  for (const json& t : tensors) {
    item.tensors.push_back(parse_tensor(t, ctx, sharded));
    if (sharded) parse_tensor_blocks(t, item.tensors.back(), item, ctx);
    PAX_CHECK(names.insert(item.tensors.back().name).second, ctx, ": tensor '", item.tensors.back().name,
              "' is listed twice");
  }
  PAX_CHECK(leaf_names.size() == item.tensors.size(), ctx, ": the tree has ", leaf_names.size(), " leaves but ",
            item.tensors.size(), " tensors are listed");
  for (size_t i = 0; i < leaf_names.size(); ++i) {
    PAX_CHECK(leaf_names[i] == item.tensors[i].name, ctx, ": leaf ", i, " of the tree is '", leaf_names[i],
              "' but tensor ", i, " is '", item.tensors[i].name, "'");
  }
  return item;
}

JsonItemRecord parse_json_item(const std::string& name, const json& v, const std::string& file) {
  const std::string ctx = "checkpoint metadata '" + file + "': JSON item '" + name + "'";
  check_fields(v, {"file", "bytes", "crc32c"}, ctx);
  check_file_field(v, name + ".json", ctx);
  JsonItemRecord item;
  item.bytes = parse_u64(field(v, "bytes", ctx), ctx, "bytes", std::numeric_limits<int64_t>::max());
  item.crc32c = parse_hex32(field(v, "crc32c", ctx), ctx);
  return item;
}

void collect_records(const Tree& t, const std::string& key, std::vector<TreeNodeRecord>& out) {
  out.push_back({t.kind(), key, t.size()});
  if (t.is_list()) {
    for (const Tree& c : t.items()) collect_records(c, "", out);
  } else if (t.is_dict()) {
    for (const auto& [k, c] : t.entries()) collect_records(c, k, out);
  }
}

Tree build_tree(std::span<const TreeNodeRecord> s, size_t& i, std::span<const Array> leaves, size_t& leaf) {
  PAX_CHECK(i < s.size(), "tree_from_records: the structure ends inside a list or dict");
  const TreeNodeRecord& r = s[i++];
  switch (r.kind) {
    case Tree::Kind::none: return Tree();
    case Tree::Kind::leaf:
      PAX_CHECK(leaf < leaves.size(), "tree_from_records: the structure has more leaves than the ", leaves.size(),
                " given");
      return Tree(leaves[leaf++]);
    case Tree::Kind::list: {
      Tree::List items;
      for (size_t c = 0; c < r.num_children; ++c) items.push_back(build_tree(s, i, leaves, leaf));
      return Tree(std::move(items));
    }
    case Tree::Kind::dict: {
      Tree::Dict items;
      for (size_t c = 0; c < r.num_children; ++c) {
        PAX_CHECK(i < s.size(), "tree_from_records: the structure ends inside a dict");
        std::string key = s[i].key;
        items.emplace_back(std::move(key), build_tree(s, i, leaves, leaf));
      }
      return Tree::dict(std::move(items));
    }
  }
  PAX_FAIL("tree_from_records: unknown node kind");
}

}  // namespace

// One field per line at the top, and one line per tree and per tensor: easy
// to read and to diff, and compact for trees with many leaves.
std::string checkpoint_metadata_to_json(const CheckpointMetadata& m) {
  auto q = [](const std::string& s) { return ordered_json(s).dump(); };
  std::string out = "{\n";
  out += "  \"format\": " + q(kFormat) + ",\n";
  // Readers of version 1 do not know sharded items, so only their presence makes it 2.
  bool sharded = false;
  for (const auto& [name, item] : m.trees) sharded = sharded || item.sharded();
  out += "  \"format_version\": " +
         std::to_string(sharded ? kShardedCheckpointFormatVersion : kCheckpointFormatVersion) + ",\n";
  out += "  \"paxcc_version\": " + q(m.paxcc_version) + ",\n";
  // Python's spelling of a float always has a '.' or an exponent, so the
  // reader tells a float step from an integer one.
  out += "  \"step\": " + m.step.str() + ",\n";
  if (!m.config_hash.empty()) out += "  \"config_hash\": " + q(m.config_hash) + ",\n";
  out += "  \"items\": {";
  const char* sep = "\n";
  for (const auto& [name, item] : m.trees) {
    size_t i = 0, leaf = 0;
    out += sep + std::string("    ") + q(name) + ": {\n";
    if (item.sharded()) {
      ordered_json files = ordered_json::array();
      for (const ShardFileRecord& f : item.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
      out += "      \"files\": " + files.dump() + ",\n";
      out += "      \"crc_chunk_bytes\": " + std::to_string(item.crc_chunk_bytes) + ",\n";
    } else {
      out += "      \"file\": " + q(name + ".safetensors") + ",\n";
    }
    out += "      \"tree\": " + structure_to_json(item.structure, i, item.tensors, leaf).dump() + ",\n";
    out += "      \"tensors\": [";
    const char* tsep = "\n";
    for (const TensorRecord& t : item.tensors) {
      ordered_json entry = {{"name", t.name}, {"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape.dims()}};
      if (item.sharded()) {
        ordered_json split = ordered_json({{"dim", t.split_dim}, {"count", t.split_count}});
        if (t.outer_dim >= 0) split["outer_dim"] = t.outer_dim, split["outer_count"] = t.outer_count;
        entry["split"] = t.split_dim < 0 ? ordered_json(nullptr) : split;
        ordered_json blocks = ordered_json::array();
        for (const ShardBlockRecord& b : t.blocks) {
          ordered_json block = {{"file", b.file}, {"crc32c", crc32c_hex(b.crc32c)}};
          if (!b.chunk_crc32c.empty()) {
            ordered_json chunks = ordered_json::array();
            for (uint32_t c : b.chunk_crc32c) chunks.push_back(crc32c_hex(c));
            block["chunks"] = std::move(chunks);
          }
          blocks.push_back(std::move(block));
        }
        entry["blocks"] = std::move(blocks);
      } else {
        entry["crc32c"] = crc32c_hex(t.crc32c);
      }
      out += tsep + std::string("        ") + entry.dump();
      tsep = ",\n";
    }
    out += item.tensors.empty() ? "]\n    }" : "\n      ]\n    }";
    sep = ",\n";
  }
  out += m.trees.empty() ? "},\n" : "\n  },\n";
  out += "  \"json_items\": {";
  sep = "\n";
  for (const auto& [name, item] : m.json) {
    const ordered_json entry = {{"file", name + ".json"}, {"bytes", item.bytes}, {"crc32c", crc32c_hex(item.crc32c)}};
    out += sep + std::string("    ") + q(name) + ": " + entry.dump();
    sep = ",\n";
  }
  out += m.json.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& file) {
  const std::string ctx = "checkpoint metadata '" + file + "'";
  check_json(text, ctx, kMaxMetadataDepth);
  const json j = json::parse(text.begin(), text.end());
  check_fields(j, {"format", "format_version", "paxcc_version", "step", "config_hash", "items", "json_items"}, ctx);
  const json& format = field(j, "format", ctx);
  PAX_CHECK(format == kFormat, ctx, ": format must be \"", kFormat, "\", got ", format.dump());
  CheckpointMetadata m;
  const uint64_t version = parse_u64(field(j, "format_version", ctx), ctx, "format_version", 1u << 30);
  PAX_CHECK(version == uint64_t(kCheckpointFormatVersion) || version == uint64_t(kShardedCheckpointFormatVersion), ctx,
            ": format_version ", version, " is not readable by this paxcc (it reads versions ",
            kCheckpointFormatVersion, " and ", kShardedCheckpointFormatVersion, ")");
  m.format_version = int(version);
  const json& pv = field(j, "paxcc_version", ctx);
  PAX_CHECK(pv.is_string(), ctx, ": paxcc_version must be a string, got ", pv.dump());
  m.paxcc_version = pv.get<std::string>();
  m.step = parse_step(field(j, "step", ctx), ctx);
  if (j.contains("config_hash")) {
    const json& h = j["config_hash"];
    PAX_CHECK(h.is_string() && !h.get_ref<const std::string&>().empty(), ctx,
              ": config_hash must be a non-empty string, got ", h.dump());
    m.config_hash = h.get<std::string>();
  }
  const json& items = field(j, "items", ctx);
  PAX_CHECK(items.is_object(), ctx, ": items must be an object, got ", items.dump().substr(0, 200));
  const json& json_items = field(j, "json_items", ctx);
  PAX_CHECK(json_items.is_object(), ctx, ": json_items must be an object, got ", json_items.dump().substr(0, 200));
  for (const auto& [name, v] : items.items()) {
    PAX_CHECK(is_valid_item_name(name), ctx, ": invalid item name '", name, "'");
    m.trees.emplace(name, parse_tree_item(name, v, file, version));
  }
  for (const auto& [name, v] : json_items.items()) {
    PAX_CHECK(is_valid_item_name(name), ctx, ": invalid JSON item name '", name, "'");
    PAX_CHECK(!m.trees.count(name), ctx, ": '", name, "' is both a tree item and a JSON item");
    m.json.emplace(name, parse_json_item(name, v, file));
  }
  return m;
}

std::vector<TreeNodeRecord> tree_structure_records(const Tree& tree) {
  std::vector<TreeNodeRecord> out;
  collect_records(tree, "", out);
  return out;
}

Tree tree_from_records(std::span<const TreeNodeRecord> structure, std::span<const Array> leaves) {
  size_t i = 0, leaf = 0;
  Tree t = build_tree(structure, i, leaves, leaf);
  PAX_CHECK(i == structure.size(), "tree_from_records: ", structure.size() - i,
            " structure records are left over after the tree");
  PAX_CHECK(leaf == leaves.size(), "tree_from_records: the structure has ", leaf, " leaves but ", leaves.size(),
            " were given");
  return t;
}

bool is_valid_item_name(const std::string& name) {
  if (name.empty() || name.size() > 100 || name.front() == '.') return false;
  if (name == "metadata" || name == "commit_success") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string config_hash(std::string_view config_json) {
  check_json(config_json, "checkpoint config", kMaxMetadataDepth);
  const std::string canonical = json::parse(config_json.begin(), config_json.end()).dump();
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (unsigned char c : canonical) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV prime
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Shape TensorRecord::block_shape() const {
  if (split_dim < 0) return shape;
  Shape s = shape;
  s[split_dim] /= split_count;
  if (outer_dim >= 0) s[outer_dim] /= outer_count;
  return s;
}

std::string shard_file_name(const std::string& item, int64_t process) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), ".process-%05lld.safetensors", static_cast<long long>(process));
  return item + buf;
}

std::string crc32c_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

}  // namespace pax::train

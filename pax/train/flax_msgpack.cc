// Flax's msgpack serialization (flax_msgpack.h) through nlohmann::json's
// msgpack reader and writer, whose binary values with a subtype are msgpack
// extensions.
#include "pax/train/flax_msgpack.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/train/checkpoint.h"

namespace pax::train {
namespace {

// Keys keep the order they are inserted in: dicts of a tree are written
// sorted, a chunked array's keys in the order Flax writes them.
using Json = nlohmann::ordered_json;

// Flax's _MsgpackExtType.
constexpr std::uint8_t kNdarray = 1, kNpScalar = 3;

Json array_json(const Array& a) {
  Json shape = Json::array();
  for (int64_t d : a.shape().dims()) shape.push_back(d);
  std::vector<std::uint8_t> bytes(a.nbytes());
  a.copy_to_host(a.dtype(), bytes.data());
  const Json payload = Json::array({shape, dtype_name(a.dtype()), Json::binary(std::move(bytes))});
  return Json::binary(Json::to_msgpack(payload), kNdarray);
}

// An array of more than max_chunk_bytes as Flax's _chunk writes it:
// {"__msgpack_chunked_array__": true, "shape": {"0": d0, ..}, "chunks":
// {"0": flat piece, ..}}, pieces of max_chunk_bytes / itemsize elements.
Json chunked_array_json(const Array& a, size_t max_chunk_bytes) {
  Json out = Json::object();
  out["__msgpack_chunked_array__"] = true;
  Json shape = Json::object();
  for (size_t d = 0; d < size_t(a.shape().rank()); ++d) shape[std::to_string(d)] = a.shape()[int64_t(d)];
  out["shape"] = shape;
  const int64_t per_chunk = std::max<int64_t>(1, int64_t(max_chunk_bytes / itemsize(a.dtype())));
  const int64_t numel = a.shape().numel();
  std::vector<std::uint8_t> all(a.nbytes());  // row-major: the flattened array
  a.copy_to_host(a.dtype(), all.data());
  Json chunks = Json::object();
  for (int64_t start = 0, i = 0; start < numel; start += per_chunk, ++i) {
    const int64_t n = std::min(per_chunk, numel - start);
    const void* piece = all.data() + size_t(start) * itemsize(a.dtype());
    chunks[std::to_string(i)] = array_json(from_host(piece, Shape{n}, a.dtype()));
  }
  out["chunks"] = chunks;
  return out;
}

Json tree_json(const Tree& t, size_t max_chunk_bytes) {
  if (t.is_leaf()) {
    const Array& a = t.leaf();
    return a.nbytes() > max_chunk_bytes ? chunked_array_json(a, max_chunk_bytes) : array_json(a);
  }
  if (t.is_dict()) {
    std::vector<std::pair<std::string, const Tree*>> entries;
    for (const auto& [key, child] : t.entries()) entries.emplace_back(key, &child);
    std::sort(entries.begin(), entries.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    Json out = Json::object();
    for (const auto& [key, child] : entries) out[key] = tree_json(*child, max_chunk_bytes);
    return out;
  }
  if (t.is_list()) {
    Json out = Json::array();
    for (size_t i = 0; i < t.size(); ++i) out.push_back(tree_json(t[i], max_chunk_bytes));
    return out;
  }
  return Json(nullptr);  // None, as Flax writes it
}

Array array_of(const Json::binary_t& ext, const std::string& what) {
  const Json payload = Json::from_msgpack(ext, true, false);
  PAX_CHECK(payload.is_array() && payload.size() == 3 && payload[0].is_array() && payload[1].is_string() &&
                payload[2].is_binary(),
            what, ": an array extension must hold [shape, dtype, bytes]");
  std::vector<int64_t> dims;
  for (const Json& d : payload[0]) {
    PAX_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, what, ": a shape holds a bad dimension ", d.dump());
    dims.push_back(d.get<int64_t>());
  }
  const DType dtype = dtype_from_name(payload[1].get<std::string>());
  const Shape shape(dims);
  const auto& bytes = payload[2].get_binary();
  PAX_CHECK(bytes.size() == size_t(shape.numel()) * itemsize(dtype), what, ": ", bytes.size(), " bytes for a ",
            dtype_name(dtype), shape, " array of ", size_t(shape.numel()) * itemsize(dtype));
  return from_host(bytes.data(), shape, dtype);
}

Tree tree_of(const Json& j, const std::string& what);

// The array of a chunked array's dict (Flax's _unchunk).
Array unchunked(const Json& j, const std::string& what) {
  PAX_CHECK(j.contains("shape") && j["shape"].is_object() && j.contains("chunks") && j["chunks"].is_object(), what,
            ": a chunked array needs 'shape' and 'chunks' dicts");
  std::vector<int64_t> dims;
  for (size_t d = 0; d < j["shape"].size(); ++d) {
    const std::string k = std::to_string(d);
    PAX_CHECK(j["shape"].contains(k) && j["shape"][k].is_number_integer() && j["shape"][k].get<int64_t>() >= 0, what,
              ": a chunked array's shape lacks dimension ", d);
    dims.push_back(j["shape"][k].get<int64_t>());
  }
  std::vector<std::uint8_t> bytes;
  std::optional<DType> dtype;
  for (size_t i = 0; i < j["chunks"].size(); ++i) {
    const std::string k = std::to_string(i);
    PAX_CHECK(j["chunks"].contains(k), what, ": a chunked array lacks chunk ", i);
    const Tree piece = tree_of(j["chunks"][k], what + "/chunks/" + k);
    PAX_CHECK(piece.is_leaf() && (!dtype || piece.leaf().dtype() == *dtype), what, ": chunk ", i,
              " is not an array of the other chunks' dtype");
    dtype = piece.leaf().dtype();
    const size_t at = bytes.size();
    bytes.resize(at + piece.leaf().nbytes());
    piece.leaf().copy_to_host(*dtype, bytes.data() + at);
  }
  PAX_CHECK(dtype, what, ": a chunked array without chunks");
  const Shape shape(dims);
  PAX_CHECK(bytes.size() == size_t(shape.numel()) * itemsize(*dtype), what, ": chunks of ", bytes.size(),
            " bytes for a ", dtype_name(*dtype), shape, " array");
  return from_host(bytes.data(), shape, *dtype);
}

Tree tree_of(const Json& j, const std::string& what) {
  if (j.is_object() && j.contains("__msgpack_chunked_array__")) return unchunked(j, what);
  if (j.is_object()) {
    Tree out = Tree::dict();
    for (const auto& [key, child] : j.items()) out[key] = tree_of(child, what + "/" + key);
    return out;
  }
  if (j.is_array()) {
    Tree out = Tree::list();
    for (size_t i = 0; i < j.size(); ++i) out.push_back(tree_of(j[i], what + "/" + std::to_string(i)));
    return out;
  }
  if (j.is_binary()) {
    const auto& ext = j.get_binary();
    PAX_CHECK(ext.has_subtype() && (ext.subtype() == kNdarray || ext.subtype() == kNpScalar), what,
              ": a msgpack extension of type ", ext.has_subtype() ? std::to_string(ext.subtype()) : "none",
              "; Flax writes arrays as type 1 and NumPy scalars as type 3");
    return array_of(ext, what);
  }
  if (j.is_null()) return Tree();
  if (j.is_boolean()) {
    const std::uint8_t v = j.get<bool>();
    return from_host(&v, Shape{}, DType::bool_);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    return from_host(&v, Shape{}, DType::i64);
  }
  if (j.is_number_float()) {
    const double v = j.get<double>();
    return from_host(&v, Shape{}, DType::f64);
  }
  PAX_FAIL(what, ": a ", j.type_name(), " is not part of a tree of arrays");
}

}  // namespace

std::string to_flax_msgpack(const Tree& tree, size_t max_chunk_bytes) {
  PAX_CHECK(max_chunk_bytes >= 1, "to_flax_msgpack: max_chunk_bytes must be >= 1");
  const std::vector<std::uint8_t> bytes = Json::to_msgpack(tree_json(tree, max_chunk_bytes));
  return std::string(bytes.begin(), bytes.end());
}

Tree from_flax_msgpack(std::string_view bytes, const std::string& what) {
  const Json j = Json::from_msgpack(bytes.begin(), bytes.end(), true, false);
  PAX_CHECK(!j.is_discarded(), what, ": not msgpack (or cut short)");
  return tree_of(j, what);
}

void write_flax_msgpack(const std::string& path, const Tree& tree) {
  data::write_file_atomic(path, to_flax_msgpack(tree));
}

Tree read_flax_msgpack(const std::string& path) { return from_flax_msgpack(data::read_file(path), path); }

int64_t export_flax_checkpoint(const std::string& checkpoint_dir, const std::string& out, bool with_opt_state) {
  const std::optional<std::string> latest = latest_checkpoint(checkpoint_dir);
  PAX_CHECK(latest, "export: no committed checkpoint in '", checkpoint_dir, "'");
  const CheckpointItems items = read_checkpoint(*latest);
  const auto state = items.trees.find("train_state");
  PAX_CHECK(state != items.trees.end(), "export: '", *latest, "' holds no train_state");
  Tree exported = with_opt_state ? state->second : state->second["params"];
  if (with_opt_state && exported.is_dict()) {
    // "extra" holds paxcc's own bookkeeping, not part of Flax's TrainState.
    Tree flax_state = Tree::dict();
    for (const auto& [key, child] : exported.entries())
      if (key != "extra") flax_state[key] = child;
    exported = flax_state;
  }
  write_flax_msgpack(out, exported);
  return state->second["step"].leaf().item<int64_t>();
}

}  // namespace pax::train

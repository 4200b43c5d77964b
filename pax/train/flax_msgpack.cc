// Flax's msgpack serialization (flax_msgpack.h) through nlohmann::json's
// msgpack reader and writer, whose binary values with a subtype are msgpack
// extensions.
#include "pax/train/flax_msgpack.h"

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/train/checkpoint.h"

namespace pax::train {
namespace {

using Json = nlohmann::json;

// Flax's _MsgpackExtType.
constexpr std::uint8_t kNdarray = 1, kNpScalar = 3;

Json array_json(const Array& a) {
  PAX_CHECK(a.nbytes() < (size_t(1) << 31), "flax msgpack: an array of ", a.nbytes(),
            " bytes is over the 2 GiB that one msgpack value holds (Flax chunks such arrays; paxcc does not)");
  Json shape = Json::array();
  for (int64_t d : a.shape().dims()) shape.push_back(d);
  std::vector<std::uint8_t> bytes(a.nbytes());
  a.copy_to_host(a.dtype(), bytes.data());
  const Json payload = Json::array({shape, dtype_name(a.dtype()), Json::binary(std::move(bytes))});
  return Json::binary(Json::to_msgpack(payload), kNdarray);
}

Json tree_json(const Tree& t) {
  if (t.is_leaf()) return array_json(t.leaf());
  if (t.is_dict()) {
    Json out = Json::object();
    for (const auto& [key, child] : t.entries()) out[key] = tree_json(child);
    return out;
  }
  if (t.is_list()) {
    Json out = Json::array();
    for (size_t i = 0; i < t.size(); ++i) out.push_back(tree_json(t[i]));
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

Tree tree_of(const Json& j, const std::string& what) {
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

std::string to_flax_msgpack(const Tree& tree) {
  const std::vector<std::uint8_t> bytes = Json::to_msgpack(tree_json(tree));
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

namespace {

// Every leaf of `t` by its '/'-joined path.
void leaves_by_path(const Tree& t, const std::string& prefix, std::map<std::string, Array>& out) {
  if (t.is_leaf()) {
    out[prefix] = t.leaf();
  } else if (t.is_dict()) {
    for (const auto& [key, child] : t.entries()) leaves_by_path(child, prefix.empty() ? key : prefix + "/" + key, out);
  } else if (t.is_list()) {
    for (size_t i = 0; i < t.size(); ++i) leaves_by_path(t[i], prefix + "/" + std::to_string(i), out);
  }
}

// `like` with each leaf replaced by `values`' leaf at its path.
Tree rebuild(const Tree& like, const std::string& prefix, const std::map<std::string, Array>& values) {
  if (like.is_leaf()) return values.at(prefix).astype(like.leaf().dtype());
  if (like.is_dict()) {
    Tree out = Tree::dict();
    for (const auto& [key, child] : like.entries())
      out[key] = rebuild(child, prefix.empty() ? key : prefix + "/" + key, values);
    return out;
  }
  if (like.is_list()) {
    Tree out = Tree::list();
    for (size_t i = 0; i < like.size(); ++i) out.push_back(rebuild(like[i], prefix + "/" + std::to_string(i), values));
    return out;
  }
  return like;
}

std::string first_few(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

Tree params_from_flax_msgpack(const std::string& path, const Tree& like) {
  std::map<std::string, Array> want, have;
  leaves_by_path(like, "", want);
  leaves_by_path(read_flax_msgpack(path), "", have);
  std::vector<std::string> missing, extra, shapes;
  for (const auto& [name, a] : want) {
    auto it = have.find(name);
    if (it == have.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != a.shape()) {
      shapes.push_back(name + " " + it->second.aval().str() + " (the model's: " + a.aval().str() + ")");
    }
  }
  for (const auto& [name, a] : have)
    if (!want.count(name)) extra.push_back(name);
  std::string why;
  if (!missing.empty()) why += "; the model's params it lacks: " + first_few(missing);
  if (!extra.empty()) why += "; names the model has not: " + first_few(extra);
  if (!shapes.empty()) why += "; shapes that differ: " + first_few(shapes);
  PAX_CHECK(why.empty(), "init_from '", path, "' does not match the model's params", why,
            " (paxcc export writes a job's params in this layout)");
  return rebuild(like, "", have);
}

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

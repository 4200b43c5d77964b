// Params from Flax msgpack files and Orbax / Pax checkpoints: the params
// subtree, then every model leaf matched by path.
#include "pax/train/import_params.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/train/flax_msgpack.h"
#include "pax/train/orbax_checkpoint.h"

namespace pax::train {

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

Tree params_subtree(const Tree& tree) {
  Tree t = tree;
  if (t.is_dict() && t.contains("mdl_vars")) t = t["mdl_vars"];
  if (t.is_dict() && t.contains("params")) t = t["params"];
  return t;
}

Tree params_from_checkpoint(const std::string& path, const Tree& like,
                            const std::map<std::string, Shape>& whole_shapes) {
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(path, ec);
  PAX_CHECK(directory || std::filesystem::is_regular_file(path, ec), "init_from '", path,
            "': no such file or directory (a Flax msgpack file, or an Orbax / Pax checkpoint directory)");
  const Tree saved = directory ? read_orbax_checkpoint(path) : read_flax_msgpack(path);
  std::map<std::string, Array> want, have;
  leaves_by_path(like, "", want);
  leaves_by_path(params_subtree(saved), "", have);
  std::vector<std::string> missing, extra, shapes;
  for (const auto& [name, a] : want) {
    auto it = have.find(name);
    auto whole = whole_shapes.find(name);
    const AVal wanted{whole == whole_shapes.end() ? a.shape() : whole->second, a.dtype()};
    if (it == have.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != wanted.shape) {
      shapes.push_back(name + " " + it->second.aval().str() + " (the model's: " + wanted.str() + ")");
    }
  }
  for (const auto& [name, a] : have)
    if (!want.count(name)) extra.push_back(name);
  std::string why;
  if (!missing.empty()) why += "; the model's params it lacks: " + first_few(missing);
  if (!extra.empty()) why += "; names the model has not: " + first_few(extra);
  if (!shapes.empty()) why += "; shapes that differ: " + first_few(shapes);
  PAX_CHECK(why.empty(), "init_from '", path, "' does not match the model's params", why,
            " (how names map: pax/train/import_params.h, or the README's section on checkpoints)");
  return rebuild(like, "", have);
}

}  // namespace pax::train

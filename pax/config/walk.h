// Walking an HParams tree by path: every field (nested structs flattened),
// every template slot, and every path that reaches each template — a
// template shared by several fields is one object reached by several paths.
// Used by Config for JSON sharing, printing, copying and partial configs.
// Also the words that describe a field's kind in errors.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pax/config/hparams.h"

namespace pax::config_detail {

// What a field holds, for errors: "an integer", "a list of numbers like [0.5, 1]".
const char* describe_kind(const FieldRef& f);

// "a.b" from "a" and "b" ("b" when `path` is the root's, "").
std::string join_path(const std::string& path, const std::string& field);

// f(owner, field, path of the field) for each field of `h` and, recursively,
// of its nested structs (not of its templates), in declaration order; `path`
// is h's own path.
using FieldFn = std::function<void(BaseHParams& owner, const FieldRef& field, const std::string& path)>;
void for_each_field(BaseHParams& h, const std::string& path, const FieldFn& f);

// f(slot, path of the slot) for each template slot among those fields: a
// template field, or one element of a list of templates ("layers[1]").
using SlotFn = std::function<void(HParamsPtr& slot, const std::string& path)>;
void for_each_slot(BaseHParams& h, const std::string& path, const SlotFn& f);

// The objects of a tree: the root and every template under it, in tree
// order, each with every path that reaches it (first path first; the root's
// is ""). The inside of a shared template is walked once, from its first path.
struct TemplatePaths {
  std::vector<BaseHParams*> order;
  std::map<const BaseHParams*, std::vector<std::string>> paths;

  // How many fields refer to `h` (2 or more: shared).
  size_t count(const BaseHParams* h) const {
    auto it = paths.find(h);
    return it == paths.end() ? 0 : it->second.size();
  }
};
TemplatePaths template_paths(const HParamsPtr& root);

}  // namespace pax::config_detail

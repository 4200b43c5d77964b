// convert_pre_linen: flax's per-class renumbering of submodule names.
#include "pax/train/convert_pre_linen.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pax/train/checkpoint_step.h"

namespace pax::train {
namespace {

// flax's MODULE_NUM_RE, (.*)_\d+$: the module part of "<module>_<digits>",
// the last '_' followed by digits alone; nullopt for other names.
std::optional<std::string> module_of(const std::string& name) {
  const size_t underscore = name.rfind('_');
  if (underscore == std::string::npos || underscore + 1 == name.size()) return std::nullopt;
  for (size_t i = underscore + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return name.substr(0, underscore);
}

}  // namespace

Tree convert_pre_linen(const Tree& params) {
  if (!params.is_dict()) return params;
  std::map<std::string, int64_t> counts;
  Tree::Dict renamed;
  for (const std::string& name : natural_sort(params.keys())) {
    std::string new_name = name;
    if (std::optional<std::string> module = module_of(name))
      new_name = *module + "_" + std::to_string(counts[*module]++);
    renamed.emplace_back(std::move(new_name), convert_pre_linen(params[name]));
  }
  return Tree::dict(std::move(renamed));
}

}  // namespace pax::train

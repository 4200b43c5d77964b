// Variational weight noise: which variables, and the noisy parameters.
#include "pax/train/variational_noise.h"

#include <cmath>
#include <regex>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::train {

namespace {

std::regex compile_regex(const std::string& pattern) {
  try {
    return std::regex(pattern);
  } catch (const std::regex_error& e) {
    PAX_FAIL("vn.vn_regex '", pattern, "' is not a valid regular expression: ", e.what());
  }
}

}  // namespace

void VariationalNoise::check() const {
  PAX_CHECK(std::isfinite(vn_scale) && vn_scale >= 0, "vn.vn_scale must be >= 0 (0: no noise), got ", vn_scale);
  PAX_CHECK(vn_start_step >= 0, "vn.vn_start_step must be >= 0, got ", vn_start_step);
  compile_regex(vn_regex);
}

std::vector<bool> VariationalNoise::selection(const Tree& params) const {
  check();
  const std::regex regex = compile_regex(vn_regex);
  std::vector<bool> selected;
  std::string some_paths;
  bool any = false;
  for (const std::string& path : tree_paths(params)) {
    const std::string name = "params/" + path;
    const bool match = std::regex_search(name, regex, std::regex_constants::match_continuous);
    selected.push_back(match);
    any = any || match;
    if (selected.size() <= 4) some_paths += (some_paths.empty() ? "" : ", ") + name;
  }
  PAX_CHECK(!enabled() || any, "vn.vn_regex '", vn_regex, "' matches no variable, but vn.vn_scale is ", vn_scale,
            ": set vn.vn_scale=0 or match the start of a path such as ", some_paths, " (paths start with 'params/')");
  return selected;
}

Tree VariationalNoise::add_noise(const Tree& params, const Array& step, const Array& key, const nn::ShardingPlan& plan,
                                 const nn::LeafSplits& splits) const {
  if (!enabled()) return params;
  const std::vector<bool> selected = selection(params);
  const std::vector<Array> keys_of = random::split_keys(key, int64_t(selected.size()));
  const Array on = step >= double(vn_start_step);
  size_t i = 0;
  return tree_map(
      [&](const Array& p) {
        const size_t leaf = i++;
        if (!selected[leaf]) return p;
        Array leaf_key = keys_of[leaf];
        if (leaf < splits.stage.size() && splits.stage[leaf]) leaf_key = nn::key_of_this_part(leaf_key, plan.stage);
        if (leaf < splits.mdl.size() && splits.mdl[leaf]) leaf_key = nn::key_of_this_part(leaf_key, plan.tp);
        const Array noise = random::normal(leaf_key, p.shape(), p.dtype()) * vn_scale;
        return where(on, p + noise.astype(p.dtype()), p);
      },
      params);
}

PAX_REGISTER_HPARAMS(VariationalNoise, "vn");

}  // namespace pax::train

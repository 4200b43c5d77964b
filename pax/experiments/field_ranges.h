// The valid range of every numeric config field, by field name: before a run,
// each number in an experiment's config (integers, reals, lists and optional
// values, at any depth of templates) is checked against its rule, so that a
// negative dropout probability or a NaN epsilon is refused with the field's
// path and its range instead of training on silently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pax/config/config.h"

namespace pax::experiments {

struct FieldRange {
  double min = 0, max = 0;
  bool min_open = false, max_open = false;  // excluded ends
  std::string str() const;                  // "[0, 1)", "at least 1", "any finite number"
  bool contains(double v) const;            // NaN never is
};

// The rule for a numeric field of this name; nullopt for a name with none.
std::optional<FieldRange> field_range(const std::string& field_name);

// Every numeric field of `config` with its path ("model.lm_tpl.model_dims"),
// for the check and for the test that every field has a rule.
struct NumericField {
  std::string path, name;
  std::vector<double> values;  // one, several (lists) or none (an unset optional)
};
std::vector<NumericField> numeric_fields(const Config& config);

// Throws pax::Error naming the first field outside its range:
// "model.lm_tpl.stacked_transformer_tpl.transformer_layer_params_tpl
//  .atten_dropout_prob = -1 is out of range: a probability in [0, 1)".
void check_field_ranges(const Config& config);

}  // namespace pax::experiments

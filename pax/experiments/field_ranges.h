// The check of every numeric config field against the range its PAX_HPARAMS
// entry declares (pax/config/field_range.h): before a run, each number in an
// experiment's config (integers, reals, lists and optional values, at any
// depth of templates) is checked, so that a negative dropout probability or a
// NaN epsilon is refused with the field's path and its range instead of
// training on silently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pax/config/config.h"

namespace pax::experiments {

// Every numeric field of `config` with its path ("model.lm_tpl.model_dims"),
// for the check and for the test that every field declares a range.
struct NumericField {
  std::string path, name;
  std::string type;                 // the HParams type that declares it ("Linear")
  std::vector<double> values;       // one, several (lists) or none (an unset optional)
  std::optional<FieldRange> range;  // as declared; nullopt: none (a test fails for it)
};
std::vector<NumericField> numeric_fields(const Config& config);

// Throws pax::Error naming the first field outside its range:
// "model.lm_tpl.stacked_transformer_tpl.transformer_layer_params_tpl
//  .atten_dropout_prob = -1 is out of range: a probability in [0, 1)".
void check_field_ranges(const Config& config);

}  // namespace pax::experiments

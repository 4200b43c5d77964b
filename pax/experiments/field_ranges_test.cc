// Every numeric field of every registered experiment and HParams type has a
// range, the shipped experiments lie inside theirs, and a value outside one is
// refused with the field's path.
#include "pax/experiments/field_ranges.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "pax/experiments/experiment.h"
#include "pax/testing/testing.h"

namespace pax::experiments {
namespace {

TEST(FieldRanges, EveryNumericFieldHasARange) {
  std::set<std::string> missing;
  for (const std::string& name : registered_experiments())
    for (const NumericField& f : numeric_fields(make_experiment(name)->config()))
      if (!f.range) missing.insert(f.type + "." + f.name + " (" + name + ": " + f.path + ")");
  for (const std::string& type : registered_hparams())
    for (const NumericField& f : numeric_fields(Config(make_hparams(type))))
      if (!f.range) missing.insert(f.type + "." + f.name);
  EXPECT_TRUE(missing.empty()) << [&] {
    std::string s =
        "numeric fields whose PAX_HPARAMS entry declares no range (add range::size, range::probability, "
        "... as its third element; pax/config/field_range.h):";
    for (const std::string& m : missing) s += "\n  " + m;
    return s;
  }();
}

// A range is declared on numbers only (elsewhere it would never be checked).
TEST(FieldRanges, RangesAreDeclaredOnNumbersOnly) {
  std::set<std::string> wrong;
  for (const std::string& type : registered_hparams()) {
    const HParamsPtr hp = make_hparams(type);
    hp->visit_fields([&](const FieldRef& f) {
      const bool number = f.kind == FieldKind::integer || f.kind == FieldKind::real || f.kind == FieldKind::integers ||
                          f.kind == FieldKind::reals || f.kind == FieldKind::optional_integer ||
                          f.kind == FieldKind::optional_real;
      if (f.range && !number) wrong.insert(type + "." + f.name);
    });
  }
  EXPECT_TRUE(wrong.empty()) << [&] {
    std::string s = "ranges on fields that are not numbers:";
    for (const std::string& w : wrong) s += "\n  " + w;
    return s;
  }();
}

TEST(FieldRanges, TheShippedExperimentsAreInRange) {
  for (const std::string& name : registered_experiments()) {
    SCOPED_TRACE(name);
    check_field_ranges(make_experiment(name)->config());
  }
}

TEST(FieldRanges, OutOfRangeValuesNameTheFieldAndTheRange) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  const std::string layer = "model.lm_tpl.stacked_transformer_tpl.transformer_layer_params_tpl.";
  auto refused = [&](const std::string& override_text, const std::string& message) {
    Config c = cfg.clone();
    c.apply_overrides({override_text});
    EXPECT_PAX_ERROR(check_field_ranges(c), message);
  };
  refused(layer + "atten_dropout_prob=-1", layer + "atten_dropout_prob = -1 is out of range: it must be [0, 1)");
  refused(layer + "relu_dropout_prob=1", "relu_dropout_prob = 1 is out of range");
  refused(layer + "ln_tpl.epsilon=nan", "ln_tpl.epsilon = nan is out of range: it must be at least 0, finite");
  refused("model.params_init.scale=inf", "model.params_init.scale = inf is out of range: it must be any finite number");
  refused("model.lm_tpl.model_dims=-1", "model.lm_tpl.model_dims = -1 is out of range: it must be [0, 2147483648]");
  refused("learner.optimizer.beta1=1", "learner.optimizer.beta1 = 1 is out of range");
  // Values at the edges are accepted.
  Config ok = cfg.clone();
  ok.apply_overrides({layer + "atten_dropout_prob=0", layer + "ln_tpl.epsilon=0", "model.params_init.scale=-2"});
  check_field_ranges(ok);
}

TEST(FieldRanges, RangeText) {
  EXPECT_EQ((FieldRange{0, 1, false, true}).str(), "[0, 1)");
  EXPECT_FALSE((FieldRange{0, 1, false, true}).contains(std::nan("")));
  EXPECT_TRUE((FieldRange{0, 1, true, false}).contains(1));
  EXPECT_FALSE((FieldRange{0, 1, true, false}).contains(0));
}

}  // namespace
}  // namespace pax::experiments

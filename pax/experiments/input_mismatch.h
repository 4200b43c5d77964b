// Before training: does every eval input read the train input's data, with
// its tokenizer? Evaluating on other data is legitimate, so a difference is
// a warning, not an error — but overriding train_input alone (other files, a
// new tokenizer) silently leaves the eval inputs on the old data, and a
// tokenizer that differs makes their loss meaningless for this model. A
// tokenizer with more ids than the model's vocabulary, though, is an error:
// the embedding lookup would clip the ids past it.
#pragma once

#include <string>
#include <vector>

#include "pax/data/base_input.h"
#include "pax/experiments/experiment.h"

namespace pax::experiments {

// One line per difference between an eval input and train_input in what
// they read (data_source) or how they tokenise (tokenizer_used), naming both
// inputs and both values. Inputs that do not say are not compared.
std::vector<std::string> eval_input_mismatches(const ExperimentConfig& exp);

// Throws pax::Error when `input` (the built config at `field`) has a
// tokenizer whose ids do not fit the vocabulary of the model, a
// LanguageModel (other models are not checked).
void check_vocabulary_fits(const ExperimentConfig& exp, const data::BaseInput& input, const std::string& field);

}  // namespace pax::experiments

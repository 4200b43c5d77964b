// Metrics an input declares (SeqIO's predict_metric_fns and
// score_metric_fns, which Pax computes during decode and eval): named
// functions in a registry, chosen by the input's predict_metrics and
// score_metrics. Each returns weighted scalars {name: [value, weight]}, so
// batches and processes combine as the model's metrics do.
//
//   prompts.predict_metrics = ["exact_match", "token_accuracy"]
//   prompts.targets = [" God created", ...]   (PromptInput: one per prompt)
//   validation.score_metrics = ["log_likelihood"]
//
// Predict metrics see, per decoded example, its target and its prediction:
// the decoded text after the prompt, cut to the target's length in tokens of
// the input's tokenizer (decoding runs to max_decode_length, past where the
// target ends). Score metrics see an eval batch and the model's per-example
// outputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/data/base_input.h"

namespace pax::train {

// {name: [value, weight]} over examples: targets[i] against predictions[i]
// (token ids of the input's tokenizer).
using PredictMetricFn = std::function<Tree(const std::vector<std::vector<int32_t>>& targets,
                                           const std::vector<std::vector<int32_t>>& predictions)>;
// {name: [value, weight]} of one eval batch from its per-example outputs.
using ScoreMetricFn = std::function<Tree(const Tree& batch, const Tree& per_example)>;

void register_predict_metric(const std::string& name, PredictMetricFn fn);
void register_score_metric(const std::string& name, ScoreMetricFn fn);

// Throws pax::Error naming the input, the unknown metric and the registered
// ones (experiment validation calls it before any work).
void check_input_metrics(const data::BaseInput::HParams& input, const std::string& field);

// The input's predict metrics over decoded texts: each `outputs[i]` (the
// whole decoded text, its prompt `prompts[i]` first) against
// input.targets()[indices[i]], tokenised with `tokenize`.
Tree predict_metrics(const data::BaseInput& input, const std::vector<std::string>& prompts,
                     const std::vector<std::string>& outputs, const std::vector<int64_t>& indices,
                     const std::function<std::vector<int32_t>(const std::string&)>& tokenize);

// The input's score metrics of one eval batch ({} when it declares none).
Tree score_metrics(const data::BaseInput::HParams& input, const Tree& batch, const Tree& per_example);

}  // namespace pax::train

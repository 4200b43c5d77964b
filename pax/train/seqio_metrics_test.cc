// Input-declared metrics (SeqIO's predict and score metric functions): the
// built-in ones against hand counts, the registry's errors, and predictions
// cut from decoded texts.
#include "pax/train/seqio_metrics.h"

#include <gtest/gtest.h>

#include "pax/data/prompts.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

// A value of {name: [value, weight]}.
double value_of(const Tree& metrics, const std::string& name) { return metrics[name][0].leaf().item<double>(); }
double weight_of(const Tree& metrics, const std::string& name) { return metrics[name][1].leaf().item<double>(); }

std::vector<int32_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

data::PromptInput prompts_with(std::vector<std::string> targets, std::vector<std::string> metrics) {
  data::PromptInput::HParams hp;
  hp.name = "qa";
  hp.prompts = {"In the", "And God", "The LORD"};
  hp.targets = std::move(targets);
  hp.predict_metrics = std::move(metrics);
  return data::PromptInput(hp);
}

TEST(SeqioMetrics, PredictMetricsCountMatchesOfTheContinuationCutToTheTarget) {
  const data::PromptInput input = prompts_with({" beginning", " said", " is my"}, {"exact_match", "token_accuracy"});
  // Decoding runs past the target; the continuation is cut to its length.
  const std::vector<std::string> prompts = {"In the", "The LORD", "And God"};
  const std::vector<std::string> outputs = {"In the beginning God", "The LORD is me, and", "And God sad"};
  const std::vector<int64_t> indices = {0, 2, 1};  // the examples' places in the prompt set
  const Tree m = predict_metrics(input, prompts, outputs, indices, bytes);
  // " beginning" matches; " is my" vs " is me": 5 of 6; " said" vs " sad ": 3 of 5 (' ', 's', 'a').
  EXPECT_NEAR(value_of(m, "exact_match"), 100.0 / 3.0, 1e-9);
  EXPECT_EQ(weight_of(m, "exact_match"), 3.0);
  EXPECT_NEAR(value_of(m, "token_accuracy"), 100.0 * (10 + 5 + 3) / 21.0, 1e-9);
  EXPECT_EQ(weight_of(m, "token_accuracy"), 21.0);
}

TEST(SeqioMetrics, LogLikelihoodIsTheSequencesMeanOverRealRows) {
  data::PromptInput::HParams hp;
  hp.score_metrics = {"log_likelihood"};
  // xent (2 sequences x 3 tokens); the second row is padding (weights 0).
  const Tree per_example = Tree::dict({{"xent", array<float>({0.5f, 1.0f, 2.0f, 9.0f, 9.0f, 9.0f}, Shape{2, 3})}});
  const Tree batch = Tree::dict({{"weights", array<float>({1, 1, 0, 0, 0, 0}, Shape{2, 3})}});
  const Tree m = score_metrics(hp, batch, per_example);
  EXPECT_NEAR(value_of(m, "log_likelihood"), -1.5, 1e-6);
  EXPECT_EQ(weight_of(m, "log_likelihood"), 1.0);
  EXPECT_PAX_ERROR(score_metrics(hp, batch, Tree::dict({{"logits", zeros({2, 3})}})), "no per-token 'xent'");
}

TEST(SeqioMetrics, UnknownNamesAndMissingTargetsAreRefused) {
  data::PromptInput::HParams hp;
  hp.prompts = {"a"};
  hp.predict_metrics = {"exact_mach"};
  EXPECT_PAX_ERROR(check_input_metrics(hp, "decode_inputs[0]"),
                   "decode_inputs[0].predict_metrics: unknown metric 'exact_mach'; the predict metrics are: "
                   "exact_match, token_accuracy");
  hp.predict_metrics = {};
  hp.score_metrics = {"bleu"};
  EXPECT_PAX_ERROR(check_input_metrics(hp, "eval_inputs[0]"), "the score metrics are: log_likelihood");
  EXPECT_PAX_ERROR(prompts_with({}, {"exact_match"}), "predict_metrics need the expected continuations");
  EXPECT_PAX_ERROR(prompts_with({"x"}, {}), "1 targets for 3 prompts");
}

}  // namespace
}  // namespace pax::train

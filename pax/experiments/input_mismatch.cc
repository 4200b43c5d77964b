// eval_input_mismatches: the eval inputs' sources and tokenizers against the
// train input's.
#include "pax/experiments/input_mismatch.h"

#include "pax/nn/models/language_model.h"
#include "pax/nn/models/transformer_lm.h"

namespace pax::experiments {

std::vector<std::string> eval_input_mismatches(const ExperimentConfig& exp) {
  std::vector<std::string> lines;
  const auto* train = dynamic_cast<const data::BaseInput::HParams*>(exp.train_input.get());
  if (!train) return lines;
  for (size_t i = 0; i < exp.eval_inputs.size(); ++i) {
    const auto* eval = dynamic_cast<const data::BaseInput::HParams*>(exp.eval_inputs[i].get());
    if (!eval) continue;
    const std::string who = "eval_inputs[" + std::to_string(i) + "] ('" + eval->name + "')";
    auto compare = [&](const std::string& what, const std::string& e, const std::string& t) {
      if (!e.empty() && !t.empty() && e != t)
        lines.push_back(who + " " + what + " " + e + ", but train_input ('" + train->name + "') " + what + " " + t);
    };
    compare("reads", eval->data_source(), train->data_source());
    compare("tokenises with", eval->tokenizer_used(), train->tokenizer_used());
  }
  return lines;
}

void check_vocabulary_fits(const ExperimentConfig& exp, const data::BaseInput& input, const std::string& field) {
  const auto* model = dynamic_cast<const nn::LanguageModel::HParams*>(exp.model.get());
  const auto* lm = model ? dynamic_cast<const nn::TransformerLm::HParams*>(model->lm_tpl.get()) : nullptr;
  const int64_t ids = input.vocab_size();
  if (!lm || ids == 0) return;
  PAX_CHECK(ids <= lm->vocab_size, field, " ('", input.base_hparams().name, "'): its tokenizer gives ", ids,
            " ids but model.lm_tpl.vocab_size is ", lm->vocab_size, "; set --set model.lm_tpl.vocab_size=", ids,
            " (or a tokenizer of at most ", lm->vocab_size, " ids)");
}

}  // namespace pax::experiments

// PromptInput: the prompts of a decode run — a fixed list of texts,
// tokenised with the model's tokenizer — as batches that LanguageModel's
// decode reads:
//   prefix          (B, P) i32: the start id (bos, else pad as T5) and the
//                   prompt's tokens, padded with pad to the longest prompt
//   prefix_lengths  (B,) i32: tokens of the row's prefix (0: padding row)
//   weights         (B,) f32: 1, 0 for padding rows
//   example_index   (B,) i32: the prompt's index (-1: padding row), which
//                   targets() and predict_metrics read
// It is an IndexedInput, so hosts read disjoint prompts and a finite run
// pads to whole batches. By default one decode run reads every prompt once
// (reset_for_eval = true, repeat = false).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pax/data/indexed_input.h"
#include "pax/data/tokenizer.h"

namespace pax::data {

class PromptInput : public IndexedInput {
 public:
  struct HParams : BaseInput::HParams {
    std::vector<std::string> prompts;
    std::vector<std::string> targets;
    std::string tokenizer = "bytes";
    std::string data_dir;
    HParams() {
      reset_for_eval = true;
      repeat = false;
    }
    PAX_HPARAMS(PromptInput, BaseInput::HParams, (prompts, "The texts decoding continues."),
                (targets, "The expected continuation of each prompt (empty: none), for predict_metrics."),
                (tokenizer, "'bytes', a SentencePiece model path, or kjv_spm:<vocab> (as TextLmInput's)."),
                (data_dir, "Data directory (empty: --data_dir, $PAX_DATA_DIR or ./data)."));
  };

  explicit PromptInput(const HParams& hparams);
  std::vector<std::string> ids_to_strings(const Array& ids, const Array& lengths = Array()) const override;
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  const std::vector<std::string>& targets() const override { return hparams<HParams>().targets; }
  std::vector<int32_t> text_to_ids(const std::string& text) const override { return tokenizer_->encode(text); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 protected:
  Tree make_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<std::vector<int32_t>> prefixes_;
  int64_t max_length_ = 0;
};

// The text of rows of ids through a tokenizer: row b's first lengths[b]
// tokens (all when `lengths` is undefined). Shared by the text inputs.
std::vector<std::string> decode_rows(const Tokenizer& tokenizer, const Array& ids, const Array& lengths);

}  // namespace pax::data

// LanguageModel (as praxis LanguageModel): a TransformerLm trained with next
// token cross entropy, and sampled through its KV cache.
//
// Input batch (Pax's LM batch): ids, labels, paddings (B, T); optional
// weights (B, T) (default 1 - paddings), segment_ids and segment_pos (B, T)
// for packed rows. Metrics: total_loss, avg_xent, log_pplx,
// fraction_of_correct_next_step_preds, num_predictions (weighted scalars).
//
// Decoding: batch {prefix (B, P) ids, prefix_lengths (B,)}; every example
// continues after its own prefix, greedily or by temperature / top-k sampling
// (keys from the "decode" stream), until eos_id or max_decode_length tokens.
// Run decode under apply_with with mutable_collections = {"decoder_cache"}.
#pragma once

#include "pax/nn/models/base_model.h"
#include "pax/nn/models/transformer_lm.h"

namespace pax::nn {

enum class Sampling : int { greedy, temperature, top_k };
PAX_ENUM(Sampling, "greedy", "temperature", "top_k")

class LanguageModel : public BaseModel {
 public:
  struct HParams : Layer::HParams {
    HParamsPtr lm_tpl = tpl<TransformerLm>();
    Sampling sampling = Sampling::greedy;
    double temperature = 1.0;
    int64_t top_k = 40;
    int64_t eos_id = 1;
    int64_t max_decode_length = 64;
    PAX_HPARAMS(LanguageModel, Layer::HParams, (lm_tpl, "The network (a TransformerLm)."),
                (sampling, "Decoding: greedy, temperature or top_k sampling."),
                (temperature, "Softmax temperature of sampling (> 0).", range::non_negative),
                (top_k, "Tokens kept by top_k sampling (>= 1).", range::size),
                (eos_id, "Token that ends a decoded sequence (< 0: none).", range::closed(-1, range::kMaxDim)),
                (max_decode_length, "Length of decoded sequences, prefix included.", range::size));
  };

  // {logits (B, T, V)}
  Tree compute_predictions(const Tree& input_batch) const override;
  // metrics as above; per example: xent (B, T).
  std::pair<Tree, Tree> compute_loss(const Tree& predictions, const Tree& input_batch) const override;
  // {output_ids (B, max_decode_length) i32, decode_lengths (B,) i32, prefix_lengths (B,) i32}
  Tree decode(const Tree& input_batch) const override;
  // The key/value caches of a batch of prefixes (B, P): (B, max_decode_length, ...) per layer.
  void init_decode_states(const Tree& input_batch) const override;

  const TransformerLm& lm() const { return *lm_; }
  // Training FLOPs per token: 6 N + 6 L H T (parameters N, layers L,
  // attention depth H, sequence length T). PaLM's appendix B counts the
  // attention's logits and weighted sum as 12 L H T; the model is causal, so
  // half of those products are needed (and the attention kernels skip the
  // rest), as llm.c counts them. With PaLM's count a long-sequence step could
  // report more than 100% MFU.
  double flops_per_token(int64_t seq_length) const;
  double flops_per_example(const Tree& input_batch) const override;

 protected:
  void setup() override;

 private:
  const TransformerLm* lm_ = nullptr;
};

}  // namespace pax::nn

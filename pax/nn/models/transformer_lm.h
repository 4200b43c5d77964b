// TransformerLm (as praxis TransformerLm): token embedding (tied with the
// softmax by default), position embedding, a stack of Transformer blocks
// (StackedTransformer or Repeat), a final normalisation and the logits.
// Packed inputs (several sequences per row) use segment ids and positions.
#pragma once

#include "pax/nn/embedding.h"
#include "pax/nn/normalization.h"
#include "pax/nn/transformers.h"

namespace pax::nn {

class TransformerLm : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t model_dims = 0;
    int64_t vocab_size = 0;
    HParamsPtr position_emb_tpl = tpl<PositionalEmbedding>();
    HParamsPtr stacked_transformer_tpl = tpl<StackedTransformer>();
    HParamsPtr final_ln_tpl = tpl<LayerNorm>();
    HParamsPtr softmax_tpl = tpl<SharedEmbeddingSoftmax>();
    HParamsPtr separate_embedding_tpl;
    PAX_HPARAMS(TransformerLm, Layer::HParams, (model_dims, "Model depth D.", range::size),
                (vocab_size, "Vocabulary size V.", range::size),
                (position_emb_tpl,
                 "Position embedding (PositionalEmbedding, TrainablePositionalEmbedding, or None "
                 "when the attention uses rotary embeddings)."),
                (stacked_transformer_tpl,
                 "The blocks: a StackedTransformer or a Repeat of one, or of a Transformer (model_dims and "
                 "causal attention are set here)."),
                (final_ln_tpl, "Normalisation after the stack (LayerNorm or RmsNorm)."),
                (softmax_tpl,
                 "Logits layer (SharedEmbeddingSoftmax; it also embeds ids unless a separate "
                 "embedding is given)."),
                (separate_embedding_tpl, "Untied input embedding (an Embedding), or None for tied weights."));
  };

  // ids, paddings: (B, T); segment_ids / segment_pos (B, T) for packed
  // inputs (optional). Returns logits (B, T, V).
  Array fprop(const Array& ids, const Array& paddings, const Array& segment_ids = Array(),
              const Array& segment_pos = Array()) const;
  // One decoding step: ids (B,) at position time_step (an int scalar) ->
  // logits (B, V), through the "decoder_cache" collection.
  Array extend_step(const Array& ids, const Array& time_step) const;
  void init_states(int64_t batch, int64_t max_length) const;

  // Transformer blocks and attention depth, for FLOP counts.
  int64_t num_layers() const;
  int64_t attention_dims() const;

 protected:
  void setup() override;

 private:
  Array embed(const Array& ids) const;
  const Layer* position_emb_ = nullptr;
  const RepeatableLayer* stack_ = nullptr;
  const Layer* final_ln_ = nullptr;
  const SharedEmbeddingSoftmax* softmax_ = nullptr;
  const Embedding* embedding_ = nullptr;  // separate (untied) embedding, if any
  bool bare_blocks_ = false;              // Repeat(s) of a bare Transformer: the LM builds the causal mask
};

// (B, 1, T, T) additive mask letting position t attend to s only within the
// same segment (segment_ids (B, T)).
Array segment_mask(const Array& segment_ids, DType dtype = DType::f32);

}  // namespace pax::nn

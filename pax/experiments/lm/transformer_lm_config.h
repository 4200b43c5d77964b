// The decoder-only Transformer language model that the LM experiments share
// (paxml's tasks/lm/model_params: TransformerLmSpmdAdafactor and friends),
// built from a handful of numbers.
#pragma once

#include <string>

#include "pax/config/hparams.h"
#include "pax/core/dtype.h"
#include "pax/nn/transformers.h"

namespace pax::experiments {

struct TransformerLmShape {
  int64_t vocab_size = 0;
  int64_t model_dims = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t hidden_dims = 0;          // 0: 4 * model_dims
  int64_t dim_per_head = 0;         // 0: model_dims / num_heads
  std::string activation = "ReLU";  // ReLU | GELU
  bool combine_qkv = true;
  bool attention_bias = true;                 // biases in the attention projections
  int64_t trainable_position_emb_length = 0;  // > 0: learnt position embeddings of this length
  double atten_logit_cap = 0.0;               // 0: none
  double soft_cap_logits = 0.0;               // 0: none
  DType fprop_dtype = DType::f32;
  int64_t max_decode_length = 64;
  // paxml's USE_REPEATED_LAYER: the blocks are a Repeat (x_times num_layers)
  // of a one-block StackedTransformer, scanned, rematerialised as below.
  bool repeated_layers = false;
  // paxml's pipelined configs (MICROBATCH_SIZE): the Repeat is pipelined
  // over the mesh's stage axis in microbatches of this many rows (0: not
  // pipelined); implies repeated_layers.
  int64_t pipeline_microbatch_size = 0;
  nn::CheckpointPolicy checkpoint_policy = nn::CheckpointPolicy::nothing_saveable;  // paxml's SAVE_NOTHING
};

// A LanguageModel config over a TransformerLm of that shape.
HParamsPtr transformer_lm_model(const TransformerLmShape& shape);

}  // namespace pax::experiments

// transformer_lm_model: a LanguageModel config from a TransformerLmShape.
#include "pax/experiments/lm/transformer_lm_config.h"

#include "pax/core/error.h"
#include "pax/nn/activations.h"
#include "pax/nn/attention.h"
#include "pax/nn/models/language_model.h"
#include "pax/nn/transformers.h"

namespace pax::experiments {

HParamsPtr transformer_lm_model(const TransformerLmShape& s) {
  PAX_CHECK(s.vocab_size > 0 && s.model_dims > 0 && s.num_layers > 0 && s.num_heads > 0,
            "transformer_lm_model: vocab_size, model_dims, num_layers and num_heads must be > 0");
  auto model = nn::tpl<nn::LanguageModel>();
  model->max_decode_length = s.max_decode_length;
  model->fprop_dtype = s.fprop_dtype;
  auto lm = nn::tpl<nn::TransformerLm>();
  lm->vocab_size = s.vocab_size;
  lm->model_dims = s.model_dims;
  lm->fprop_dtype = s.fprop_dtype;
  auto softmax = std::static_pointer_cast<nn::SharedEmbeddingSoftmax::HParams>(lm->softmax_tpl);
  softmax->soft_cap_logits = s.soft_cap_logits;
  if (s.trainable_position_emb_length > 0) {
    auto pos = nn::tpl<nn::TrainablePositionalEmbedding>();
    pos->max_seq_length = s.trainable_position_emb_length;
    lm->position_emb_tpl = pos;
  }

  auto stack = std::static_pointer_cast<nn::StackedTransformer::HParams>(lm->stacked_transformer_tpl);
  stack->num_layers = s.num_layers;
  stack->num_heads = s.num_heads;
  stack->hidden_dims = s.hidden_dims > 0 ? s.hidden_dims : 4 * s.model_dims;
  stack->dim_per_head = s.dim_per_head;
  stack->mask_self_attention = true;
  auto block = std::static_pointer_cast<nn::Transformer::HParams>(stack->transformer_layer_params_tpl);
  auto atten = std::static_pointer_cast<nn::DotProductAttention::HParams>(block->tr_atten_tpl);
  atten->combine_qkv = s.combine_qkv;
  atten->use_bias = s.attention_bias;
  atten->atten_logit_cap = s.atten_logit_cap;
  auto ff = std::static_pointer_cast<nn::TransformerFeedForward::HParams>(block->tr_fflayer_tpl);
  if (s.activation == "GELU") {
    ff->activation_tpl = nn::tpl<nn::GELU>();
  } else {
    PAX_CHECK(s.activation == "ReLU", "transformer_lm_model: activation must be ReLU or GELU, got ", s.activation);
  }
  // praxis StackedTransformerRepeated (or, pipelined, its
  // LayerwiseShardablePipelined): a one-block stack, x_times num_layers.
  if (s.repeated_layers || s.pipeline_microbatch_size > 0) {
    auto repeat = nn::tpl<nn::Repeat>();
    repeat->x_times = s.num_layers;
    repeat->checkpoint_policy = s.checkpoint_policy;
    repeat->microbatch_size = s.pipeline_microbatch_size;
    stack->num_layers = 1;
    repeat->sub_tpl = stack;
    lm->stacked_transformer_tpl = repeat;
  }
  model->lm_tpl = lm;
  return model;
}

}  // namespace pax::experiments

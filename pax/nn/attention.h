// Multi-head dot-product attention, as praxis.layers.attentions: the per-head
// projections (AttentionProjection, CombinedQKVProjectionLayer), the
// attention layer with grouped-query heads, logit capping, rotary position
// embeddings and a KV cache for decoding (DotProductAttention), and the mask
// helpers.
//
// Masks follow Praxis: a float array, 0 where attending is allowed and
// large_negative_number() where it is not. Masks combine with combine_masks
// (elementwise minimum); logits where the mask is below half of
// large_negative_number are replaced by large_negative_number (praxis
// apply_mask_to_logits), so a fully masked row attends uniformly instead of
// producing NaN.
//
//   auto mask = combine_masks(padding_mask(paddings), causal_mask(T));  // (B, 1, T, T)
//   Array y = apply(*atten, vars, x, mask).output;                       // self-attention
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "pax/nn/dropout.h"
#include "pax/nn/layer.h"
#include "pax/ops/lax.h"
#include "pax/nn/rotary.h"

namespace pax::nn {

// ---------------------------------------------------------------------------
// masks

// -0.7 times the largest finite value of `dtype` (room to add two of them).
double large_negative_number(DType dtype);
// (1, 1, T, T): position t may attend to positions <= t.
Array causal_mask(int64_t length, DType dtype = DType::f32);
// paddings (B, S), 1 at padded positions -> (B, 1, 1, S): padded keys masked.
Array padding_mask(const Array& paddings, DType dtype = DType::f32);
// Both masks (broadcast against each other): the elementwise minimum.
Array combine_masks(const Array& a, const Array& b);
// For decoding step `time_step` (integer scalar) over a cache of `length`
// positions: (1, 1, length) masking the positions after time_step.
Array causal_step_mask(const Array& time_step, int64_t length, DType dtype = DType::f32);

// ---------------------------------------------------------------------------
// projections

// Per-head projection. Input projection: (..., D) -> (..., N, H) with w
// (D, N, H) and b (N, H). Output projection: (..., N, H) -> (..., D) with
// w (N, H, D) and b (D,). Fans: D in, N * H out (reversed for the output).
// Under tensor parallelism the heads split over mdl: each process projects
// onto its N / mdl heads, and the output projection sums the processes'
// partial outputs (leave_split) before its bias.
class AttentionProjection : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dim = 0;
    int64_t num_heads = 0;
    int64_t dim_per_head = 0;
    bool is_output_projection = false;
    bool use_bias = true;
    PAX_HPARAMS(AttentionProjection, Layer::HParams, (input_dim, "Model depth D.", range::size),
                (num_heads, "Number of heads N.", range::size), (dim_per_head, "Depth of each head H.", range::size),
                (is_output_projection, "Project heads back to the model depth: (N, H) -> D."),
                (use_bias, "Add a bias (initialised to 0)."));
  };
  Array fprop(const Array& x) const;
  // An input projection of x that already entered the mdl split
  // (enter_split): DotProductAttention enters once for its three projections.
  Array project_entered(const Array& x) const;

 protected:
  void setup() override;
};

// Query, key and value projections in one weight w (D, 3, N, H) and bias
// b (3, N, H): (..., D) -> three (..., N, H).
class CombinedQKVProjectionLayer : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dim = 0;
    int64_t num_heads = 0;
    int64_t dim_per_head = 0;
    bool use_bias = true;
    PAX_HPARAMS(CombinedQKVProjectionLayer, Layer::HParams, (input_dim, "Model depth D.", range::size),
                (num_heads, "Number of heads N.", range::size), (dim_per_head, "Depth of each head H.", range::size),
                (use_bias, "Add a bias (initialised to 0)."));
  };
  std::tuple<Array, Array, Array> project(const Array& x) const;

 protected:
  void setup() override;
};

// ---------------------------------------------------------------------------
// attention

// softmax(q k^T / sqrt(H) + mask) v per head, then the output projection.
// With num_kv_heads = K < N (grouped-query attention), query head n uses
// key/value head n / (N / K), as repeating each K head N / K times would.
// Logits and the logit cap (cap * tanh(logits / cap), before masking) are
// computed in fprop_dtype, the softmax in f32 (f64 for f64 fprop).
//
// Decoding: extend_step projects one position, writes its key and value at
// time_step into the "decoder_cache" collection (key_state, value_state:
// (B, S, K, H) in fprop_dtype; keys after the rotary embedding when it is
// used) and attends over the cache. The cache comes from init_states or is
// created (zeros, S from the mask) on the first step; both need
// "decoder_cache" mutable in apply.
class DotProductAttention : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dim = 0;
    int64_t hidden_dim = 0;
    int64_t num_heads = 1;
    int64_t dim_per_head = 0;
    int64_t num_kv_heads = 0;
    double atten_dropout_prob = 0.0;
    HParamsPtr dropout_tpl = tpl<Dropout>();
    HParamsPtr proj_tpl = tpl<AttentionProjection>();
    bool combine_qkv = false;
    HParamsPtr combined_qkv_proj_tpl = tpl<CombinedQKVProjectionLayer>();
    bool use_bias = true;
    double atten_logit_cap = 0.0;
    bool use_rotary_position_emb = false;
    HParamsPtr rotary_position_emb_tpl = tpl<RotaryPositionalEmbedding>();
    PAX_HPARAMS(DotProductAttention, Layer::HParams,
                (input_dim, "Model depth D of the inputs and the output.", range::size),
                (hidden_dim, "Total depth of the heads (N * H); gives dim_per_head when that is 0.", range::size),
                (num_heads, "Number of query heads N.", range::size),
                (dim_per_head, "Depth H of each head (0: hidden_dim / num_heads).", range::size),
                (num_kv_heads, "Number of key/value heads K (0: num_heads); must divide num_heads.", range::size),
                (atten_dropout_prob, "Dropout probability of the attention probabilities.", range::probability),
                (dropout_tpl, "Template of the attention-probability dropout."),
                (proj_tpl, "Template of the query, key, value and output projections."),
                (combine_qkv, "One (D, 3, N, H) projection for query, key and value (self-attention, K = N)."),
                (combined_qkv_proj_tpl, "Template of the combined projection."),
                (use_bias, "Biases in the projections."),
                (atten_logit_cap, "Soft cap of the logits: cap * tanh(logits / cap) (0: none).", range::non_negative),
                (use_rotary_position_emb, "Rotate queries and keys by position (RoPE)."),
                (rotary_position_emb_tpl, "Template of the rotary embedding (embedding_dims is set to H)."));
  };

  // query_vec (B, T, D), key_vec (B, S, D), value_vec (B, S, D), atten_mask
  // (B or 1, N or 1, T or 1, S) additive (none: attend everywhere);
  // query_positions (B or 1, T) / key_positions (B or 1, S) for the rotary
  // embedding (default 0, 1, ...) -> (B, T, D).
  Array fprop(const Array& query_vec, const Array& key_vec, const Array& value_vec, const Array& atten_mask = Array(),
              const Array& query_positions = Array(), const Array& key_positions = Array()) const;
  // Self-attention: fprop(x, x, x, atten_mask).
  Array fprop(const Array& x, const Array& atten_mask = Array()) const;

  // One decoding step: query_vec (B, D) at time_step (integer scalar),
  // atten_mask (B or 1, N or 1, S) over the cache positions -> (B, D).
  Array extend_step(const Array& query_vec, const Array& atten_mask, const Array& time_step) const;
  // Writes a zero cache of `max_length` positions (decoder_cache mutable).
  void init_states(int64_t batch, int64_t max_length) const;
  // S of the cache in the variables (0 when there is none yet).
  int64_t decode_cache_length() const;

  int64_t dim_per_head() const { return dim_per_head_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }

 protected:
  void setup() override;

 private:
  // q (B, T, N, H), k / v (B, S, K, H), mask (.., .., T or 1, S) -> (B, T, N, H).
  Array dot_atten(const Array& q, const Array& k, const Array& v, const Array& atten_mask) const;
  // softmax(cap(q k^T / sqrt(H)) + mask) (B, N, T, S) in `dtype`.
  Array probabilities(const Array& q, const Array& k, const Array& atten_mask, DType dtype) const;
  // The bool predicate of attended keys of a float mask (undefined: all).
  Array allowed_keys(const Array& atten_mask) const;
  // The attention_entropy summary from the primitive's options, or from probs.
  Array attention_entropy(const Array& q, const Array& k, const pax::lax::AttentionOptions& o,
                          const Array& atten_mask) const;
  Array mean_entropy(const Array& probs) const;
  Array across_heads(const Array& mean_of_mine) const;
  // Throws for decoding under tensor parallelism (the caches hold every head).
  void check_not_split(const char* what) const;
  void check_mask(const Array& mask, int64_t batch, int64_t time, int64_t source, const char* what) const;
  // Query (..., N, H), key and value (..., K, H) projections.
  std::tuple<Array, Array, Array> project_qkv(const Array& query_vec, const Array& key_vec,
                                              const Array& value_vec) const;
  std::optional<Array> find_cache(const std::string& name) const;
  // Writes value (B, K, H) into the cache `name` at time_step; the new cache.
  Array update_cache(const std::string& name, const Array& value, const Array& time_step, int64_t length) const;

  int64_t dim_per_head_ = 0;
  int64_t num_kv_heads_ = 0;
  const AttentionProjection* query_ = nullptr;
  const AttentionProjection* key_ = nullptr;
  const AttentionProjection* value_ = nullptr;
  const CombinedQKVProjectionLayer* combined_qkv_ = nullptr;
  const AttentionProjection* post_ = nullptr;
  const Dropout* atten_dropout_ = nullptr;
  const RotaryPositionalEmbedding* rotary_ = nullptr;
};

}  // namespace pax::nn

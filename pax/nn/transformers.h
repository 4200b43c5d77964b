// Transformer layers, as praxis.layers.transformers and praxis.layers.repeats:
// TransformerFeedForward (the normalised, residual feed-forward block),
// Transformer (one pre- or post-norm self-attention + feed-forward block),
// StackedTransformer (num_layers blocks with the padding / causal masks) and
// Repeat (one block's variables stacked along a leading axis and applied
// with scan, so that the program does not grow with depth).
//
// Decoding: every layer here has extend_step(inputs (B, D), time_step,
// atten_mask) and init_states(batch, max_length); the key/value caches live
// in the "decoder_cache" collection (see DotProductAttention).
//
//   StackedTransformer::HParams hp;  // num_layers, model_dims, hidden_dims, num_heads ...
//   hp.mask_self_attention = true;
//   auto stack = build<StackedTransformer>(hp);
//   Tree vars = init(*stack, key);
//   Array y = apply(*stack, vars, x, paddings).output;  // (B, T, D)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/nn/activations.h"
#include "pax/nn/attention.h"
#include "pax/nn/dropout.h"
#include "pax/nn/layer.h"
#include "pax/nn/linears.h"
#include "pax/nn/normalization.h"

namespace pax::nn {

// Rematerialisation of Repeat's body in the backward pass.
enum class CheckpointPolicy : int {
  none,              // keep every intermediate
  nothing_saveable,  // keep only each repetition's input; recompute the rest
  dots_saveable,     // also keep the matmul results
};
PAX_ENUM(CheckpointPolicy, "none", "nothing_saveable", "dots_saveable")

// residual + dropout(ffn2(dropout(activation(ffn1(norm(x)))))) * residual_weight
// with norm_policy "pre"; "post" normalises after ffn2 instead. Paddings
// (B, T), when given, zero the padded positions of both projections.
class TransformerFeedForward : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dims = 0;
    int64_t output_dims = 0;
    int64_t hidden_dims = 0;
    bool has_bias = true;
    HParamsPtr activation_tpl = tpl<ReLU>();
    HParamsPtr fflayer_tpl = tpl<FeedForward>();
    HParamsPtr ln_tpl = tpl<LayerNorm>();
    HParamsPtr dropout_tpl = tpl<Dropout>();
    double relu_dropout_prob = 0.0;
    double residual_dropout_prob = 0.0;
    std::string norm_policy = "pre";
    bool add_skip_connection = true;
    double residual_weight = 1.0;
    bool apply_padding_first = false;
    PAX_HPARAMS(TransformerFeedForward, Layer::HParams, (input_dims, "Depth of the input.", range::size),
                (output_dims, "Depth of the output (0: input_dims).", range::size),
                (hidden_dims, "Depth of the hidden layer.", range::size), (has_bias, "Biases in both projections."),
                (activation_tpl, "Activation after the first projection (ReLU, GELU, SiLU, ...)."),
                (fflayer_tpl, "Template of both projections (a FeedForward)."),
                (ln_tpl, "Normalisation template (LayerNorm or RmsNorm)."),
                (dropout_tpl, "Template of the dropout layers."),
                (relu_dropout_prob, "Dropout probability after the activation.", range::probability),
                (residual_dropout_prob, "Dropout probability before the residual connection.", range::probability),
                (norm_policy, "\"pre\": normalise the input; \"post\": normalise the output of ffn2."),
                (add_skip_connection, "Add the input back (needs output_dims == input_dims)."),
                (residual_weight, "Weight of the block's output in the residual sum.", range::finite),
                (apply_padding_first, "Zero padded positions of the input instead of the projections."));
  };
  // inputs (..., D), paddings (B, T) for inputs (B, T, D) or none -> (..., output_dims)
  Array fprop(const Array& inputs, const Array& paddings = Array()) const;
  Array extend_step(const Array& inputs) const { return fprop(inputs); }

 protected:
  void setup() override;

 private:
  const Layer* norm_ = nullptr;  // LayerNorm or RmsNorm
  const FeedForward* ffn1_ = nullptr;
  const FeedForward* ffn2_ = nullptr;
  const Dropout* relu_dropout_ = nullptr;
  const Dropout* residual_dropout_ = nullptr;
};

// A sequence layer Repeat can stack: (B, T, D) -> (B, T, D) with paddings
// and an optional mask, one-step decoding and decode-state setup.
class RepeatableLayer : public Layer {
 public:
  // inputs (B, T, D), paddings (B, T) (none: no padding), atten_mask
  // (B or 1, N or 1, T, T) -> (B, T, D).
  virtual Array fprop(const Array& inputs, const Array& paddings, const Array& atten_mask) const = 0;
  // inputs (B, D) at time_step (integer scalar), atten_mask (B or 1, N or 1,
  // S) (none: causal over the cache) -> (B, D).
  virtual Array extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask) const = 0;
  // Writes zero decoder caches of max_length positions.
  virtual void init_states(int64_t batch, int64_t max_length) const = 0;
};

// One Transformer block (praxis Transformer), norm_policy "pre":
//   x = x + dropout(attention(norm(x), mask)); x = ff_layer(x, paddings)
// where ff_layer (a TransformerFeedForward) normalises and adds its own
// residual. "post" normalises the attention output before the residual.
class Transformer : public RepeatableLayer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dims = 0;
    int64_t hidden_dims = 0;
    int64_t num_heads = 0;
    int64_t dim_per_head = 0;
    int64_t num_kv_heads = 0;
    HParamsPtr dropout_tpl = tpl<Dropout>();
    double atten_dropout_prob = 0.0;
    double residual_dropout_prob = 0.0;
    double relu_dropout_prob = 0.0;
    HParamsPtr ln_tpl = tpl<LayerNorm>();
    std::string norm_policy = "pre";
    HParamsPtr tr_atten_tpl = tpl<DotProductAttention>();
    HParamsPtr tr_fflayer_tpl = tpl<TransformerFeedForward>();
    PAX_HPARAMS(Transformer, Layer::HParams, (input_dims, "Model depth D.", range::size),
                (hidden_dims, "Hidden depth of the feed-forward block.", range::size),
                (num_heads, "Attention heads.", range::size),
                (dim_per_head, "Depth of each head (0: input_dims / num_heads).", range::size),
                (num_kv_heads, "Key/value heads for grouped-query attention (0: num_heads).", range::size),
                (dropout_tpl, "Template of the residual dropout."),
                (atten_dropout_prob, "Dropout probability of the attention probabilities.", range::probability),
                (residual_dropout_prob, "Dropout probability before each residual connection.", range::probability),
                (relu_dropout_prob, "Dropout probability after the feed-forward activation.", range::probability),
                (ln_tpl,
                 "Normalisation before attention (LayerNorm or RmsNorm); the feed-forward block has its own, "
                 "tr_fflayer_tpl.ln_tpl."),
                (norm_policy, "\"pre\" or \"post\" normalisation (also given to the feed-forward block)."),
                (tr_atten_tpl, "Template of the self-attention (a DotProductAttention)."),
                (tr_fflayer_tpl, "Template of the feed-forward block (a TransformerFeedForward)."));
  };
  // atten_mask defaults to the padding mask of paddings.
  Array fprop(const Array& inputs, const Array& paddings, const Array& atten_mask = Array()) const override;
  Array extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask = Array()) const override;
  void init_states(int64_t batch, int64_t max_length) const override;
  const DotProductAttention& self_attention() const { return *self_attention_; }

 protected:
  void setup() override;

 private:
  const Layer* norm_ = nullptr;  // LayerNorm or RmsNorm
  const DotProductAttention* self_attention_ = nullptr;
  const Dropout* residual_dropout_ = nullptr;
  const TransformerFeedForward* ff_layer_ = nullptr;
};

// num_layers Transformer blocks (x_layers_0, x_layers_1, ...) cloned from
// transformer_layer_params_tpl with the dims and dropout probabilities set
// from here. The attention mask is the padding mask, combined with the
// causal mask when mask_self_attention and with atten_mask when given. No
// final normalisation (the language model adds it).
class StackedTransformer : public RepeatableLayer {
 public:
  struct HParams : Layer::HParams {
    int64_t num_layers = 0;
    int64_t model_dims = 0;
    int64_t hidden_dims = 0;
    int64_t num_heads = 0;
    int64_t dim_per_head = 0;
    double dropout_prob = 0.0;
    std::optional<double> atten_dropout_prob;
    std::optional<double> residual_dropout_prob;
    std::optional<double> relu_dropout_prob;
    double input_dropout_prob = 0.0;
    bool mask_self_attention = false;
    HParamsPtr dropout_tpl = tpl<Dropout>();
    HParamsPtr transformer_layer_params_tpl = tpl<Transformer>();
    PAX_HPARAMS(StackedTransformer, Layer::HParams,
                (num_layers, "Number of Transformer blocks.", range::closed(0, 4096)),
                (model_dims, "Model depth D.", range::size),
                (hidden_dims, "Hidden depth of the feed-forward blocks.", range::size),
                (num_heads, "Attention heads.", range::size),
                (dim_per_head, "Depth of each head (0: model_dims / num_heads).", range::size),
                (dropout_prob, "Default of the three dropout probabilities below.", range::probability),
                (atten_dropout_prob, "Attention-probability dropout (None: dropout_prob).", range::probability),
                (residual_dropout_prob, "Residual dropout (None: dropout_prob).", range::probability),
                (relu_dropout_prob, "Feed-forward activation dropout (None: dropout_prob).", range::probability),
                (input_dropout_prob, "Dropout probability of the stack's input.", range::probability),
                (mask_self_attention, "Causal self-attention (a decoder)."),
                (dropout_tpl, "Template of the input dropout."),
                (transformer_layer_params_tpl, "Template of every block (a Transformer)."));
  };
  // atten_mask (B or 1, N or 1, T, T), when given, is combined with the
  // stack's own mask (e.g. a segment mask).
  Array fprop(const Array& inputs, const Array& paddings, const Array& atten_mask = Array()) const override;
  Array extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask = Array()) const override;
  void init_states(int64_t batch, int64_t max_length) const override;
  const std::vector<const Transformer*>& x_layers() const { return x_layers_; }

 protected:
  void setup() override;

 private:
  const Dropout* input_dropout_ = nullptr;
  std::vector<const Transformer*> x_layers_;
};

// Repeat's stand-in for one layer of its sub-layer tree: that layer's
// variables with a leading x_times axis, at the matching path under "sub".
// Created by Repeat::setup only.
class RepeatedVariables : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t x_times = 0;
    PAX_HPARAMS(RepeatedVariables, Layer::HParams,
                (x_times, "Length of the leading (repetition) axis.", range::closed(0, 4096)));
    // Set by Repeat: the stacks split over the stage axis (a pipelined Repeat).
    bool pipelined = false;
    // Set by Repeat, not configuration: the layer mirrored, and the stand-in
    // templates made so far while Repeat builds (a layer shared within the
    // sub-layer gets one stand-in).
    const Layer* source = nullptr;
    std::weak_ptr<std::map<const Layer*, HParamsPtr>> made;
  };
  // A variable of this stand-in, stacked; nullopt when the variables lack it.
  std::optional<Array> find(const std::string& collection, const std::string& name) const;
  void write(const std::string& collection, const std::string& name, const Array& value) const;

 protected:
  void setup() override;
};

// sub_tpl applied x_times times, each repetition with its own variables:
// every variable of the sub-layer is stored once under "sub" with a leading
// x_times axis, and the repetitions run as one scan over those stacks (an
// optionally rematerialised body), so program size does not depend on
// x_times. init draws the stacks in one go: each repetition's slice is an
// independent draw from the sub-layer's initialiser. Decoder caches are
// stacked the same way. The sub-layer must be a RepeatableLayer (a
// Transformer, StackedTransformer or Repeat).
//
// With num_microbatches or microbatch_size set the Repeat is pipelined
// (praxis's LayerwiseShardablePipelined, nn/pipeline.h): under a stage axis
// of S processes each holds x_times / S consecutive repetitions and runs
// them on microbatches in GPipe's schedule. Without a stage axis it runs as
// the plain stack (the same values without dropout: the layers are per
// example; dropout draws per microbatch and stage under the pipeline). Under the
// pipeline a stage's repetitions run unrolled in the pipeline's scan (its
// derivative recomputes each iteration once; a nested scan would recompute
// again), and the auxiliary losses and summaries are averaged over the
// microbatches. A stage's fsdp blocks are gathered once per step, before
// the schedule, not in each of its iterations (and their gradients reduced
// once after it).
class Repeat : public RepeatableLayer {
 public:
  struct HParams : Layer::HParams {
    HParamsPtr sub_tpl = tpl<Transformer>();
    int64_t x_times = 0;
    CheckpointPolicy checkpoint_policy = CheckpointPolicy::nothing_saveable;
    int64_t num_microbatches = 0;
    int64_t microbatch_size = 0;
    bool delay_activation_forwarding = false;
    PAX_HPARAMS(Repeat, Layer::HParams, (sub_tpl, "Template of the repeated layer."),
                (x_times, "Number of repetitions (the depth).", range::closed(0, 4096)),
                (checkpoint_policy, "Rematerialisation of each repetition: none, nothing_saveable, dots_saveable."),
                (num_microbatches,
                 "Pipelined over the mesh's stage axis in this many microbatches of each process's batch (0: not "
                 "pipelined unless microbatch_size is set).",
                 range::size),
                (microbatch_size,
                 "Pipelined over the stage axis in microbatches of this many rows (0: see "
                 "num_microbatches).",
                 range::size),
                (delay_activation_forwarding,
                 "Under the pipeline, send each stage's output during the next iteration, overlapping the "
                 "transfer with that iteration's compute; the bubble doubles (M + 2(S - 1) iterations)."));
  };
  // Whether the stacks split over the stage axis (either microbatch field set).
  bool pipelined() const;
  Array fprop(const Array& inputs, const Array& paddings, const Array& atten_mask = Array()) const override;
  Array extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask = Array()) const override;
  void init_states(int64_t batch, int64_t max_length) const override;
  // The sub-layer, built on its own: its variables are one repetition's.
  const RepeatableLayer& sub() const { return *sub_; }

 protected:
  void setup() override;

 private:
  using Step = std::function<Array(const RepeatableLayer&, const Array&)>;
  // Scans step over the repetitions with `vars` ({collection: {...}} with
  // stacked leaves) sliced per repetition; writes back the stacked updates of
  // `mutable_collections`, the summaries and the auxiliary losses.
  Array run(const Array& inputs, const Step& step, const Tree& vars,
            const std::vector<std::string>& mutable_collections) const;
  // The scan of run without writing anything back: the output and the
  // per-repetition {updates, summaries, aux_loss}. keys (n, 2): one dropout
  // key per repetition held here (undefined: none). unroll: the
  // repetitions one after another instead of a scan.
  std::pair<Array, Tree> scan_repetitions(const Array& inputs, const Step& step, const Tree& vars,
                                          const std::vector<std::string>& mutable_collections, const Array& keys,
                                          bool unroll = false) const;
  // fprop as GPipe's schedule over the stage axis (nn/pipeline.h).
  Array fprop_pipelined(const Array& inputs, const Array& paddings, const Array& atten_mask, const Tree& vars) const;
  // The repetitions this process holds (x_times / stages when pipelined).
  int64_t held_repetitions() const;
  // The declared variables, stacked, as {collection: {path: ...}}.
  Tree stacked_variables() const;
  // `vars` (stacked_variables()) with each fsdp block of a params stack
  // all-gathered into this process's stage block (split over mdl only), in
  // the fprop dtype of the layer that reads it.
  Tree gathered_for_stage(const Tree& vars) const;
  const RepeatedVariables& stand_in(const std::string& relative_path) const;

  std::unique_ptr<Layer> sub_owned_;
  const RepeatableLayer* sub_ = nullptr;
  std::vector<std::pair<std::string, const RepeatedVariables*>> stand_ins_;  // by relative path
};

}  // namespace pax::nn

// TransformerLm.
#include "pax/nn/models/transformer_lm.h"

#include "pax/nn/attention.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

Array segment_mask(const Array& segment_ids, DType dtype) {
  PAX_CHECK(segment_ids.ndim() == 2, "segment_mask: segment_ids must be (batch, length), got ",
            segment_ids.aval().str());
  Array same = equal(expand_dims(segment_ids, {2}), expand_dims(segment_ids, {1}));  // (B, T, T)
  Array mask = where(same, 0.0, large_negative_number(dtype)).astype(dtype);
  return expand_dims(mask, {1});
}

namespace {

// The LM's model_dims and causal masking for every StackedTransformer of a
// stack, and model_dims for a bare Transformer, through Repeats at any depth
// (each level's template cloned first: templates are shared with the config).
// Returns true when the blocks are bare Transformers, which have no causal
// mask of their own: the LM then passes them the whole mask.
bool set_stack_dims(BaseHParams& stack, int64_t model_dims) {
  if (auto* s = dynamic_cast<StackedTransformer::HParams*>(&stack)) {
    s->model_dims = model_dims;
    s->mask_self_attention = true;
  } else if (auto* t = dynamic_cast<Transformer::HParams*>(&stack)) {
    t->input_dims = model_dims;
    return true;
  } else if (auto* r = dynamic_cast<Repeat::HParams*>(&stack); r && r->sub_tpl) {
    r->sub_tpl = r->sub_tpl->clone();
    return set_stack_dims(*r->sub_tpl, model_dims);
  }
  return false;
}

}  // namespace

void TransformerLm::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = std::string("TransformerLm '") + path() + "': ";
  PAX_CHECK(hp.model_dims > 0 && hp.vocab_size > 0, where, "model_dims and vocab_size must be > 0, got ", hp.model_dims,
            " and ", hp.vocab_size);
  auto softmax = clone_template<SharedEmbeddingSoftmax::HParams>(hp.softmax_tpl, "softmax_tpl", where);
  softmax->num_classes = hp.vocab_size;
  softmax->input_dims = hp.model_dims;
  softmax_ = &create_child<SharedEmbeddingSoftmax>("softmax", softmax);
  if (hp.separate_embedding_tpl) {
    auto emb = clone_template<Embedding::HParams>(hp.separate_embedding_tpl, "separate_embedding_tpl", where);
    emb->num_classes = hp.vocab_size;
    emb->input_dims = hp.model_dims;
    embedding_ = &create_child<Embedding>("embedding", emb);
  }
  if (hp.position_emb_tpl) {
    HParamsPtr pos = hp.position_emb_tpl->clone();
    if (auto* p = dynamic_cast<PositionalEmbedding::HParams*>(pos.get())) {
      p->embedding_dims = hp.model_dims;
    } else if (auto* t = dynamic_cast<TrainablePositionalEmbedding::HParams*>(pos.get())) {
      t->embedding_dims = hp.model_dims;
    } else {
      PAX_FAIL(where, "position_emb_tpl must be a PositionalEmbedding or TrainablePositionalEmbedding, got ",
               pos->type_name());
    }
    position_emb_ = &create_child("position_emb", pos);
  }
  HParamsPtr stack = hp.stacked_transformer_tpl ? hp.stacked_transformer_tpl->clone() : nullptr;
  PAX_CHECK(stack, where, "stacked_transformer_tpl must be set");
  PAX_CHECK(dynamic_cast<StackedTransformer::HParams*>(stack.get()) || dynamic_cast<Repeat::HParams*>(stack.get()),
            where, "stacked_transformer_tpl must be a StackedTransformer or a Repeat, got ", stack->type_name());
  bare_blocks_ = set_stack_dims(*stack, hp.model_dims);
  stack_ = &create_child<RepeatableLayer>("transformer", stack);
  HParamsPtr ln = hp.final_ln_tpl ? hp.final_ln_tpl->clone() : nullptr;
  PAX_CHECK(ln, where, "final_ln_tpl must be set");
  if (auto* l = dynamic_cast<LayerNorm::HParams*>(ln.get())) {
    l->dim = hp.model_dims;
  } else if (auto* r = dynamic_cast<RmsNorm::HParams*>(ln.get())) {
    r->dim = hp.model_dims;
  } else {
    PAX_FAIL(where, "final_ln_tpl must be a LayerNorm or RmsNorm, got ", ln->type_name());
  }
  final_ln_ = &create_child("final_ln", ln);
}

Array TransformerLm::embed(const Array& ids) const {
  return embedding_ ? embedding_->emb_lookup(ids) : softmax_->emb_lookup(ids);
}

Array TransformerLm::fprop(const Array& ids, const Array& paddings, const Array& segment_ids,
                           const Array& segment_pos) const {
  PAX_CHECK(ids.ndim() == 2, "TransformerLm '", path(), "': ids must be (batch, length), got ", ids.aval().str());
  PAX_CHECK(paddings.shape() == ids.shape(), "TransformerLm '", path(), "': paddings ", paddings.aval().str(),
            " must match ids ", ids.aval().str());
  Array x = embed(ids);  // (B, T, D)
  if (position_emb_) {
    // Both position embeddings map positions (B or 1, T) to (B or 1, T, D).
    Array positions = segment_pos.defined() ? segment_pos : reshape(arange(ids.dim(1)), {1, ids.dim(1)});
    x = x + position_emb_->fprop(positions).astype(x.dtype());
  }
  Array mask = segment_ids.defined() ? segment_mask(segment_ids) : Array();  // (B, 1, T, T)
  if (bare_blocks_) {
    // What a StackedTransformer adds itself: padding and causal masks.
    Array own = combine_masks(padding_mask(paddings), causal_mask(ids.dim(1)));  // (B, 1, T, T)
    mask = mask.defined() ? combine_masks(own, mask) : own;
  }
  x = stack_->fprop(x, paddings.astype(x.dtype()), mask);
  return softmax_->get_logits(final_ln_->fprop(x));
}

Array TransformerLm::extend_step(const Array& ids, const Array& time_step) const {
  PAX_CHECK(ids.ndim() == 1, "TransformerLm '", path(), "': extend_step ids must be (batch,), got ", ids.aval().str());
  Array x = embed(ids);  // (B, D)
  if (position_emb_) {
    Array positions = reshape(time_step.astype(DType::i32), {1, 1});
    x = x + reshape(position_emb_->fprop(positions), {1, -1}).astype(x.dtype());
  }
  x = stack_->extend_step(x, time_step, Array());
  return softmax_->get_logits(final_ln_->fprop(x));
}

void TransformerLm::init_states(int64_t batch, int64_t max_length) const { stack_->init_states(batch, max_length); }

namespace {

// Transformer blocks in a stack: a StackedTransformer's layers, a Repeat's
// x_times copies of its body (which may itself be a stack or a Repeat).
int64_t count_blocks(const Layer& stack) {
  if (auto* s = dynamic_cast<const StackedTransformer*>(&stack)) return int64_t(s->x_layers().size());
  if (auto* r = dynamic_cast<const Repeat*>(&stack))
    return r->hparams<Repeat::HParams>().x_times * count_blocks(r->sub());
  return dynamic_cast<const Transformer*>(&stack) ? 1 : 0;
}

// The first Transformer block of a stack (nullptr when there is none).
const Transformer* first_block(const Layer& stack) {
  if (auto* t = dynamic_cast<const Transformer*>(&stack)) return t;
  if (auto* s = dynamic_cast<const StackedTransformer*>(&stack))
    return s->x_layers().empty() ? nullptr : s->x_layers()[0];
  if (auto* r = dynamic_cast<const Repeat*>(&stack)) return first_block(r->sub());
  return nullptr;
}

}  // namespace

int64_t TransformerLm::num_layers() const { return count_blocks(*stack_); }

int64_t TransformerLm::attention_dims() const {
  const Transformer* block = first_block(*stack_);
  if (!block) return hparams<HParams>().model_dims;
  const DotProductAttention& attention = block->self_attention();
  return attention.hparams<DotProductAttention::HParams>().num_heads * attention.dim_per_head();
}

PAX_REGISTER_LAYER(TransformerLm);

}  // namespace pax::nn

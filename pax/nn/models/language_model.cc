// LanguageModel: loss, metrics, decoding, FLOPs.
#include "pax/nn/models/language_model.h"

#include <limits>

#include "pax/api/transforms.h"
#include "pax/nn/losses.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

namespace {
const Array& need(const Tree& batch, const std::string& key, const char* what) {
  PAX_CHECK(batch.contains(key), "LanguageModel ", what, ": the batch has no '", key, "'; it has ", batch.str());
  return batch[key].leaf();
}
}  // namespace

void LanguageModel::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = std::string("LanguageModel '") + path() + "': ";
  PAX_CHECK(hp.temperature > 0, where, "temperature must be > 0, got ", hp.temperature);
  PAX_CHECK(hp.top_k >= 1, where, "top_k must be >= 1, got ", hp.top_k);
  PAX_CHECK(hp.max_decode_length >= 1, where, "max_decode_length must be >= 1, got ", hp.max_decode_length);
  lm_ = &create_child<TransformerLm>("lm", hp.lm_tpl);
}

Tree LanguageModel::compute_predictions(const Tree& batch) const {
  const Array& ids = need(batch, "ids", "compute_predictions");
  Array paddings = batch.contains("paddings") ? batch["paddings"].leaf() : zeros(ids.shape());
  Array segment_ids = batch.contains("segment_ids") ? batch["segment_ids"].leaf() : Array();
  Array segment_pos = batch.contains("segment_pos") ? batch["segment_pos"].leaf() : Array();
  return Tree::dict({{"logits", lm_->fprop(ids, paddings, segment_ids, segment_pos)}});
}

std::pair<Tree, Tree> LanguageModel::compute_loss(const Tree& predictions, const Tree& batch) const {
  const Array& fprop_logits = predictions["logits"].leaf();  // (B, T, V), in the fprop dtype
  Array logits = fprop_logits.dtype() == DType::f64 ? fprop_logits : fprop_logits.astype(DType::f32);
  const Array& labels = need(batch, "labels", "compute_loss");  // (B, T)
  PAX_CHECK(labels.shape().rank() == 2 && labels.dim(0) == logits.dim(0) && labels.dim(1) == logits.dim(1) &&
                is_integer(labels.dtype()),
            "LanguageModel: labels must be integers (batch, length) matching the logits ", logits.aval().str(),
            ", got ", labels.aval().str());
  Array weights;
  if (batch.contains("weights")) weights = batch["weights"].leaf().astype(logits.dtype());
  else if (batch.contains("paddings")) weights = 1.0 - batch["paddings"].leaf().astype(logits.dtype());
  else weights = ones(labels.shape(), logits.dtype());
  // In f32 either way; from the fprop logits the gradient stays in their dtype.
  Array xent = softmax_cross_entropy_with_integer_labels(fprop_logits, labels);  // (B, T)
  Tree metrics = cross_entropy_metrics(xent, logits, labels, weights, "fraction_of_correct_next_step_preds");
  Tree avg_xent = metrics["avg_xent"];
  metrics["log_pplx"] = avg_xent;
  if (summaries_enabled()) {                    // the spread of the loss over the batch's sequences
    const Array row_weight = sum(weights, -1);  // (B,)
    add_summary("sequence_xent",
                sum(stop_gradient(xent).astype(logits.dtype()) * weights, -1) / maximum(row_weight, 1.0),
                SummaryType::histogram);
  }
  return {metrics, Tree::dict({{"xent", xent}})};
}

Tree LanguageModel::decode(const Tree& batch) const {
  const auto& hp = hparams<HParams>();
  const Array& prefix = need(batch, "prefix", "decode");  // (B, P)
  PAX_CHECK(prefix.ndim() == 2 && is_integer(prefix.dtype()),
            "LanguageModel decode: prefix must be integer ids "
            "(batch, length), got ",
            prefix.aval().str());
  const int64_t b = prefix.dim(0), p = prefix.dim(1), length = hp.max_decode_length;
  PAX_CHECK(p >= 1 && p <= length, "LanguageModel decode: the prefix length ", p,
            " must be in [1, max_decode_length = ", length, "]");
  Array prefix_lengths = batch.contains("prefix_lengths") ? batch["prefix_lengths"].leaf().astype(DType::i32)
                                                          : full({b}, double(p), DType::i32);
  PAX_CHECK(prefix_lengths.shape() == Shape{b}, "LanguageModel decode: prefix_lengths must be (", b, ",), got ",
            prefix_lengths.aval().str());
  Array padded_prefix = pad(prefix.astype(DType::i32), {{0, 0}, {0, length - p}});  // (B, L)
  init_decode_states(batch);
  std::vector<Array> tokens;  // each (B,)
  Array token = slice_along(padded_prefix, 1, 0, 1).astype(DType::i32);
  token = reshape(token, {b});
  Array done = zeros({b}, DType::bool_);
  Array lengths = full({b}, double(length), DType::i32);
  tokens.push_back(token);
  for (int64_t t = 0; t + 1 < length; ++t) {
    Array logits = lm_->extend_step(token, scalar<int32_t>(int32_t(t))).astype(DType::f32);  // (B, V)
    Array next;
    if (hp.sampling == Sampling::greedy) {
      next = argmax(logits, -1);
    } else {
      Array scaled = logits / hp.temperature;
      if (hp.sampling == Sampling::top_k && hp.top_k < logits.dim(1)) {
        Array kth = min(lax::top_k(scaled, hp.top_k).first, -1, true);  // (B, 1)
        scaled = where(scaled < kth, -std::numeric_limits<double>::infinity(), scaled);
      }
      next = random::categorical(next_prng_key("decode"), scaled, -1);
    }
    next = next.astype(DType::i32);
    // Inside its prefix an example is fed its own next token.
    Array in_prefix = less(full({b}, double(t + 1), DType::i32), prefix_lengths);
    Array forced = reshape(slice_along(padded_prefix, 1, t + 1, t + 2), {b});
    next = where(in_prefix, forced, next);
    // After EOS, emit 0 (padding).
    next = where(done, zeros({b}, DType::i32), next);
    if (hp.eos_id >= 0) {
      Array hit = logical_and(logical_and(!done, !in_prefix), equal(next, int(hp.eos_id)));
      lengths = where(hit, full({b}, double(t + 2), DType::i32), lengths);
      done = logical_or(done, hit);
    }
    tokens.push_back(next);
    token = next;
  }
  return Tree::dict(
      {{"output_ids", stack(tokens, 1)}, {"decode_lengths", lengths}, {"prefix_lengths", prefix_lengths}});
}

void LanguageModel::init_decode_states(const Tree& batch) const {
  const Array& prefix = need(batch, "prefix", "decode");  // (B, P)
  PAX_CHECK(prefix.ndim() == 2, "LanguageModel decode: prefix must be (batch, length), got ", prefix.aval().str());
  lm_->init_states(prefix.dim(0), hparams<HParams>().max_decode_length);
}

double LanguageModel::flops_per_token(int64_t seq_length) const {
  const double n = double(count_parameters(*this));
  return 6.0 * n + 6.0 * double(lm_->num_layers()) * double(lm_->attention_dims()) * double(seq_length);
}

double LanguageModel::flops_per_example(const Tree& batch) const {
  const Array& ids = need(batch, "ids", "flops_per_example");
  return flops_per_token(ids.dim(-1)) * double(ids.dim(-1));
}

PAX_REGISTER_LAYER(LanguageModel);

}  // namespace pax::nn

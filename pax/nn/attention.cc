// Attention masks, projections and DotProductAttention.
#include "pax/nn/attention.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/ops/nn.h"
#include "pax/nn/tensor_parallel.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

namespace {

// Largest finite values of the floating dtypes.
double max_finite(DType dtype) {
  switch (dtype) {
    case DType::f64: return std::numeric_limits<double>::max();
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    default: return double(std::numeric_limits<float>::max());
  }
}

// Softmax in f32, or f64 for an f64 forward pass.
DType logits_dtype(DType fprop) { return fprop == DType::f64 ? DType::f64 : DType::f32; }

// softmax(logits) over the last axis, computed in the logits' dtype and
// returned in `dtype` (the dtype of the values it weighs). Its backward keeps
// only that result, as the matmul with the values reads it, and forms
// d logits = p (g - sum(g p)) in the logits' dtype in one pass (as
// jax.nn.softmax's rule keeps only its output). Masked logits have p = 0,
// so they get no gradient.
Array attention_probs(const Array& logits, DType dtype) {
  const auto f = custom_vjp([dtype](const Array& x) { return nn::softmax(x, -1).astype(dtype); },
                            [dtype](const Array& x) {
                              Array p = nn::softmax(x, -1).astype(dtype);
                              return std::make_pair(p, p);
                            },
                            [ld = logits.dtype()](const Array& probs, const Array& g) {
                              const Array p = probs.astype(ld), gp = g.astype(ld) * p;  // (B, N, T, S)
                              return gp - p * sum(gp, {-1}, true);
                            },
                            "attention_probs");
  return f(logits);
}

// A projection weight with explicit fan axes (the heads count as one fan).
WeightHParams projection_weight(Shape shape, Ints fan_in_axes, Ints fan_out_axes) {
  WeightHParams w;
  w.shape = std::move(shape);
  w.fan_in_axes = std::move(fan_in_axes);
  w.fan_out_axes = std::move(fan_out_axes);
  return w;
}

WeightHParams zero_bias(Shape shape) {
  WeightHParams b;
  b.shape = std::move(shape);
  b.init = WeightInit::constant(0.0);
  return b;
}

// `w` with its heads dimension split over mdl under tensor parallelism.
WeightHParams split_heads(WeightHParams w, int64_t heads_dim) {
  w.mdl_dim = heads_dim;
  return w;
}

// The heads one process computes: all of them, or its share under tp.
int64_t local_heads(int64_t heads, const TensorParallelOptions& tp) { return tp.enabled() ? heads / tp.size : heads; }

}  // namespace

// ---------------------------------------------------------------------------
// masks

double large_negative_number(DType dtype) { return -0.7 * max_finite(dtype); }

Array causal_mask(int64_t length, DType dtype) {
  PAX_CHECK(length >= 0, "causal_mask: length must be >= 0, got ", length);
  PAX_CHECK(is_floating(dtype), "causal_mask: dtype must be floating, got ", dtype_name(dtype));
  Array row = reshape(arange<int64_t>(length), {length, 1});
  Array col = reshape(arange<int64_t>(length), {1, length});
  Array mask = where(col > row, full({}, large_negative_number(dtype), dtype), zeros({}, dtype));  // (T, T)
  return reshape(mask, {1, 1, length, length});
}

Array padding_mask(const Array& paddings, DType dtype) {
  PAX_CHECK(paddings.defined() && paddings.ndim() == 2, "padding_mask: paddings ",
            paddings.defined() ? paddings.aval().str() : "(none)", " must be (batch, length)");
  PAX_CHECK(is_floating(dtype), "padding_mask: dtype must be floating, got ", dtype_name(dtype));
  Array mask = paddings.astype(dtype) * large_negative_number(dtype);
  return expand_dims(mask, {1, 2});
}

Array combine_masks(const Array& a, const Array& b) {
  PAX_CHECK(a.defined() && b.defined(), "combine_masks: both masks must be given");
  return minimum(a, b);
}

Array causal_step_mask(const Array& time_step, int64_t length, DType dtype) {
  PAX_CHECK(time_step.defined() && time_step.ndim() == 0 && is_integer(time_step.dtype()),
            "causal_step_mask: time_step must be an integer scalar, got ",
            time_step.defined() ? time_step.aval().str() : "(none)");
  PAX_CHECK(length > 0, "causal_step_mask: length must be > 0, got ", length);
  Array later = arange<int64_t>(length) > time_step.astype(DType::i32);
  return reshape(where(later, full({}, large_negative_number(dtype), dtype), zeros({}, dtype)), {1, 1, length});
}

// ---------------------------------------------------------------------------
// projections

void AttentionProjection::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.input_dim > 0 && hp.num_heads > 0 && hp.dim_per_head > 0, "AttentionProjection '", path(),
            "': input_dim, num_heads and dim_per_head must be > 0, got ", hp.input_dim, ", ", hp.num_heads, " and ",
            hp.dim_per_head);
  // The heads split over mdl under tensor parallelism.
  if (hp.is_output_projection) {
    create_variable("w",
                    split_heads(projection_weight(Shape{hp.num_heads, hp.dim_per_head, hp.input_dim}, {0, 1}, {2}), 0));
    if (hp.use_bias) create_variable("b", zero_bias(Shape{hp.input_dim}));
  } else {
    create_variable("w",
                    split_heads(projection_weight(Shape{hp.input_dim, hp.num_heads, hp.dim_per_head}, {0}, {1, 2}), 1));
    if (hp.use_bias) create_variable("b", split_heads(zero_bias(Shape{hp.num_heads, hp.dim_per_head}), 0));
  }
}

Array AttentionProjection::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  if (!hp.is_output_projection) return project_entered(enter_split(to_fprop_dtype(x), tensor_parallel()));
  const TensorParallelOptions& tp = tensor_parallel();
  const int64_t heads = local_heads(hp.num_heads, tp);
  PAX_CHECK(x.ndim() >= 2 && x.dim(-2) == heads && x.dim(-1) == hp.dim_per_head, "AttentionProjection '", path(),
            "': input ", x.aval().str(), " must end in (num_heads, dim_per_head) = (", heads, ", ", hp.dim_per_head,
            ")", tp.enabled() ? " (this process's heads of those split over mdl)" : "");
  const Array y = leave_split(einsum("...NH,NHD->...D", to_fprop_dtype(x), theta("w")), tp);  // (..., D)
  return hp.use_bias ? y + theta("b") : y;
}

Array AttentionProjection::project_entered(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(!hp.is_output_projection, "AttentionProjection '", path(), "': project_entered is for input projections");
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.input_dim, "AttentionProjection '", path(), "': input ", x.aval().str(),
            " must end in input_dim = ", hp.input_dim);
  const Array y = einsum("...D,DNH->...NH", to_fprop_dtype(x), theta("w"));  // (..., N / mdl, H)
  return hp.use_bias ? y + theta("b") : y;
}

void CombinedQKVProjectionLayer::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.input_dim > 0 && hp.num_heads > 0 && hp.dim_per_head > 0, "CombinedQKVProjectionLayer '", path(),
            "': input_dim, num_heads and dim_per_head must be > 0, got ", hp.input_dim, ", ", hp.num_heads, " and ",
            hp.dim_per_head);
  // Fans as for one of the three projections: D in, N * H out.
  create_variable(
      "w", split_heads(projection_weight(Shape{hp.input_dim, 3, hp.num_heads, hp.dim_per_head}, {0}, {2, 3}), 2));
  if (hp.use_bias) {
    create_variable("b", split_heads(zero_bias(Shape{3, hp.num_heads, hp.dim_per_head}), 1));
  }
}

std::tuple<Array, Array, Array> CombinedQKVProjectionLayer::project(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.input_dim, "CombinedQKVProjectionLayer '", path(), "': input ",
            x.aval().str(), " must end in input_dim = ", hp.input_dim);
  // Three products with slices of the weight rather than one product sliced
  // afterwards: the slices (and their gradients, pads) are then of the
  // (D, 3, N, H) weight, not of the (..., 3, N, H) activations.
  const Array xf = enter_split(to_fprop_dtype(x), tensor_parallel());
  const Array w = theta("w");  // (D, 3, N / mdl, H)
  auto part = [&](int64_t i) {
    Array y = einsum("...D,DNH->...NH", xf, squeeze(slice_along(w, 1, i, i + 1), 1));  // (..., N, H)
    return hp.use_bias ? y + squeeze(slice_along(theta("b"), 0, i, i + 1), 0) : y;
  };
  return {part(0), part(1), part(2)};
}

// ---------------------------------------------------------------------------
// DotProductAttention

void DotProductAttention::setup() {
  const auto& hp = hparams<HParams>();
  const std::string who = "DotProductAttention '" + path() + "': ";
  PAX_CHECK(hp.input_dim > 0, who, "input_dim must be > 0, got ", hp.input_dim);
  PAX_CHECK(hp.num_heads > 0, who, "num_heads must be > 0, got ", hp.num_heads);
  if (hp.dim_per_head > 0) {
    dim_per_head_ = hp.dim_per_head;
  } else {
    PAX_CHECK(hp.hidden_dim > 0 && hp.hidden_dim % hp.num_heads == 0, who, "num_heads = ", hp.num_heads,
              " must divide hidden_dim = ", hp.hidden_dim, " (or set dim_per_head)");
    dim_per_head_ = hp.hidden_dim / hp.num_heads;
  }
  num_kv_heads_ = hp.num_kv_heads > 0 ? hp.num_kv_heads : hp.num_heads;
  PAX_CHECK(hp.num_kv_heads >= 0 && hp.num_heads % num_kv_heads_ == 0, who, "num_kv_heads = ", hp.num_kv_heads,
            " must divide num_heads = ", hp.num_heads);
  PAX_CHECK(!hp.combine_qkv || num_kv_heads_ == hp.num_heads, who, "combine_qkv needs num_kv_heads == num_heads, got ",
            num_kv_heads_, " and ", hp.num_heads);
  PAX_CHECK(hp.atten_dropout_prob >= 0 && hp.atten_dropout_prob < 1, who, "atten_dropout_prob must be in [0, 1), got ",
            hp.atten_dropout_prob);
  PAX_CHECK(hp.atten_logit_cap >= 0, who, "atten_logit_cap must be >= 0, got ", hp.atten_logit_cap);

  auto projection = [&](const char* name, int64_t heads, bool output) {
    auto p = clone_template<AttentionProjection::HParams>(hp.proj_tpl, "proj_tpl", who);
    p->input_dim = hp.input_dim;
    p->num_heads = heads;
    p->dim_per_head = dim_per_head_;
    p->use_bias = hp.use_bias;
    p->is_output_projection = output;
    return &create_child<AttentionProjection>(name, p);
  };
  if (hp.combine_qkv) {
    auto p =
        clone_template<CombinedQKVProjectionLayer::HParams>(hp.combined_qkv_proj_tpl, "combined_qkv_proj_tpl", who);
    p->input_dim = hp.input_dim;
    p->num_heads = hp.num_heads;
    p->dim_per_head = dim_per_head_;
    p->use_bias = hp.use_bias;
    combined_qkv_ = &create_child<CombinedQKVProjectionLayer>("combined_qkv", p);
  } else {
    query_ = projection("query", hp.num_heads, false);
    key_ = projection("key", num_kv_heads_, false);
    value_ = projection("value", num_kv_heads_, false);
  }
  post_ = projection("post", hp.num_heads, true);

  auto dropout = clone_template<Dropout::HParams>(hp.dropout_tpl, "dropout_tpl", who);
  dropout->keep_prob = 1.0 - hp.atten_dropout_prob;
  atten_dropout_ = &create_child<Dropout>("atten_dropout", dropout);

  if (hp.use_rotary_position_emb) {
    auto rotary =
        clone_template<RotaryPositionalEmbedding::HParams>(hp.rotary_position_emb_tpl, "rotary_position_emb_tpl", who);
    rotary->embedding_dims = dim_per_head_;
    rotary_ = &create_child<RotaryPositionalEmbedding>("rotary_position_emb", rotary);
  }
}

void DotProductAttention::check_mask(const Array& mask, int64_t batch, int64_t time, int64_t source,
                                     const char* what) const {
  const auto& hp = hparams<HParams>();
  auto fits = [](int64_t d, int64_t full) { return d == 1 || d == full; };
  PAX_CHECK(mask.ndim() == 4 && fits(mask.dim(0), batch) && fits(mask.dim(1), hp.num_heads) &&
                fits(mask.dim(2), time) && mask.dim(3) == source && is_floating(mask.dtype()),
            "DotProductAttention '", path(), "': ", what, " atten_mask ", mask.aval().str(), " must be a float (",
            batch, " or 1, ", hp.num_heads, " or 1, ", time, " or 1, ", source, ") array");
}

// The mean entropy (nats) of attention distributions p (B, N, T, S): 0
// where each query attends to one key, log S where uniform over S keys.
Array DotProductAttention::mean_entropy(const Array& probs) const {
  const Array p = stop_gradient(probs).astype(DType::f32);
  const Array plogp = where(p > 0.0, p * log(maximum(p, 1e-30)), zeros_like(p));
  return across_heads(-mean(sum(plogp, -1)));
}

// Under tp each process has its heads: the mean over all of them.
Array DotProductAttention::across_heads(const Array& mean_of_mine) const {
  const TensorParallelOptions& tp = tensor_parallel();
  return tp.enabled() ? lax::pmean(mean_of_mine, tp.axis) : mean_of_mine;
}

// The mean entropy of the attention distributions without their [T, S]
// matrix: per row, H = lse - E_p[x], and E_p[x] = scale q . E_p[k] is the
// attention of the same queries over the keys as values. A row with every
// key masked is uniform: log S. Cut from differentiation, as a summary.
// With a logit cap E_p[x] is no such attention, and the summary comes from
// the probabilities.
Array DotProductAttention::attention_entropy(const Array& q, const Array& k, const lax::AttentionOptions& o,
                                             const Array& atten_mask) const {
  const Array qs = stop_gradient(q).astype(DType::f32), ks = stop_gradient(k).astype(DType::f32);
  if (o.logit_cap > 0) return mean_entropy(probabilities(qs, ks, atten_mask, DType::f32));
  const auto [mean_key, lse] = lax::dot_product_attention(qs, ks, ks, o);               // (B, T, N, H), (B, N, T)
  const Array expected = sum(qs * mean_key, -1) * (1.0 / std::sqrt(double(q.dim(3))));  // (B, T, N)
  const Array row_lse = lax::transpose(lse, {0, 2, 1});                                 // (B, T, N)
  const double uniform = std::log(double(k.dim(1)));
  const Array fully_masked = row_lse < 0.5 * large_negative_number(DType::f32);
  return across_heads(mean(where(fully_masked, full({}, uniform, DType::f32), row_lse - expected)));
}

// Mask selection as praxis: a predicate of attended keys (undefined: all),
// this process's heads of a per-head mask under tp.
Array DotProductAttention::allowed_keys(const Array& atten_mask) const {
  if (!atten_mask.defined()) return Array();
  const TensorParallelOptions& tp = tensor_parallel();
  Array mask = atten_mask;
  if (tp.enabled() && mask.dim(1) == hparams<HParams>().num_heads) mask = part_of(mask, 1, tp);
  // Half the large negative number of the mask's dtype, or of f32 for an
  // f64 mask, which may hold the f32 value of the mask helpers.
  const DType md = mask.dtype() == DType::f64 ? DType::f32 : mask.dtype();
  return mask >= large_negative_number(md) * 0.5;
}

// softmax(cap(q k^T / sqrt(H)) + mask) (B, N, T, S) in `dtype`.
Array DotProductAttention::probabilities(const Array& q, const Array& k, const Array& atten_mask, DType dtype) const {
  const auto& hp = hparams<HParams>();
  const int64_t batch = q.dim(0), time = q.dim(1), heads = q.dim(2), source = k.dim(1);
  const int64_t kv_heads = k.dim(2), group = heads / kv_heads, h = q.dim(3);
  const DType ld = logits_dtype(q.dtype());
  Array scaled = q * (1.0 / std::sqrt(double(h)));  // (B, T, N, H)
  Array logits;                                     // (B, N, T, S)
  if (group == 1) {
    logits = einsum("BTNH,BSNH->BNTS", scaled, k);
  } else {
    Array grouped = reshape(scaled, {batch, time, kv_heads, group, h});  // (B, T, K, G, H)
    logits = reshape(einsum("BTKGH,BSKH->BKGTS", grouped, k), {batch, heads, time, source});
  }
  // As praxis: the logits come out of the einsum and the cap in the fprop
  // dtype (so that their backward is a matmul in that dtype too), the softmax
  // runs in f32, and the mask selects (py_utils.apply_mask_to_logits): its
  // backward needs only the predicate, not the logits.
  if (hp.atten_logit_cap > 0) logits = tanh(logits / hp.atten_logit_cap) * hp.atten_logit_cap;
  logits = logits.astype(ld);
  if (atten_mask.defined()) logits = where(allowed_keys(atten_mask), logits, full({}, large_negative_number(ld), ld));
  return attention_probs(logits, dtype);
}

Array DotProductAttention::dot_atten(const Array& q, const Array& k, const Array& v, const Array& atten_mask) const {
  const auto& hp = hparams<HParams>();
  const int64_t batch = q.dim(0), time = q.dim(1), heads = q.dim(2), source = k.dim(1);
  const int64_t kv_heads = k.dim(2), group = heads / kv_heads, h = q.dim(3);
  // One primitive (no [T, S] matrix kept for the backward) where nothing
  // needs the probabilities themselves: no dropout on them, and logits in f32
  // (praxis's masked logit is then the kernels' own; its logit cap is the
  // primitive's, computed in f32).
  if (hp.atten_dropout_prob == 0 && logits_dtype(q.dtype()) == DType::f32) {
    lax::AttentionOptions o;
    o.mask = allowed_keys(atten_mask);
    o.logit_cap = hp.atten_logit_cap;
    if (summaries_enabled()) add_summary("attention_entropy", attention_entropy(q, k, o, atten_mask));
    return lax::dot_product_attention(q, k, v.astype(q.dtype()), o).first;  // (B, T, N, H)
  }
  Array probs = probabilities(q, k, atten_mask, v.dtype());  // (B, N, T, S)
  if (summaries_enabled()) add_summary("attention_entropy", mean_entropy(probs));
  probs = atten_dropout_->fprop_split(probs);  // this process's heads under tp
  if (group == 1) return einsum("BNTS,BSNH->BTNH", probs, v);
  Array grouped = reshape(probs, {batch, kv_heads, group, time, source});  // (B, K, G, T, S)
  return reshape(einsum("BKGTS,BSKH->BTKGH", grouped, v), {batch, time, heads, h});
}

std::tuple<Array, Array, Array> DotProductAttention::project_qkv(const Array& query_vec, const Array& key_vec,
                                                                 const Array& value_vec) const {
  if (!combined_qkv_) {
    // One enter_split per distinct input (self-attention: one for all three).
    const TensorParallelOptions& tp = tensor_parallel();
    // In fprop_dtype: the backward psum then moves bf16 under bf16 training.
    const Array q_in = enter_split(to_fprop_dtype(query_vec), tp);
    const Array k_in = key_vec.id() == query_vec.id() ? q_in : enter_split(to_fprop_dtype(key_vec), tp);
    const Array v_in = value_vec.id() == query_vec.id() ? q_in
                       : value_vec.id() == key_vec.id() ? k_in
                                                        : enter_split(to_fprop_dtype(value_vec), tp);
    return {query_->project_entered(q_in), key_->project_entered(k_in), value_->project_entered(v_in)};
  }
  PAX_CHECK(query_vec.id() == key_vec.id() && query_vec.id() == value_vec.id(), "DotProductAttention '", path(),
            "': combine_qkv projects query_vec only; pass the same array as key_vec and value_vec "
            "(self-attention)");
  return combined_qkv_->project(query_vec);
}

Array DotProductAttention::fprop(const Array& query_vec, const Array& key_vec, const Array& value_vec,
                                 const Array& atten_mask, const Array& query_positions,
                                 const Array& key_positions) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(query_vec.ndim() == 3 && query_vec.dim(2) == hp.input_dim, "DotProductAttention '", path(), "': query_vec ",
            query_vec.aval().str(), " must be (batch, time, ", hp.input_dim, ")");
  const int64_t batch = query_vec.dim(0), time = query_vec.dim(1);
  for (const Array* kv : {&key_vec, &value_vec}) {
    PAX_CHECK(kv->ndim() == 3 && kv->dim(0) == batch && kv->dim(2) == hp.input_dim, "DotProductAttention '", path(),
              "': ", kv == &key_vec ? "key_vec " : "value_vec ", kv->aval().str(), " must be (", batch,
              ", source length, ", hp.input_dim, ") for query_vec ", query_vec.aval().str());
  }
  PAX_CHECK(key_vec.dim(1) == value_vec.dim(1), "DotProductAttention '", path(), "': key_vec ", key_vec.aval().str(),
            " and value_vec ", value_vec.aval().str(), " differ in length");
  const int64_t source = key_vec.dim(1);
  if (atten_mask.defined()) check_mask(atten_mask, batch, time, source, "fprop");

  auto [q, k, v] = project_qkv(query_vec, key_vec, value_vec);  // (B, T, N, H), (B, S, K, H), (B, S, K, H)
  if (rotary_) {
    q = rotary_->fprop(q, query_positions);
    k = rotary_->fprop(k, key_positions);
  }
  return post_->fprop(dot_atten(q, k, v, atten_mask));
}

Array DotProductAttention::fprop(const Array& x, const Array& atten_mask) const { return fprop(x, x, x, atten_mask); }

std::optional<Array> DotProductAttention::find_cache(const std::string& name) const {
  if (!has_variable(kDecoderCache, name)) return std::nullopt;
  return variable(kDecoderCache, name);
}

int64_t DotProductAttention::decode_cache_length() const {
  std::optional<Array> state = find_cache("key_state");
  return state ? state->dim(1) : 0;
}

void DotProductAttention::init_states(int64_t batch, int64_t max_length) const {
  check_not_split("init_states");
  PAX_CHECK(batch > 0 && max_length > 0, "DotProductAttention '", path(),
            "': init_states needs batch > 0 and max_length > 0, got ", batch, " and ", max_length);
  const Shape shape{batch, max_length, num_kv_heads_, dim_per_head_};  // (B, S, K, H)
  const DType dtype = base_hparams().fprop_dtype;
  update_variable(kDecoderCache, "key_state", zeros(shape, dtype));
  update_variable(kDecoderCache, "value_state", zeros(shape, dtype));
}

Array DotProductAttention::update_cache(const std::string& name, const Array& value, const Array& time_step,
                                        int64_t length) const {
  const int64_t batch = value.dim(0);
  const Shape want{batch, length, num_kv_heads_, dim_per_head_};  // (B, S, K, H)
  std::optional<Array> state = find_cache(name);
  if (!state) {
    PAX_CHECK(is_mutable(kDecoderCache), "DotProductAttention '", path(), "': extend_step found no ", kDecoderCache,
              "/", name, "; call init_states first or pass mutable_collections = {\"", kDecoderCache,
              "\"} so that the first step creates it");
    state = zeros(want, base_hparams().fprop_dtype);
  }
  PAX_CHECK(state->shape() == want, "DotProductAttention '", path(), "': ", kDecoderCache, "/", name, " ",
            state->aval().str(), " does not match the step: want ", want, " (batch, mask length, kv heads, dims)");
  const Array zero = scalar<int32_t>(0);
  Array updated = lax::dynamic_update_slice(*state, expand_dims(value, {1}).astype(state->dtype()),
                                            {zero, time_step.astype(DType::i32), zero, zero});
  update_variable(kDecoderCache, name, updated);
  return updated;
}

void DotProductAttention::check_not_split(const char* what) const {
  PAX_CHECK(!tensor_parallel().enabled(), "DotProductAttention '", path(), "': ", what,
            " decodes with whole weights; apply it without tensor parallelism (gather the blocks split over '",
            tensor_parallel().axis, "' first)");
}

Array DotProductAttention::extend_step(const Array& query_vec, const Array& atten_mask, const Array& time_step) const {
  const auto& hp = hparams<HParams>();
  check_not_split("extend_step");
  PAX_CHECK(query_vec.ndim() == 2 && query_vec.dim(1) == hp.input_dim, "DotProductAttention '", path(),
            "': extend_step query_vec ", query_vec.aval().str(), " must be (batch, ", hp.input_dim, ")");
  const int64_t batch = query_vec.dim(0);
  PAX_CHECK(atten_mask.defined() && atten_mask.ndim() == 3, "DotProductAttention '", path(),
            "': extend_step atten_mask ", atten_mask.defined() ? atten_mask.aval().str() : "(none)",
            " must be (batch or 1, num_heads or 1, cache length)");
  const int64_t length = atten_mask.dim(2);
  Array mask = expand_dims(atten_mask, {2});  // (B or 1, N or 1, 1, S)
  check_mask(mask, batch, 1, length, "extend_step");
  PAX_CHECK(time_step.defined() && time_step.ndim() == 0 && is_integer(time_step.dtype()), "DotProductAttention '",
            path(), "': time_step must be an integer scalar, got ",
            time_step.defined() ? time_step.aval().str() : "(none)");
  if (time_step.is_concrete()) {
    const int64_t t = time_step.item<int64_t>();
    PAX_CHECK(t >= 0 && t < length, "DotProductAttention '", path(), "': time_step ", t,
              " is outside the cache of length ", length);
  }

  auto [q, k, v] = project_qkv(query_vec, query_vec, query_vec);  // (B, N, H), (B, K, H), (B, K, H)
  if (rotary_) {
    q = rotary_->extend_step(q, time_step);
    k = rotary_->extend_step(k, time_step);
  }
  Array key_state = update_cache("key_state", k, time_step, length);             // (B, S, K, H)
  Array value_state = update_cache("value_state", v, time_step, length);         // (B, S, K, H)
  Array encoded = dot_atten(expand_dims(q, {1}), key_state, value_state, mask);  // (B, 1, N, H)
  return post_->fprop(squeeze(encoded, 1));
}

PAX_REGISTER_LAYER(AttentionProjection);
PAX_REGISTER_LAYER(CombinedQKVProjectionLayer);
PAX_REGISTER_LAYER(DotProductAttention);

}  // namespace pax::nn

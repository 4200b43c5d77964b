// TransformerFeedForward, Transformer, StackedTransformer, Repeat.
#include "pax/nn/transformers.h"

#include <algorithm>

#include "pax/api/transforms.h"
#include "pax/api/control_flow.h"
#include "pax/nn/fsdp.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

namespace {

std::string who(const Layer& l) { return std::string(l.type_name()) + " '" + l.path() + "': "; }

void check_norm_policy(const std::string& policy, const std::string& where) {
  PAX_CHECK(policy == "pre" || policy == "post", where, "norm_policy must be \"pre\" or \"post\", got \"", policy,
            "\"");
}

// A copy of a LayerNorm / RmsNorm template with its depth set.
HParamsPtr norm_params(const HParamsPtr& tpl, int64_t dim, const std::string& where) {
  PAX_CHECK(tpl, where, "ln_tpl is None");
  HParamsPtr p = tpl->clone();
  if (auto* ln = dynamic_cast<LayerNorm::HParams*>(p.get())) {
    ln->dim = dim;
  } else if (auto* rms = dynamic_cast<RmsNorm::HParams*>(p.get())) {
    rms->dim = dim;
  } else {
    PAX_FAIL(where, "ln_tpl must be a LayerNorm or RmsNorm, got ", tpl->type_name());
  }
  return p;
}

// A copy of a Dropout template dropping with probability `prob`.
HParamsPtr dropout_params(const HParamsPtr& tpl, double prob, const char* field, const std::string& where) {
  PAX_CHECK(prob >= 0 && prob < 1, where, field, " must be in [0, 1), got ", prob);
  auto p = clone_template<Dropout::HParams>(tpl, "dropout_tpl", where);
  p->keep_prob = 1.0 - prob;
  return p;
}

// The default decoding mask: causal over the cache of the first attention.
Array default_step_mask(const Array& time_step, const DotProductAttention& attention, const std::string& where) {
  const int64_t length = attention.decode_cache_length();
  PAX_CHECK(length > 0, where,
            "extend_step without atten_mask needs the decoder cache to exist: call init_states "
            "first or pass atten_mask (batch or 1, heads or 1, cache length)");
  return causal_step_mask(time_step, length);
}

}  // namespace

// ---------------------------------------------------------------------------
// TransformerFeedForward

void TransformerFeedForward::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = who(*this);
  PAX_CHECK(hp.input_dims > 0 && hp.hidden_dims > 0 && hp.output_dims >= 0, where,
            "input_dims and hidden_dims must be > 0 (output_dims >= 0), got ", hp.input_dims, ", ", hp.hidden_dims,
            " and ", hp.output_dims);
  const int64_t output_dims = hp.output_dims > 0 ? hp.output_dims : hp.input_dims;
  PAX_CHECK(!hp.add_skip_connection || output_dims == hp.input_dims, where,
            "add_skip_connection needs output_dims == input_dims, got ", output_dims, " and ", hp.input_dims);
  check_norm_policy(hp.norm_policy, where);
  norm_ = &create_child("layer_norm", norm_params(hp.ln_tpl, hp.input_dims, where));
  // Under tensor parallelism the hidden width splits over mdl: ffn1 by columns, ffn2 by rows.
  auto ffn = [&](const char* name, int64_t in, int64_t out, const HParamsPtr& activation, MdlSplit split) {
    auto p = clone_template<FeedForward::HParams>(hp.fflayer_tpl, "fflayer_tpl", where);
    p->input_dims = in;
    p->output_dims = out;
    p->has_bias = hp.has_bias;
    p->activation_tpl = activation;
    p->mdl_split = split;
    return &create_child<FeedForward>(name, p);
  };
  ffn1_ = ffn("ffn_layer1", hp.input_dims, hp.hidden_dims, hp.activation_tpl, MdlSplit::output);
  relu_dropout_ = &create_child<Dropout>(
      "relu_dropout", dropout_params(hp.dropout_tpl, hp.relu_dropout_prob, "relu_dropout_prob", where));
  ffn2_ = ffn("ffn_layer2", hp.hidden_dims, output_dims, tpl<Identity>(), MdlSplit::input);
  residual_dropout_ = &create_child<Dropout>(
      "residual_dropout", dropout_params(hp.dropout_tpl, hp.residual_dropout_prob, "residual_dropout_prob", where));
}

Array TransformerFeedForward::fprop(const Array& inputs, const Array& paddings) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() >= 1 && inputs.dim(-1) == hp.input_dims, who(*this), "inputs ", inputs.aval().str(),
            " must end in input_dims = ", hp.input_dims);
  Array x = to_fprop_dtype(inputs);
  Array keep;  // (B, T, 1): 0 at padded positions
  if (paddings.defined()) {
    PAX_CHECK(inputs.ndim() == 3 && paddings.shape() == Shape({inputs.dim(0), inputs.dim(1)}), who(*this), "paddings ",
              paddings.aval().str(), " must be (batch, time) of inputs ", inputs.aval().str());
    keep = to_fprop_dtype(1.0 - expand_dims(paddings.astype(DType::f32), {2}));
    if (hp.apply_padding_first) x = x * keep;
  }
  const Array residual = x;
  if (hp.norm_policy == "pre") x = norm_->fprop(x);
  Array h = ffn1_->fprop(x);  // (..., hidden_dims)
  if (keep.defined() && !hp.apply_padding_first) h = h * keep;
  h = ffn2_->fprop(relu_dropout_->fprop_split(h));  // this process's hidden width under tp
  if (keep.defined() && !hp.apply_padding_first) h = h * keep;
  if (hp.norm_policy == "post") h = norm_->fprop(h);
  h = residual_dropout_->fprop(h);
  if (!hp.add_skip_connection) return h;
  return residual + (hp.residual_weight == 1.0 ? h : h * hp.residual_weight);
}

// ---------------------------------------------------------------------------
// Transformer

void Transformer::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = who(*this);
  PAX_CHECK(hp.input_dims > 0 && hp.hidden_dims > 0 && hp.num_heads > 0, where,
            "input_dims, hidden_dims and num_heads must be > 0, got ", hp.input_dims, ", ", hp.hidden_dims, " and ",
            hp.num_heads);
  check_norm_policy(hp.norm_policy, where);
  norm_ = &create_child("layer_norm", norm_params(hp.ln_tpl, hp.input_dims, where));

  auto atten = clone_template<DotProductAttention::HParams>(hp.tr_atten_tpl, "tr_atten_tpl", where);
  atten->input_dim = hp.input_dims;
  atten->hidden_dim = hp.input_dims;
  atten->num_heads = hp.num_heads;
  atten->dim_per_head = hp.dim_per_head;
  atten->num_kv_heads = hp.num_kv_heads;
  atten->atten_dropout_prob = hp.atten_dropout_prob;
  self_attention_ = &create_child<DotProductAttention>("self_attention", atten);

  residual_dropout_ = &create_child<Dropout>(
      "residual_dropout", dropout_params(hp.dropout_tpl, hp.residual_dropout_prob, "residual_dropout_prob", where));

  auto ff = clone_template<TransformerFeedForward::HParams>(hp.tr_fflayer_tpl, "tr_fflayer_tpl", where);
  ff->input_dims = hp.input_dims;
  ff->hidden_dims = hp.hidden_dims;
  ff->relu_dropout_prob = hp.relu_dropout_prob;
  ff->residual_dropout_prob = hp.residual_dropout_prob;
  ff->norm_policy = hp.norm_policy;
  ff_layer_ = &create_child<TransformerFeedForward>("ff_layer", ff);
}

Array Transformer::fprop(const Array& inputs, const Array& paddings, const Array& atten_mask) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() == 3 && inputs.dim(2) == hp.input_dims, who(*this), "inputs ", inputs.aval().str(),
            " must be (batch, time, ", hp.input_dims, ")");
  Array mask = atten_mask;
  if (!mask.defined() && paddings.defined()) {
    PAX_CHECK(paddings.shape() == Shape({inputs.dim(0), inputs.dim(1)}), who(*this), "paddings ", paddings.aval().str(),
              " must be (batch, time) of inputs ", inputs.aval().str());
    mask = padding_mask(paddings);
  }
  Array x = to_fprop_dtype(inputs);
  Array normed = hp.norm_policy == "pre" ? norm_->fprop(x) : x;
  Array atten = self_attention_->fprop(normed, mask);  // (B, T, D)
  if (hp.norm_policy == "post") atten = norm_->fprop(atten);
  Array out = ff_layer_->fprop(residual_dropout_->fprop(atten) + x, paddings);  // (B, T, D)
  // The root mean square of the layer's output: activations growing or dying layer by layer.
  if (summaries_enabled()) add_summary("output_rms", sqrt(mean(square(stop_gradient(out).astype(DType::f32)))));
  return out;
}

Array Transformer::extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() == 2 && inputs.dim(1) == hp.input_dims, who(*this), "extend_step inputs ",
            inputs.aval().str(), " must be (batch, ", hp.input_dims, ")");
  Array mask = atten_mask.defined() ? atten_mask : default_step_mask(time_step, *self_attention_, who(*this));
  Array x = to_fprop_dtype(inputs);
  Array normed = hp.norm_policy == "pre" ? norm_->fprop(x) : x;
  Array atten = self_attention_->extend_step(normed, mask, time_step);  // (B, D)
  if (hp.norm_policy == "post") atten = norm_->fprop(atten);
  return ff_layer_->extend_step(residual_dropout_->fprop(atten) + x);
}

void Transformer::init_states(int64_t batch, int64_t max_length) const {
  self_attention_->init_states(batch, max_length);
}

// ---------------------------------------------------------------------------
// StackedTransformer

void StackedTransformer::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = who(*this);
  PAX_CHECK(hp.num_layers > 0 && hp.model_dims > 0 && hp.hidden_dims > 0 && hp.num_heads > 0, where,
            "num_layers, model_dims, hidden_dims and num_heads must be > 0, got ", hp.num_layers, ", ", hp.model_dims,
            ", ", hp.hidden_dims, " and ", hp.num_heads);
  input_dropout_ = &create_child<Dropout>(
      "input_dropout", dropout_params(hp.dropout_tpl, hp.input_dropout_prob, "input_dropout_prob", where));
  std::vector<HParamsPtr> tpls;
  for (int64_t i = 0; i < hp.num_layers; ++i) {
    auto p =
        clone_template<Transformer::HParams>(hp.transformer_layer_params_tpl, "transformer_layer_params_tpl", where);
    p->input_dims = hp.model_dims;
    p->hidden_dims = hp.hidden_dims;
    p->num_heads = hp.num_heads;
    p->dim_per_head = hp.dim_per_head;
    p->atten_dropout_prob = hp.atten_dropout_prob.value_or(hp.dropout_prob);
    p->residual_dropout_prob = hp.residual_dropout_prob.value_or(hp.dropout_prob);
    p->relu_dropout_prob = hp.relu_dropout_prob.value_or(hp.dropout_prob);
    tpls.push_back(p);
  }
  for (const Layer* l : create_children("x_layers", tpls)) {
    auto* t = dynamic_cast<const Transformer*>(l);
    PAX_CHECK(t, where, "transformer_layer_params_tpl built a ", l->type_name(), ", not a Transformer");
    x_layers_.push_back(t);
  }
}

Array StackedTransformer::fprop(const Array& inputs, const Array& paddings, const Array& atten_mask) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() == 3 && inputs.dim(2) == hp.model_dims, who(*this), "inputs ", inputs.aval().str(),
            " must be (batch, time, ", hp.model_dims, ")");
  const int64_t batch = inputs.dim(0), time = inputs.dim(1);
  Array mask;  // (B or 1, 1, T or 1, T)
  if (paddings.defined()) {
    PAX_CHECK(paddings.shape() == Shape({batch, time}), who(*this), "paddings ", paddings.aval().str(),
              " must be (batch, time) of inputs ", inputs.aval().str());
    mask = padding_mask(paddings);
  }
  if (hp.mask_self_attention) mask = mask.defined() ? combine_masks(mask, causal_mask(time)) : causal_mask(time);
  if (atten_mask.defined()) mask = mask.defined() ? combine_masks(mask, atten_mask) : atten_mask;
  Array x = input_dropout_->fprop(to_fprop_dtype(inputs));
  for (const Transformer* layer : x_layers_) x = layer->fprop(x, paddings, mask);
  return x;
}

Array StackedTransformer::extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() == 2 && inputs.dim(1) == hp.model_dims, who(*this), "extend_step inputs ",
            inputs.aval().str(), " must be (batch, ", hp.model_dims, ")");
  Array mask = atten_mask.defined() ? atten_mask
                                    : default_step_mask(time_step, x_layers_[0]->self_attention(), who(*this));
  Array x = input_dropout_->fprop(to_fprop_dtype(inputs));
  for (const Transformer* layer : x_layers_) x = layer->extend_step(x, time_step, mask);
  return x;
}

void StackedTransformer::init_states(int64_t batch, int64_t max_length) const {
  for (const Transformer* layer : x_layers_) layer->init_states(batch, max_length);
}

// ---------------------------------------------------------------------------
// RepeatedVariables

namespace {

using VariableFn =
    std::function<void(const std::string& collection, const std::string& path, const std::string& name, const Array&)>;

// Calls f(collection, layer path, name, leaf) for each leaf of a
// {collection: {path...: {name: leaf}}} tree.
void for_each_variable(const Tree& vars, const VariableFn& f) {
  std::function<void(const std::string&, const std::string&, const Tree&)> visit =
      [&](const std::string& collection, const std::string& path, const Tree& t) {
        for (const auto& [key, child] : t.entries()) {
          if (child.is_leaf()) {
            f(collection, path, key, child.leaf());
          } else if (child.is_dict()) {
            visit(collection, path.empty() ? key : path + "/" + key, child);
          }
        }
      };
  if (!vars.is_dict()) return;
  for (const auto& [collection, tree] : vars.entries()) {
    if (tree.is_dict()) visit(collection, "", tree);
  }
}

// Sets vars[collection][path parts...][name] = value.
void put_variable(Tree& vars, const std::string& collection, const std::string& path, const std::string& name,
                  const Array& value) {
  Tree* node = &vars[collection];
  size_t start = 0;
  while (start < path.size()) {
    const size_t slash = path.find('/', start);
    node = &(*node)[path.substr(start, slash == std::string::npos ? std::string::npos : slash - start)];
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  (*node)[name] = value;
}

// The collections of `vars` other than params that `ok` accepts (those mutable in this apply).
std::vector<std::string> writable_collections(const Tree& vars, const std::function<bool(const std::string&)>& ok) {
  std::vector<std::string> out;
  for (const auto& [collection, tree] : vars.entries()) {
    if (collection != "params" && ok(collection)) out.push_back(collection);
  }
  return out;
}

}  // namespace

void RepeatedVariables::setup() {
  const auto& hp = hparams<HParams>();
  const auto made = hp.made.lock();
  PAX_CHECK(hp.source && made && hp.x_times > 0, who(*this),
            "RepeatedVariables is created by Repeat and cannot be configured on its own");
  for (const VariableSpec& v : hp.source->variable_specs()) {
    WeightHParams spec = v.spec;
    Ints dims = spec.shape.dims();
    dims.insert(dims.begin(), hp.x_times);
    ++spec.repeat_prefix_axes;                                   // each repetition drawn with the fans of one
    if (spec.fsdp_dim && *spec.fsdp_dim >= 0) ++*spec.fsdp_dim;  // it names a dimension of one repetition
    if (spec.mdl_dim) ++*spec.mdl_dim;
    if (spec.stage_dim) ++*spec.stage_dim;
    if (hp.pipelined) {
      PAX_CHECK(!spec.stage_dim, who(*this), "a pipelined Repeat cannot contain another pipelined Repeat (", v.name,
                " would split over the stage axis twice)");
      spec.stage_dim = 0;
    }
    spec.shape = Shape(dims);
    spec.init = v.init;
    spec.dtype = v.dtype;
    create_variable(v.name, spec);
  }
  for (const auto& [name, child] : hp.source->children()) {
    HParamsPtr& t = (*made)[child];
    if (!t) {
      auto p = std::make_shared<HParams>();
      p->x_times = hp.x_times;
      p->pipelined = hp.pipelined;
      p->source = child;
      p->made = hp.made;
      t = p;
    }
    create_child<RepeatedVariables>(name, t);  // one template per source layer: shared layers stay shared
  }
}

std::optional<Array> RepeatedVariables::find(const std::string& collection, const std::string& name) const {
  if (!has_variable(collection, name)) return std::nullopt;
  return variable(collection, name);
}

void RepeatedVariables::write(const std::string& collection, const std::string& name, const Array& value) const {
  update_variable(collection, name, value);
}

// ---------------------------------------------------------------------------
// Repeat

void Repeat::setup() {
  const auto& hp = hparams<HParams>();
  const std::string where = who(*this);
  PAX_CHECK(hp.x_times > 0, where, "x_times must be > 0, got ", hp.x_times);
  PAX_CHECK(hp.sub_tpl, where, "sub_tpl is None");
  // The sub-layer is built on its own, so that its variables are one
  // repetition's; dtypes are inherited as for a child.
  HParamsPtr sub_hp = hp.sub_tpl->clone();
  if (auto* l = dynamic_cast<Layer::HParams*>(sub_hp.get())) {
    if (l->dtype == DType::f32) l->dtype = hp.dtype;
    if (l->fprop_dtype == DType::f32) l->fprop_dtype = hp.fprop_dtype;
  }
  sub_owned_ = build_layer(sub_hp, "sub");
  sub_ = dynamic_cast<const RepeatableLayer*>(sub_owned_.get());
  PAX_CHECK(sub_, where, "sub_tpl must be a layer Repeat can stack (Transformer, StackedTransformer, Repeat), got ",
            sub_owned_->type_name());

  PAX_CHECK(hp.num_microbatches >= 0 && hp.microbatch_size >= 0 && !(hp.num_microbatches && hp.microbatch_size), where,
            "set at most one of num_microbatches and microbatch_size, each >= 0 (got ", hp.num_microbatches, " and ",
            hp.microbatch_size, ")");
  auto root = std::make_shared<RepeatedVariables::HParams>();
  root->x_times = hp.x_times;
  root->pipelined = pipelined();
  root->source = sub_owned_.get();
  auto made = std::make_shared<std::map<const Layer*, HParamsPtr>>();  // alive while the stand-ins build
  root->made = made;
  const auto& stand_in_root = create_child<RepeatedVariables>("sub", root);
  // Relative paths of the stand-ins, each once (a shared one at its first path).
  const std::string prefix = stand_in_root.path() + "/";
  std::function<void(const Layer&)> collect = [&](const Layer& l) {
    for (const auto& [rel, s] : stand_ins_) {
      if (s == &l) return;  // shared: listed at its first path
    }
    const std::string rel = &l == &stand_in_root ? "" : l.path().substr(prefix.size());
    stand_ins_.emplace_back(rel, static_cast<const RepeatedVariables*>(&l));
    for (const auto& [name, child] : l.children()) collect(*child);
  };
  collect(stand_in_root);
}

const RepeatedVariables& Repeat::stand_in(const std::string& relative_path) const {
  for (const auto& [rel, s] : stand_ins_) {
    if (rel == relative_path) return *s;
  }
  PAX_FAIL(who(*this), "the sub-layer has no layer at '", relative_path, "'");
}

Tree Repeat::stacked_variables() const {
  Tree vars = Tree::dict();
  for (const auto& [rel, s] : stand_ins_) {
    for (const VariableSpec& v : s->variable_specs()) {
      std::optional<Array> value = s->find(v.spec.collection, v.name);
      PAX_CHECK(value, who(*this), "variable ", v.spec.collection, "/", s->path(), "/", v.name,
                " is missing from the variables passed to apply; were they created by init for this model?");
      put_variable(vars, v.spec.collection, rel, v.name, *value);
    }
  }
  return vars;
}

Tree Repeat::gathered_for_stage(const Tree& vars) const {
  const FsdpOptions& fsdp = sharding().fsdp;
  if (!fsdp.enabled()) return vars;
  Tree gathered = vars;
  for (const auto& [rel, s] : stand_ins_) {
    // The layer whose theta reads the variable (through the stand-ins of a
    // Repeat nested in the sub-layer).
    const Layer* reader = s->hparams<RepeatedVariables::HParams>().source;
    while (const auto* inner = dynamic_cast<const RepeatedVariables*>(reader))
      reader = inner->hparams<RepeatedVariables::HParams>().source;
    for (const VariableSpec& v : s->variable_specs()) {
      if (v.spec.collection != "params") continue;
      const std::string what = v.spec.collection + "/" + s->path() + "/" + v.name;
      const Shape declared = mdl_local_shape(stage_held_spec(v.spec, pipeline_stage(), what), sharding().tp, what);
      const Array block = *s->find(v.spec.collection, v.name);  // (held, ...) split over data along one dimension
      if (block.shape() == declared) continue;
      const DType d = reader->base_hparams().fprop_dtype;
      put_variable(gathered, v.spec.collection, rel, v.name,
                   fsdp_gather(is_floating(block.dtype()) ? block.astype(d) : block, declared, fsdp, what));
    }
  }
  return gathered;
}

bool Repeat::pipelined() const {
  const auto& hp = hparams<HParams>();
  return hp.num_microbatches > 0 || hp.microbatch_size > 0;
}

int64_t Repeat::held_repetitions() const {
  const int64_t x_times = hparams<HParams>().x_times;
  const PipelineOptions& stage = pipeline_stage();
  return pipelined() && stage.enabled() ? x_times / stage.size : x_times;
}

Array Repeat::run(const Array& inputs, const Step& step, const Tree& vars,
                  const std::vector<std::string>& mutable_collections) const {
  // One dropout key per repetition, when this apply has the stream (a
  // sub-layer that needs one and gets none says so).
  Array keys;
  if (is_training() && has_rng("dropout")) keys = random::split(next_prng_key("dropout"), held_repetitions());
  auto [output, ys] = scan_repetitions(inputs, step, vars, mutable_collections, keys);
  for_each_variable(ys["updates"], [&](const std::string& collection, const std::string& rel, const std::string& name,
                                       const Array& value) { stand_in(rel).write(collection, name, value); });
  for (const auto& [name, value] : ys["summaries"].entries()) add_summary("sub/" + name, value.leaf());
  if (ys.contains("aux_loss")) add_aux_loss(sum(ys["aux_loss"].leaf()));
  return output;
}

std::pair<Array, Tree> Repeat::scan_repetitions(const Array& inputs, const Step& step, const Tree& vars,
                                                const std::vector<std::string>& mutable_collections, const Array& keys,
                                                bool unroll) const {
  const auto& hp = hparams<HParams>();
  Tree xs = Tree::dict({{"vars", vars}});
  if (keys.defined()) xs["key"] = keys;
  ApplyOptions options;
  options.train = is_training();
  options.mutable_collections = mutable_collections;
  options.summaries = summaries_enabled();
  options.sharding = sharding();
  options.sharding.stage = {};  // a stage's repetitions are scanned whole
  auto body = [&](const Array& carry, const Tree& slice) -> std::pair<Array, Tree> {
    ApplyOptions o = options;
    if (slice.contains("key")) o.rngs["dropout"] = slice["key"].leaf();
    auto out = apply_with(
        *sub_, slice["vars"], [&](const RepeatableLayer& s) { return step(s, carry); }, o);
    PAX_CHECK(out.output.shape() == carry.shape() && out.output.dtype() == carry.dtype(), who(*this),
              "the sub-layer maps ", carry.aval().str(), " to ", out.output.aval().str(),
              "; a repeated layer must keep the shape and dtype");
    Tree ys = Tree::dict({{"updates", out.updates}, {"summaries", out.summaries}});
    // A concrete zero means no auxiliary loss was added.
    if (!out.aux_loss.is_concrete() || out.aux_loss.item<double>() != 0.0) ys["aux_loss"] = out.aux_loss;
    return {out.output, ys};
  };
  const RematPolicy policy = hp.checkpoint_policy == CheckpointPolicy::dots_saveable ? RematPolicy::dots_saveable
                                                                                     : RematPolicy::nothing_saveable;
  auto remat_body = checkpoint(body, policy);
  auto step_body = [&](const Array& carry, const Tree& slice) {
    return hp.checkpoint_policy == CheckpointPolicy::none ? body(carry, slice) : remat_body(carry, slice);
  };
  if (!unroll) return scan(step_body, to_fprop_dtype(inputs), xs);
  // The repetitions one after the other in the caller's program (inside
  // the pipeline's scan, whose derivative recomputes each iteration once:
  // a scan here would recompute every repetition a second time).
  const int64_t n = tree_leaves(xs).front().dim(0);
  Array carry = to_fprop_dtype(inputs);
  std::vector<Tree> ys;
  for (int64_t l = 0; l < n; ++l) {
    const Tree slice = tree_map([l](const Array& a) { return squeeze(slice_along(a, 0, l, l + 1), Axes{0}); }, xs);
    auto [next, y] = step_body(carry, slice);
    carry = next;
    ys.push_back(y);
  }
  return {carry,
          tree_map_n(
              [](std::span<const Array> leaves) { return stack(std::vector<Array>(leaves.begin(), leaves.end()), 0); },
              ys)};
}

Array Repeat::fprop_pipelined(const Array& inputs, const Array& paddings, const Array& atten_mask,
                              const Tree& vars) const {
  const auto& hp = hparams<HParams>();
  const std::string where = who(*this);
  const PipelineOptions& stage = pipeline_stage();
  const int64_t microbatches = microbatch_count(inputs.dim(0), hp.num_microbatches, hp.microbatch_size, where);
  // One dropout key per microbatch, split per stage and then per repetition.
  Array microbatch_keys;
  if (is_training() && has_rng("dropout")) microbatch_keys = random::split(next_prng_key("dropout"), microbatches);
  const int64_t held = held_repetitions();
  for (const Array& v : tree_leaves(vars))
    PAX_CHECK(v.ndim() >= 1 && v.dim(0) == held, where, "under the stage axis of ", stage.size, " each process holds ",
              held, " of the ", hp.x_times, " repetitions, but a stacked variable is ", v.aval().str(),
              " (variables from nn::init_sharded with this stage axis)");
  const Tree stage_vars = gathered_for_stage(vars);  // once per step, not per iteration
  auto stage_fn = [&](const Array& x, const std::vector<Array>& args, const Array& microbatch) {
    Array keys;
    if (microbatch_keys.defined()) {
      keys = random::split(key_of_this_part(index_leading(microbatch_keys, microbatch), stage), held);
    }
    auto [y, ys] = scan_repetitions(
        x, [&](const RepeatableLayer& s, const Array& h) { return s.fprop(h, args[0], args[1]); }, stage_vars, {}, keys,
        /*unroll=*/true);
    PAX_CHECK(ys["updates"].entries().empty(), where,
              "a pipelined Repeat cannot update variables (its sub-layer writes a mutable collection)");
    Tree kept = Tree::dict({{"summaries", ys["summaries"]}});
    if (ys.contains("aux_loss")) kept["aux_loss"] = ys["aux_loss"];
    return StageOutput{y, kept};
  };
  PipelineResult r = run_pipeline(to_fprop_dtype(inputs), {paddings, atten_mask}, microbatches, stage, stage_fn,
                                  hp.delay_activation_forwarding);
  // Summaries and auxiliary losses: the mean over this stage's microbatches,
  // then the stages' repetitions gathered (summaries) or summed (losses).
  const Array weight = r.valid.astype(DType::f32) / float(microbatches);  // (iterations,)
  auto mean_over_microbatches = [&](const Array& v) {
    Ints dims(size_t(v.ndim()), 1);
    dims[0] = weight.dim(0);
    // A select, not a product: a bubble iteration's value may be non-finite.
    const Array valid = broadcast_to(reshape(r.valid, dims), v.shape());
    return sum(pax::where(valid, v.astype(DType::f32) * reshape(weight, dims), 0.0f), Axes{0});
  };
  for (const auto& [name, value] : r.ys["summaries"].entries()) {
    const Array per_repetition = mean_over_microbatches(value.leaf());  // (held, ...)
    add_summary("sub/" + name, gather_parts(stop_gradient(per_repetition), 0, stage).astype(value.leaf().dtype()));
  }
  if (r.ys.contains("aux_loss"))
    add_aux_loss(leave_split(sum(mean_over_microbatches(r.ys["aux_loss"].leaf())), stage.axis));
  return r.output;
}

Array Repeat::fprop(const Array& inputs, const Array& paddings, const Array& atten_mask) const {
  PAX_CHECK(inputs.ndim() == 3, who(*this), "inputs ", inputs.aval().str(), " must be (batch, time, dims)");
  Tree vars = stacked_variables();
  if (pipelined() && pipeline_stage().enabled()) return fprop_pipelined(inputs, paddings, atten_mask, vars);
  std::vector<std::string> writable =
      writable_collections(vars, [this](const std::string& c) { return is_mutable(c); });
  return run(
      inputs, [&](const RepeatableLayer& s, const Array& x) { return s.fprop(x, paddings, atten_mask); }, vars,
      writable);
}

Array Repeat::extend_step(const Array& inputs, const Array& time_step, const Array& atten_mask) const {
  PAX_CHECK(inputs.ndim() == 2, who(*this), "extend_step inputs ", inputs.aval().str(), " must be (batch, dims)");
  PAX_CHECK(!(pipelined() && pipeline_stage().enabled()), who(*this),
            "decoding does not run pipelined: decode with a mesh whose stage axis is 1 (the checkpoint restores onto "
            "any mesh)");
  Tree vars = stacked_variables();
  std::vector<std::string> writable =
      writable_collections(vars, [this](const std::string& c) { return is_mutable(c); });
  // Which caches the sub-layer keeps, from its init_states on a 1-position
  // cache; the stacked ones are sliced per repetition like the params.
  ApplyOptions probe_options;
  probe_options.mutable_collections = {kDecoderCache};
  Tree layout = apply_with(
                    *sub_, Tree::dict(),
                    [&](const RepeatableLayer& s) {
                      s.init_states(inputs.dim(0), 1);
                      return 0;
                    },
                    probe_options)
                    .updates;
  int found = 0, missing = 0;
  for_each_variable(layout,
                    [&](const std::string& collection, const std::string& rel, const std::string& name, const Array&) {
                      std::optional<Array> value = stand_in(rel).find(collection, name);
                      if (!value) {
                        ++missing;
                        return;
                      }
                      ++found;
                      put_variable(vars, collection, rel, name, *value);
                    });
  PAX_CHECK(found == 0 || missing == 0, who(*this), "the decoder cache is incomplete (", found, " of ", found + missing,
            " states); call init_states again");
  if (is_mutable(kDecoderCache) && std::find(writable.begin(), writable.end(), kDecoderCache) == writable.end()) {
    writable.push_back(kDecoderCache);
  }
  return run(
      inputs, [&](const RepeatableLayer& s, const Array& x) { return s.extend_step(x, time_step, atten_mask); }, vars,
      writable);
}

void Repeat::init_states(int64_t batch, int64_t max_length) const {
  const auto& hp = hparams<HParams>();
  ApplyOptions options;
  options.mutable_collections = {kDecoderCache};
  Tree states = apply_with(
                    *sub_, Tree::dict(),
                    [&](const RepeatableLayer& s) {
                      s.init_states(batch, max_length);
                      return 0;
                    },
                    options)
                    .updates;
  for_each_variable(
      states, [&](const std::string& collection, const std::string& rel, const std::string& name, const Array& value) {
        Ints dims = value.shape().dims();
        dims.insert(dims.begin(), hp.x_times);
        stand_in(rel).write(collection, name, broadcast_to(expand_dims(value, {0}), Shape(dims)));
      });
}

PAX_REGISTER_LAYER(TransformerFeedForward);
PAX_REGISTER_LAYER(Transformer);
PAX_REGISTER_LAYER(StackedTransformer);
PAX_REGISTER_LAYER(RepeatedVariables);
PAX_REGISTER_LAYER(Repeat);

}  // namespace pax::nn

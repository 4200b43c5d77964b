// Layer: the base of every layer, as Praxis's BaseLayer. A layer is
// configured by its HParams, built once (setup() declares its variables with
// create_variable and its children with create_child / create_children),
// and applied purely: the variables live in a tree passed to init / apply,
// never in the layer. fprop methods read them with theta(), update mutable
// collections (batch statistics), add summaries and auxiliary losses, and
// draw per-layer random keys.
//
//   auto model = nn::build<TransformerLm>(cfg);               // or build_layer(config)
//   Tree variables = nn::init(*model, key, ids);               // {params: ...}
//   auto out = nn::apply(*model, variables, ids, {.rngs = {{"dropout", k}}, .train = true});
//   out.output; out.updates; out.summaries; out.aux_loss;
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "pax/api/tree_convert.h"
#include "pax/config/config.h"
#include "pax/core/tree.h"
#include "pax/nn/sharding_plan.h"
#include "pax/nn/pipeline.h"
#include "pax/nn/tensor_parallel.h"
#include "pax/nn/weight_init.h"

namespace pax::nn {

// What a summary is written as (Praxis's SummaryType, the kinds paxcc writes).
enum class SummaryType { scalar, histogram };
// The suffix that marks a histogram among an apply's summaries.
inline constexpr const char* kHistogramSuffix = "_histogram";

class Layer {
 public:
  // Fields every layer has; children inherit dtype and fprop_dtype from
  // their parent when they keep the defaults (f32).
  struct HParams : BaseHParams {
    DType dtype = DType::f32;
    DType fprop_dtype = DType::f32;
    WeightInit params_init = WeightInit::xavier();
    PAX_HPARAMS(Layer, BaseHParams, (dtype, "Dtype of the layer's variables."),
                (fprop_dtype, "Dtype of the forward computation (bf16 with f32 variables: mixed precision)."),
                (params_init, "How weights are initialised unless their declaration says otherwise."));
  };

  struct VariableSpec {
    std::string name;
    WeightHParams spec;
    DType dtype;      // resolved
    WeightInit init;  // resolved
  };

  Layer() = default;
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Path of the layer from the root: "stack/x_layers_0/ff" ("" for the root).
  const std::string& path() const { return path_; }
  const char* type_name() const { return hparams_->type_name(); }
  const Layer* parent() const { return parent_; }
  const std::vector<std::pair<std::string, Layer*>>& children() const { return children_; }
  const std::vector<VariableSpec>& variable_specs() const { return variables_; }
  const HParams& base_hparams() const { return *hparams_; }
  template <class H>
  const H& hparams() const {
    return static_cast<const H&>(*hparams_);
  }
  // A child by name (throws listing the children).
  const Layer& child(const std::string& name) const;

  // The forward pass of layers that map one array to one array (Linear,
  // activations, norms, convolutions, ...), so that containers such as
  // Sequential can call any of them. Layers with other inputs define their
  // own fprop overloads; calling this one on them is an error.
  virtual Array fprop(const Array& x) const;

 protected:
  // Declares variables and children; called once when the layer is built.
  virtual void setup() {}

  // ---- setup-time API
  void create_variable(const std::string& name, WeightHParams spec);
  // A child from a template (its type is the template's type name). The
  // same template object used twice is one shared child (shared weights).
  Layer& create_child(const std::string& name, const HParamsPtr& tpl);
  template <class L>
  const L& create_child(const std::string& name, const HParamsPtr& tpl) {
    Layer& l = create_child(name, tpl);
    auto* typed = dynamic_cast<L*>(&l);
    PAX_CHECK(typed, path_, ": child '", name, "' is a ", l.type_name(), ", not the layer type this layer needs");
    return *typed;
  }
  // Children name_0, name_1, ... from copies of the templates.
  std::vector<const Layer*> create_children(const std::string& name, const std::vector<HParamsPtr>& tpls);

  // ---- fprop-time API (inside init / apply)
  // A variable of the "params" collection, in fprop_dtype.
  Array theta(const std::string& name) const;
  // A variable of any collection, as stored.
  Array variable(const std::string& collection, const std::string& name) const;
  // Writes a variable of a mutable collection (e.g. batch_stats).
  void update_variable(const std::string& collection, const std::string& name, const Array& value) const;
  bool is_mutable(const std::string& collection) const;
  // Whether the variable exists in this init / apply (written or given).
  bool has_variable(const std::string& collection, const std::string& name) const;
  // Whether this apply got a key for `stream`.
  bool has_rng(const std::string& stream) const;
  // A summary of this apply (Praxis's add_summary): a scalar, averaged over
  // the summary interval by the trainer (an array of scalars, e.g. one per
  // repetition of a Repeat, is one series per element), or a histogram of
  // the value's elements. Dropped when the apply collects no summaries.
  void add_summary(const std::string& name, const Array& value, SummaryType type = SummaryType::scalar) const;
  // Whether this apply collects summaries (ApplyOptions::summaries): a layer
  // asks before computing one that costs work.
  bool summaries_enabled() const;
  void add_aux_loss(const Array& value, double weight = 1.0) const;
  // A fresh key of `stream` for this layer (a different one on every call
  // within one apply); throws when apply got no key for the stream.
  Array next_prng_key(const std::string& stream = "dropout") const;
  bool is_initializing() const;
  // Training mode (dropout active, batch statistics used and updated).
  bool is_training() const;
  // x converted to fprop_dtype (floating inputs only).
  Array to_fprop_dtype(const Array& x) const;
  // How this apply's variables are split (nothing split when none).
  const ShardingPlan& sharding() const;
  // Its parts: the fully sharded data parallelism (off when none).
  const FsdpOptions& fsdp() const;
  // The tensor parallelism of this apply (off when none): variables declared
  // with mdl_dim are this process's blocks (theta returns them so).
  const TensorParallelOptions& tensor_parallel() const;
  // The pipeline parallelism of this apply (off when none): a pipelined
  // Repeat's stacks are this process's stage (nn/pipeline.h).
  const PipelineOptions& pipeline_stage() const;

 private:
  friend std::unique_ptr<Layer> build_layer(const HParamsPtr& hparams, const std::string& name);
  friend class LayerBuilder;
  void check_setup(const char* what) const;
  std::shared_ptr<const HParams> hparams_;
  std::string name_, path_;
  Layer* parent_ = nullptr;
  std::vector<std::unique_ptr<Layer>> owned_;
  std::vector<std::pair<std::string, Layer*>> children_;
  std::vector<VariableSpec> variables_;
  bool in_setup_ = false;
};

// Registry of layer types (PAX_REGISTER_LAYER in each layer's .cc file).
using LayerFactory = std::unique_ptr<Layer> (*)();
void register_layer(const std::string& type_name, LayerFactory factory, HParamsFactory hparams);

// Builds the layer tree of a config (its type name selects the layer class).
std::unique_ptr<Layer> build_layer(const HParamsPtr& hparams, const std::string& name = "");
inline std::unique_ptr<Layer> build_layer(const Config& config, const std::string& name = "") {
  return build_layer(config.root(), name);
}
template <class L>
std::unique_ptr<L> build(const typename L::HParams& hparams) {
  std::unique_ptr<Layer> l = build_layer(std::make_shared<typename L::HParams>(hparams));
  return std::unique_ptr<L>(static_cast<L*>(l.release()));
}
template <class L>
std::unique_ptr<L> build(const Config& config) {
  std::unique_ptr<Layer> l = build_layer(config.root());
  auto* typed = dynamic_cast<L*>(l.get());
  PAX_CHECK(typed, "build: the config builds a ", l->type_name(), ", not the requested layer type");
  l.release();
  return std::unique_ptr<L>(typed);
}

// A copy of a template field as an H, for a parent to fill in and pass to
// create_child; throws naming the field and the type it must have.
template <class H>
std::shared_ptr<H> clone_template(const HParamsPtr& tpl, const char* field, const std::string& where) {
  auto p = std::dynamic_pointer_cast<H>(tpl ? tpl->clone() : nullptr);
  PAX_CHECK(p, where, field, " must be a ", H().type_name(), ", got ", tpl ? tpl->type_name() : "None");
  return p;
}

// A default template of layer type L, to edit and pass to create_child.
template <class L>
std::shared_ptr<typename L::HParams> tpl() {
  return std::make_shared<typename L::HParams>();
}

// ---------------------------------------------------------------------------
// init / apply

// The collection that decoding keeps its state in (attention's key / value
// caches); decode runs with it mutable.
inline constexpr const char* kDecoderCache = "decoder_cache";

struct ApplyOptions {
  std::map<std::string, Array> rngs;             // keys by stream ("dropout", ...)
  std::vector<std::string> mutable_collections;  // collections this apply may write
  bool train = false;                            // training mode
  bool summaries = true;                         // collect add_summary values
  ShardingPlan sharding;                         // variables held as blocks (nn/sharding_plan.h)
};

template <class R>
struct Applied {
  R output;
  Tree updates;    // the mutable collections after the call: {batch_stats: ...}
  Tree summaries;  // {layer/path/name: value}; histograms' names end in kHistogramSuffix
  Array aux_loss;  // sum of weighted auxiliary losses (0 when none)
};

// random::fold_in, kept here to avoid including random.h in this header.
Array random_fold(const Array& key, uint32_t data);

namespace detail {

// The state of one init / apply call (thread-local while it runs).
class ApplyScope {
 public:
  ApplyScope(bool initializing, const Tree* variables, const ApplyOptions& options);
  ~ApplyScope();
  Tree take_updates();
  Tree take_summaries();
  Array take_aux_loss();
  // Creates every variable the layer tree declares (init); under the
  // options' sharding, only this process's block of each variable it splits.
  void create_variables(const Layer& root, const Array& key);

 private:
  void* previous_;
};

}  // namespace detail

// All variables the layer tree declares, drawn from `key` (a key per layer
// path and variable name): {params: ..., batch_stats: ..., ...}.
Tree init(const Layer& layer, const Array& key);
// The same, with the variables `plan` splits (fully sharded data, tensor and
// pipeline parallelism): this process's blocks of the arrays init(layer, key)
// returns.
Tree init_sharded(const Layer& layer, const Array& key, const ShardingPlan& plan);

// Variables of `layer`, after running `call(layer)` once (as Flax does) so
// that collections written in the forward pass exist too.
template <class L, class F>
Tree init_with(const L& layer, const Array& key, F&& call, const ApplyOptions& options = {}) {
  ApplyOptions o = options;
  if (!o.rngs.count("dropout")) o.rngs["dropout"] = random_fold(key, 1);
  detail::ApplyScope scope(true, nullptr, o);
  scope.create_variables(layer, key);
  call(layer);
  return scope.take_updates();
}

// init that runs layer.fprop(inputs...).
template <class L, class... In>
requires(sizeof...(In) > 0) Tree init(const L& layer, const Array& key, const In&... inputs) {
  return init_with(layer, key, [&](const L& l) { return l.fprop(inputs...); });
}

// Runs `call(layer)` with `variables`; returns the output, the updated
// mutable collections, the summaries and the auxiliary loss.
template <class L, class F>
auto apply_with(const L& layer, const Tree& variables, F&& call, const ApplyOptions& options = {}) {
  using R = decltype(call(layer));
  detail::ApplyScope scope(false, &variables, options);
  R out = call(layer);
  return Applied<R>{std::move(out), scope.take_updates(), scope.take_summaries(), scope.take_aux_loss()};
}

// apply that runs layer.fprop(inputs...).
template <class L, class... In>
auto apply(const L& layer, const Tree& variables, const In&... inputs) {
  return apply_with(layer, variables, [&](const L& l) { return l.fprop(inputs...); });
}
template <class L, class... In>
auto apply(const L& layer, const Tree& variables, const ApplyOptions& options, const In&... inputs) {
  return apply_with(
      layer, variables, [&](const L& l) { return l.fprop(inputs...); }, options);
}

// ---------------------------------------------------------------------------
// inspection

// A table of the layer tree: path, layer type, variables with shape, dtype
// and collection, parameter counts and totals (like flax tabulate).
std::string summary(const Layer& layer);
// Total number of elements of the declared variables of `collection`.
int64_t count_parameters(const Layer& layer, const std::string& collection = "params");

}  // namespace pax::nn

// Registers a layer class (its HParams type name is the layer's name).
#define PAX_REGISTER_LAYER(Cls)                                                                                \
  static const bool pax_layer_registered_##Cls##_ = [] {                                                       \
    ::pax::nn::register_layer(                                                                                 \
        Cls::HParams().type_name(), [] { return std::unique_ptr<::pax::nn::Layer>(std::make_unique<Cls>()); }, \
        [] { return ::pax::HParamsPtr(std::make_shared<Cls::HParams>()); });                                   \
    return true;                                                                                               \
  }()

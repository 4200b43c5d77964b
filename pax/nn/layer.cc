// Layer building, the per-call apply state, variable access, random keys,
// summaries and the summary table.
#include "pax/nn/layer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

Array random_fold(const Array& key, uint32_t data) { return random::fold_in(key, data); }

namespace {

// FNV-1a: stable across runs and platforms, for deriving keys from paths.
uint32_t hash32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    parts.push_back(path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

// ---------------------------------------------------------------------------
// registry

struct LayerEntry {
  LayerFactory factory;
};

std::map<std::string, LayerEntry>& layer_registry() {
  static std::map<std::string, LayerEntry> r;
  return r;
}

std::mutex& layer_registry_mutex() {
  static std::mutex m;
  return m;
}

// ---------------------------------------------------------------------------
// apply state

struct ApplyState {
  bool initializing = false;
  bool train = false;
  const Tree* variables = nullptr;
  Tree updated;  // written collections (all of them during init)
  std::set<std::string> mutable_collections;
  std::map<std::string, Array> rngs;
  std::map<std::string, uint32_t> counters;  // "stream|path" -> calls so far
  bool summaries_on = true;
  ShardingPlan sharding;
  Tree summaries;
  std::vector<Array> aux_losses;
};

thread_local ApplyState* g_state = nullptr;

ApplyState& state(const char* what, const Layer& l) {
  PAX_CHECK(g_state, l.type_name(), " '", l.path(), "': ", what,
            " is only available inside nn::init / nn::apply (call fprop through them)");
  return *g_state;
}

Tree* find(Tree& root, const std::vector<std::string>& parts) {
  Tree* node = &root;
  for (const std::string& p : parts) {
    if (!node->is_dict() || !node->contains(p)) return nullptr;
    node = &(*node)[p];
  }
  return node;
}

const Tree* find(const Tree& root, const std::vector<std::string>& parts) {
  const Tree* node = &root;
  for (const std::string& p : parts) {
    if (!node->is_dict() || !node->contains(p)) return nullptr;
    node = &(*node)[p];
  }
  return node;
}

std::vector<std::string> variable_location(const std::string& collection, const Layer& l, const std::string& name) {
  std::vector<std::string> parts{collection};
  for (const std::string& p : split_path(l.path())) parts.push_back(p);
  parts.push_back(name);
  return parts;
}

void put(Tree& root, const std::vector<std::string>& parts, const Array& value) {
  Tree* node = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i]];
  (*node)[parts.back()] = value;
}

}  // namespace

void register_layer(const std::string& type_name, LayerFactory factory, HParamsFactory hparams) {
  {
    std::lock_guard<std::mutex> lock(layer_registry_mutex());
    layer_registry()[type_name] = LayerEntry{factory};
  }
  register_hparams(type_name, hparams, "layer");
}

// ---------------------------------------------------------------------------
// building

class LayerBuilder {
 public:
  // Templates built so far in this tree: the same object is one layer. The
  // handles keep the templates alive for the whole build, so an address is
  // never reused by a later (different) template.
  std::map<const BaseHParams*, std::pair<HParamsPtr, Layer*>> built;

  std::unique_ptr<Layer> make(const HParamsPtr& tpl, const std::string& name, Layer* parent) {
    PAX_CHECK(tpl, "build_layer: the template for '", name, "' is None");
    LayerFactory factory = nullptr;
    {
      std::lock_guard<std::mutex> lock(layer_registry_mutex());
      auto it = layer_registry().find(tpl->type_name());
      if (it != layer_registry().end()) factory = it->second.factory;
    }
    if (!factory) make_hparams(tpl->type_name(), "layer");  // throws listing the registered layers
    // A copy, so that inheriting dtypes from the parent never edits the user's config.
    HParamsPtr copy = tpl->clone();
    auto* hp = dynamic_cast<Layer::HParams*>(copy.get());
    PAX_CHECK(hp, "build_layer: ", tpl->type_name(), " is not a layer config");
    if (parent) {
      const Layer::HParams& p = parent->base_hparams();
      if (hp->dtype == DType::f32) hp->dtype = p.dtype;
      if (hp->fprop_dtype == DType::f32) hp->fprop_dtype = p.fprop_dtype;
    }
    std::unique_ptr<Layer> layer = factory();
    layer->hparams_ = std::shared_ptr<const Layer::HParams>(copy, hp);
    layer->name_ = name;
    layer->parent_ = parent;
    layer->path_ = parent ? join_path(parent->path_, name) : "";
    built[tpl.get()] = {tpl, layer.get()};
    layer->in_setup_ = true;
    layer->setup();
    layer->in_setup_ = false;
    return layer;
  }
};

namespace {
thread_local LayerBuilder* g_builder = nullptr;
}  // namespace

std::unique_ptr<Layer> build_layer(const HParamsPtr& hparams, const std::string& name) {
  check_complete(hparams, "build_layer");
  LayerBuilder builder;
  LayerBuilder* previous = g_builder;
  g_builder = &builder;
  try {
    std::unique_ptr<Layer> root = builder.make(hparams, name, nullptr);
    g_builder = previous;
    return root;
  } catch (...) {
    g_builder = previous;
    throw;
  }
}

void Layer::check_setup(const char* what) const {
  PAX_CHECK(in_setup_ && g_builder, type_name(), " '", path_, "': ", what, " may only be called from setup()");
}

void Layer::create_variable(const std::string& name, WeightHParams spec) {
  check_setup("create_variable");
  for (const VariableSpec& v : variables_) {
    PAX_CHECK(v.name != name || v.spec.collection != spec.collection, type_name(), " '", path_, "': variable '", name,
              "' is declared twice");
  }
  for (int64_t d : spec.shape)
    PAX_CHECK(d >= 0, type_name(), " '", path_, "': variable '", name, "' has shape ", spec.shape);
  const HParams& hp = *hparams_;
  VariableSpec v{name, spec, spec.dtype.value_or(hp.dtype), spec.init.value_or(hp.params_init)};
  variables_.push_back(std::move(v));
}

Layer& Layer::create_child(const std::string& name, const HParamsPtr& tpl) {
  check_setup("create_child");
  for (const auto& [n, c] : children_) {
    PAX_CHECK(n != name, type_name(), " '", path_, "': a child named '", name, "' already exists");
  }
  PAX_CHECK(tpl, type_name(), " '", path_, "': the template for child '", name, "' is None");
  auto it = g_builder->built.find(tpl.get());
  if (it != g_builder->built.end()) {
    children_.emplace_back(name, it->second.second);  // shared: one instance, one set of weights
    return *it->second.second;
  }
  owned_.push_back(g_builder->make(tpl, name, this));
  children_.emplace_back(name, owned_.back().get());
  return *owned_.back();
}

std::vector<const Layer*> Layer::create_children(const std::string& name, const std::vector<HParamsPtr>& tpls) {
  std::vector<const Layer*> out;
  for (size_t i = 0; i < tpls.size(); ++i) {
    PAX_CHECK(tpls[i], type_name(), " '", path_, "': template ", i, " of '", name, "' is None");
    out.push_back(&create_child(name + "_" + std::to_string(i), deep_clone(tpls[i])));
  }
  return out;
}

Array Layer::fprop(const Array& x) const {
  PAX_FAIL(type_name(), " '", path_, "' does not map a single array (input ", x.aval().str(),
           "); call its own fprop with the inputs it takes");
}

const Layer& Layer::child(const std::string& name) const {
  std::string names;
  for (const auto& [n, c] : children_) {
    if (n == name) return *c;
    names += (names.empty() ? "" : ", ") + n;
  }
  PAX_FAIL(type_name(), " '", path_, "' has no child '", name, "'; children: ", names.empty() ? "(none)" : names);
}

// ---------------------------------------------------------------------------
// fprop-time access

Array Layer::variable(const std::string& collection, const std::string& name) const {
  ApplyState& st = state("variable", *this);
  std::vector<std::string> loc = variable_location(collection, *this, name);
  if (const Tree* t = find(st.updated, loc)) return t->leaf();
  if (st.variables) {
    if (const Tree* t = find(*st.variables, loc)) {
      PAX_CHECK(t->is_leaf(), type_name(), " '", path_, "': variables entry ", collection, "/", path_, "/", name,
                " is not an array");
      return t->leaf();
    }
  }
  std::string where = collection;
  for (size_t i = 1; i < loc.size(); ++i) where += "/" + loc[i];
  PAX_FAIL(type_name(), " '", path_, "': variable '", where, "' is missing from the variables passed to apply",
           st.variables ? "" : " (no variables given)", "; were they created by init for this model?");
}

Array Layer::theta(const std::string& name) const {
  Array w = to_fprop_dtype(variable("params", name));
  for (const VariableSpec& v : variables_) {
    if (v.name == name && v.spec.collection == "params") {
      // A block of the weight under fsdp is gathered in fprop_dtype (half
      // the traffic in bf16) into this process's block under tp (the whole
      // weight without it; a whole weight under tp is refused).
      const std::string what =
          std::string(type_name()) + " '" + path_ + "': params/" + (path_.empty() ? "" : path_ + "/") + name;
      return fsdp_gather(w, mdl_local_shape(v.spec, tensor_parallel(), what), fsdp(), what);
    }
  }
  return w;
}

const ShardingPlan& Layer::sharding() const { return state("sharding", *this).sharding; }

const FsdpOptions& Layer::fsdp() const { return state("fsdp", *this).sharding.fsdp; }

const TensorParallelOptions& Layer::tensor_parallel() const { return state("tensor_parallel", *this).sharding.tp; }

const PipelineOptions& Layer::pipeline_stage() const { return state("pipeline_stage", *this).sharding.stage; }

bool Layer::has_variable(const std::string& collection, const std::string& name) const {
  ApplyState& st = state("has_variable", *this);
  std::vector<std::string> loc = variable_location(collection, *this, name);
  return find(st.updated, loc) != nullptr || (st.variables && find(*st.variables, loc) != nullptr);
}

bool Layer::has_rng(const std::string& stream) const { return state("has_rng", *this).rngs.count(stream) > 0; }

bool Layer::is_mutable(const std::string& collection) const {
  ApplyState& st = state("is_mutable", *this);
  return st.initializing || st.mutable_collections.count(collection) > 0;
}

void Layer::update_variable(const std::string& collection, const std::string& name, const Array& value) const {
  ApplyState& st = state("update_variable", *this);
  PAX_CHECK(is_mutable(collection), type_name(), " '", path_, "': cannot update variable '", name, "' of collection '",
            collection, "', which is not mutable in this apply; pass mutable_collections = {\"", collection, "\"}");
  put(st.updated, variable_location(collection, *this, name), value);
}

void Layer::add_summary(const std::string& name, const Array& value, SummaryType type) const {
  ApplyState& st = state("add_summary", *this);
  if (!st.summaries_on) return;
  st.summaries[join_path(path_, type == SummaryType::histogram ? name + kHistogramSuffix : name)] = value;
}

bool Layer::summaries_enabled() const { return state("summaries_enabled", *this).summaries_on; }

void Layer::add_aux_loss(const Array& value, double weight) const {
  ApplyState& st = state("add_aux_loss", *this);
  PAX_CHECK(value.ndim() == 0, type_name(), " '", path_, "': an auxiliary loss must be a scalar, got ",
            value.aval().str());
  st.aux_losses.push_back(weight == 1.0 ? value : value * weight);
}

Array Layer::next_prng_key(const std::string& stream) const {
  ApplyState& st = state("next_prng_key", *this);
  auto it = st.rngs.find(stream);
  PAX_CHECK(it != st.rngs.end(), type_name(), " '", path_, "' needs a random key for stream '", stream,
            "'; pass rngs = {{\"", stream, "\", key}} to apply");
  uint32_t& counter = st.counters[stream + "|" + path_];
  return random::fold_in(random::fold_in(it->second, hash32(path_)), counter++);
}

bool Layer::is_initializing() const { return state("is_initializing", *this).initializing; }
bool Layer::is_training() const { return state("is_training", *this).train; }

Array Layer::to_fprop_dtype(const Array& x) const {
  const DType d = hparams_->fprop_dtype;
  return is_floating(x.dtype()) && x.dtype() != d ? x.astype(d) : x;
}

// ---------------------------------------------------------------------------
// init / apply scopes

namespace detail {

ApplyScope::ApplyScope(bool initializing, const Tree* variables, const ApplyOptions& options) : previous_(g_state) {
  auto* st = new ApplyState();
  st->initializing = initializing;
  st->train = options.train;
  st->summaries_on = options.summaries;
  st->sharding = options.sharding;
  st->variables = variables;
  st->mutable_collections.insert(options.mutable_collections.begin(), options.mutable_collections.end());
  st->rngs = options.rngs;
  for (const auto& [stream, key] : options.rngs) {
    PAX_CHECK(key.dtype() == DType::u32 && key.shape() == Shape{2}, "apply: the key of stream '", stream,
              "' must be u32[2] (from random::key), got ", key.aval().str());
  }
  g_state = st;
}

ApplyScope::~ApplyScope() {
  delete g_state;
  g_state = static_cast<ApplyState*>(previous_);
}

Tree ApplyScope::take_updates() {
  Tree out = std::move(g_state->updated);
  g_state->updated = Tree();
  if (out.is_none()) return Tree::dict();
  // "params" first, then the other collections in creation order.
  if (out.contains("params") && out.keys().front() != "params") {
    Tree::Dict ordered{{"params", out["params"]}};
    for (const auto& [k, v] : out.entries()) {
      if (k != "params") ordered.emplace_back(k, v);
    }
    out = Tree::dict(std::move(ordered));
  }
  return out;
}

Tree ApplyScope::take_summaries() {
  Tree out = std::move(g_state->summaries);
  g_state->summaries = Tree();
  return out.is_none() ? Tree::dict() : out;
}

Array ApplyScope::take_aux_loss() {
  Array total = zeros({});
  for (const Array& a : g_state->aux_losses) total = total + a.astype(DType::f32);
  return total;
}

void ApplyScope::create_variables(const Layer& root, const Array& key) {
  const ShardingPlan& plan = g_state->sharding;
  const FsdpOptions& fsdp = plan.fsdp;
  const TensorParallelOptions& tp = plan.tp;
  const PipelineOptions& stage = plan.stage;
  std::set<const Layer*> seen;
  std::function<void(const Layer&)> visit = [&](const Layer& l) {
    if (!seen.insert(&l).second) return;  // a shared child is created once
    const Array layer_key = random::fold_in(key, hash32(l.path()));
    for (const Layer::VariableSpec& v : l.variable_specs()) {
      Array value = init_weight(v.init, random::fold_in(layer_key, hash32(v.name)), v.spec.shape, v.dtype,
                                v.spec.fan_in_axes, v.spec.fan_out_axes, v.spec.repeat_prefix_axes);
      const std::string where = v.spec.collection + "/" + (l.path().empty() ? "" : l.path() + "/") + v.name;
      // This process's stage of a pipelined stack, its block of that under
      // tp, and its block of that under fsdp.
      const WeightHParams staged = stage_held_spec(v.spec, stage, where);
      // A stage's block splits over mdl and data along one dimension (a
      // checkpoint records two levels of splits).
      const WeightHParams held = held_spec(staged, tp, fsdp, where, /*second_dimension=*/!stage_split(v.spec, stage));
      value = stage_block(value, v.spec, stage);
      value = fsdp_block(mdl_block(value, staged, tp), fsdp_split_dim(held, fsdp, where), fsdp);
      put(g_state->updated, variable_location(v.spec.collection, l, v.name), value);
    }
    for (const auto& [name, child] : l.children()) visit(*child);
  };
  visit(root);
}

}  // namespace detail

Tree init(const Layer& layer, const Array& key) {
  detail::ApplyScope scope(true, nullptr, ApplyOptions{});
  scope.create_variables(layer, key);
  return scope.take_updates();
}

Tree init_sharded(const Layer& layer, const Array& key, const ShardingPlan& plan) {
  detail::ApplyScope scope(true, nullptr, ApplyOptions{.sharding = plan.variables_only()});
  scope.create_variables(layer, key);
  return scope.take_updates();
}

// ---------------------------------------------------------------------------
// summary table

int64_t count_parameters(const Layer& layer, const std::string& collection) {
  std::set<const Layer*> seen;
  int64_t total = 0;
  std::function<void(const Layer&)> visit = [&](const Layer& l) {
    if (!seen.insert(&l).second) return;
    for (const Layer::VariableSpec& v : l.variable_specs()) {
      if (v.spec.collection == collection) total += v.spec.shape.numel();
    }
    for (const auto& [name, child] : l.children()) visit(*child);
  };
  visit(layer);
  return total;
}

std::string summary(const Layer& layer) {
  struct Row {
    std::string path, type, variable, shape, dtype, collection, count;
  };
  std::vector<Row> rows;
  std::map<std::string, int64_t> totals;
  std::map<std::string, int64_t> total_bytes;
  std::set<const Layer*> seen;
  std::function<void(const Layer&, const std::string&)> visit = [&](const Layer& l, const std::string& shown) {
    if (!seen.insert(&l).second) {
      rows.push_back(
          {shown, l.type_name(), "(shared with " + (l.path().empty() ? "(root)" : l.path()) + ")", "", "", "", ""});
      return;
    }
    if (l.variable_specs().empty()) rows.push_back({shown, l.type_name(), "", "", "", "", ""});
    for (const Layer::VariableSpec& v : l.variable_specs()) {
      const int64_t n = v.spec.shape.numel();
      totals[v.spec.collection] += n;
      total_bytes[v.spec.collection] += n * int64_t(itemsize(v.dtype));
      rows.push_back({shown, l.type_name(), v.name, v.spec.shape.str(), dtype_short_name(v.dtype), v.spec.collection,
                      std::to_string(n)});
    }
    for (const auto& [name, child] : l.children()) visit(*child, shown == "(root)" ? name : shown + "/" + name);
  };
  visit(layer, "(root)");
  const char* headers[] = {"path", "layer", "variable", "shape", "dtype", "collection", "count"};
  size_t w[7];
  for (int i = 0; i < 7; ++i) w[i] = std::string(headers[i]).size();
  for (const Row& r : rows) {
    const std::string* f[] = {&r.path, &r.type, &r.variable, &r.shape, &r.dtype, &r.collection, &r.count};
    for (int i = 0; i < 7; ++i) w[i] = std::max(w[i], f[i]->size());
  }
  std::string out;
  auto line = [&](const std::string* f[]) {
    for (int i = 0; i < 7; ++i) {
      out += i == 6 ? fmt::format("{:>{}}", *f[i], w[i]) : fmt::format("{:<{}}  ", *f[i], w[i]);
    }
    out += "\n";
  };
  std::string hs[7];
  for (int i = 0; i < 7; ++i) hs[i] = headers[i];
  const std::string* hp[] = {&hs[0], &hs[1], &hs[2], &hs[3], &hs[4], &hs[5], &hs[6]};
  line(hp);
  size_t width = 0;
  for (size_t x : w) width += x + 2;
  out += std::string(width - 2, '-') + "\n";
  for (const Row& r : rows) {
    const std::string* f[] = {&r.path, &r.type, &r.variable, &r.shape, &r.dtype, &r.collection, &r.count};
    line(f);
  }
  out += std::string(width - 2, '-') + "\n";
  for (const auto& [collection, n] : totals) {
    out += fmt::format("total {}: {} ({:.2f} MB)\n", collection, n, double(total_bytes[collection]) / 1e6);
  }
  return out;
}

}  // namespace pax::nn

// Train, eval and decode steps: the model's loss differentiated with respect
// to its params, checked, and turned into updates by the learner's optimizer,
// all inside one jitted program.
#include "pax/train/steps.h"

#include <limits>
#include <map>
#include <optional>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/interp/interpreter.h"
#include "pax/nn/layer.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/optim/tree_utils.h"

namespace pax::train {

Tree model_variables(const TrainState& state) {
  Tree vars = Tree::dict({{"params", state.params}});
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) vars.set(name, collection);
  return vars;
}

namespace {

// fold_in data of the variational noise's stream (the step key itself is dropout's).
constexpr uint32_t kNoiseStream = 0x766e;

// Gradients are summed over the processes in buckets of about this size:
// small enough that a bucket's reduction starts while the backward pass
// still computes the gradients of the layers below
// (compile/collective_order.h), large enough that each collective moves
// megabytes.
constexpr int64_t kGradientBucketBytes = int64_t(4) << 20;

// Names of the collections other than params (written during training).
std::vector<std::string> mutable_collections(const TrainState& state) {
  std::vector<std::string> names;
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) names.push_back(name);
  return names;
}

// The global batch's gradients, metrics and written collections from every
// process's own, in one bucketed psum: the gradients (scaled by this
// process's loss weight when the loss is one metric, then divided by the
// summed weights; summed as they are when the loss was normalised over the
// processes already), the metrics (weighted means, or maxima of the values
// whose weight is > 0, as `rules` say) and the collections (their means).
struct Reduced {
  Tree grads, metrics, collections;
  Array loss;
};

Reduced reduce_over(const std::string& axis, const std::optional<Array>& loss_weight, const MetricRules& rules,
                    const Tree& grads, const Tree& metrics, const Tree& collections, const Array& loss) {
  PAX_CHECK(metrics.is_dict(), "data-parallel train step: the metrics are not a dict {name: [value, weight]}");
  const Array weight = loss_weight ? loss_weight->astype(DType::f32) : scalar(1.0f);
  // value * w, and 0 where w is 0: a process with no real example may have
  // NaN gradients and loss, a metric of weight 0 a NaN value; they add nothing.
  auto weighted = [](const Array& value, const Array& w) {
    return where(w > 0.0, value * w.astype(value.dtype()), zeros_like(value));
  };
  Tree summed_metrics = Tree::dict();
  Tree maxima = Tree::dict();
  for (const auto& [name, pair] : metrics.entries()) {
    const Array w = pair[1].leaf().astype(DType::f32);
    const Array v = pair[0].leaf().astype(DType::f32);
    const bool is_max = rules.rule(name) == MetricReduction::max;
    if (is_max) maxima.set(name, where(w > 0.0, v, full_like(v, -std::numeric_limits<double>::infinity())));
    summed_metrics.set(name, Tree::list({Tree(is_max ? zeros_like(v) : weighted(v, w)), Tree(w)}));
  }
  Tree local = Tree::dict({{"grads", tree_map([&](const Array& g) { return weighted(g, weight); }, grads)},
                           {"loss", weighted(loss, weight)},
                           {"metrics", summed_metrics},
                           {"collections", collections}});
  if (loss_weight) local.set("weight", weight);
  const Tree total = dist::psum(local, axis, kGradientBucketBytes);
  const Array inv = loss_weight ? where(total["weight"].leaf() > 0.0, 1.0 / maximum(total["weight"].leaf(), 1e-30),
                                        zeros_like(total["weight"].leaf()))
                                : scalar(1.0f);
  Reduced r;
  r.grads = tree_map([&](const Array& g) { return g * inv.astype(g.dtype()); }, total["grads"]);
  r.loss = total["loss"].leaf() * inv;
  r.metrics = Tree::dict();
  for (const auto& [name, pair] : total["metrics"].entries()) {
    const Array sum_w = pair[1].leaf();
    const Array value = maxima.contains(name) ? lax::pmax(maxima[name].leaf(), axis)
                                              : pair[0].leaf() / maximum(sum_w, 1e-30);
    r.metrics.set(name, Tree::list({Tree(value.astype(metrics[name][0].leaf().dtype())), Tree(sum_w)}));
  }
  // The process count is known when tracing: no collective for it.
  const double count = double(axis_size(axis));
  r.collections = tree_map([&](const Array& c) { return (c / count).astype(c.dtype()); }, total["collections"]);
  return r;
}

// The names of compute_loss's metrics ({name: [value, weight]}).
std::vector<std::string> metric_names(const Tree& metrics) {
  std::vector<std::string> names;
  if (metrics.is_dict())
    for (const auto& [name, entry] : metrics.entries()) names.push_back(name);
  return names;
}

// Whether each leaf of `local` (this process's params) is a block of the
// leaf of `global` (the whole params' shapes) at the same place.
std::vector<bool> split_leaves(const Tree& local, const Tree& global) {
  const std::vector<Array> l = tree_leaves(local), g = tree_leaves(global);
  PAX_CHECK(l.size() == g.size(), "sharded train step: the params have ", l.size(), " arrays, the model declares ",
            g.size());
  std::vector<bool> split(l.size());
  for (size_t i = 0; i < l.size(); ++i) split[i] = l[i].shape() != g[i].aval().shape;
  return split;
}

// The leaves of `tree` that `pick` selects, summed over `axis` in one
// bucketed psum ("" : as they are), put back in place.
Tree psum_leaves(const Tree& tree, const std::vector<bool>& pick, bool want, const std::string& axis) {
  if (axis.empty()) return tree;
  std::vector<Array> leaves = tree_leaves(tree);
  std::vector<Tree> chosen;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (pick[i] == want) chosen.emplace_back(leaves[i]);
  if (chosen.empty()) return tree;
  const std::vector<Array> summed = tree_leaves(dist::psum(Tree::list(chosen), axis, kGradientBucketBytes));
  for (size_t i = 0, k = 0; i < leaves.size(); ++i)
    if (pick[i] == want) leaves[i] = summed[k++];
  return tree_unflatten(tree_structure(tree), leaves);
}

// Which leaves of the params (and of their gradients) this process holds as
// blocks: split over the fsdp axis (gathered per layer, so their gradients
// arrive summed over it), and split over the mdl axis (tensor parallelism:
// each process holds its own part, whose gradient is its own). Empty masks
// when the step is not sharded.
struct LeafSplits {
  std::vector<bool> data, mdl, stage;
  std::string data_axis, mdl_axis, stage_axis;
};

// Per leaf, sum(x^2) in f32 (f64 for f64 leaves), of the whole array: a
// block's summed over the axes it is split over (one bucketed psum per axis).
std::vector<Array> whole_squares(const Tree& tree, const LeafSplits& splits) {
  Tree squares = tree_map(
      [](const Array& x) { return sum(square(x.astype(promote_types(optim::moment_dtype(x.dtype()), DType::f32)))); },
      tree);
  if (!splits.data.empty()) squares = psum_leaves(squares, splits.data, true, splits.data_axis);
  if (!splits.mdl.empty()) squares = psum_leaves(squares, splits.mdl, true, splits.mdl_axis);
  if (!splits.stage.empty()) squares = psum_leaves(squares, splits.stage, true, splits.stage_axis);
  return tree_leaves(squares);
}

// `summaries` plus, per group of variables (a layer: a variable's path
// without its name), the L2 norms of its parameters and of their gradients:
// "param_norm/<layer path>", "grad_norm/<layer path>".
// A block's squares are summed over the axes it is split over.
Tree with_norm_summaries(Tree summaries, const Tree& params, const Tree& grads, const LeafSplits& splits) {
  if (!summaries.is_dict()) summaries = Tree::dict();
  const std::vector<std::string> paths = tree_paths(params);
  const std::vector<Array> p = whole_squares(params, splits), g = whole_squares(grads, splits);
  std::map<std::string, std::pair<Array, Array>> squares;  // group -> (sum p^2, sum g^2)
  for (size_t i = 0; i < paths.size(); ++i) {
    const size_t slash = paths[i].rfind('/');
    const std::string group = slash == std::string::npos ? "" : paths[i].substr(0, slash);
    const Array p2 = p[i].astype(DType::f32), g2 = g[i].astype(DType::f32);
    auto [it, fresh] = squares.emplace(group, std::make_pair(p2, g2));
    if (!fresh) it->second = {it->second.first + p2, it->second.second + g2};
  }
  for (const auto& [group, sq] : squares) {
    const std::string name = group.empty() ? "params" : group;
    summaries.set("param_norm/" + name, sqrt(sq.first));
    summaries.set("grad_norm/" + name, sqrt(sq.second));
  }
  return summaries;
}

// The loss of the learner from compute_loss's metrics: sum_k c_k * loss_k.
// Across processes (`axis` set) with `normalise` (several terms, or sharded
// params whose gradients are summed by the gather's derivative), each loss_k
// is scaled by this process's share of its summed weight, so that the psum
// of the losses (and of their gradients) is the global batch's; *loss_weight
// is then unset. Otherwise *loss_weight is the one term's weight and the
// scaling happens after the gradient, in reduce_over.
Array aggregate_loss(const std::vector<LossTerm>& terms, const Tree& metrics, const std::string& model_name,
                     const std::string& axis, bool normalise, std::optional<Array>* loss_weight) {
  Array loss = scalar(0.0f);
  for (const LossTerm& t : terms) {
    PAX_CHECK(metrics.is_dict() && metrics.contains(t.metric), t.setting, " '", t.metric, "' is not a metric of ",
              model_name, "; its metrics: ", metrics.str());
    Array value = nn::metric_value(metrics, t.metric).astype(DType::f32);
    if (normalise) {
      const Array w = stop_gradient(nn::metric_weight(metrics, t.metric).astype(DType::f32));
      const Array total = lax::psum(w, axis);
      value = where(w > 0.0, value * (w / maximum(total, 1e-30)), zeros_like(value));
    }
    loss = loss + value * float(t.coefficient);
  }
  if (!axis.empty() && !normalise) *loss_weight = nn::metric_weight(metrics, terms.front().metric);
  return loss;
}

}  // namespace

struct TrainStep::Impl {
  std::function<std::pair<TrainState, Tree>(TrainState, const Tree&, const Array&)> step;
  std::function<size_t()> traces;
  std::function<size_t(const TrainState&, const Tree&, const Array&)> arena_bytes;
};

// The optimizer of a train step: sharded (fsdp or tp), without the clipping
// (the step clips with the norm over every block), and only one that works
// on blocks.
optim::GradientTransformation step_optimizer(const Learner& learner, const nn::FsdpOptions& fsdp,
                                             const nn::TensorParallelOptions& tp, const nn::PipelineOptions& stage) {
  if (!fsdp.enabled() && !tp.enabled() && !stage.enabled()) return learner.make_optimizer();
  const std::string type = learner.optimizer ? learner.optimizer->type_name() : "";
  std::string axes;
  if (fsdp.enabled())
    axes = "the mesh's data axis of " + std::to_string(fsdp.size) + " (fully sharded data parallelism)";
  if (tp.enabled())
    axes +=
        (axes.empty() ? "" : " and ") + ("the mesh's mdl axis of " + std::to_string(tp.size)) + " (tensor parallelism)";
  if (stage.enabled())
    axes += (axes.empty() ? "" : " and ") + ("the mesh's stage axis of " + std::to_string(stage.size)) +
            " (pipeline parallelism)";
  const auto* optimizer = dynamic_cast<const optim::OptimizerHParams*>(learner.optimizer.get());
  if (optimizer && optimizer->needs_whole_tensors()) {
    std::string usable;
    for (const std::string& name : optim::blockwise_optimizers()) usable += (usable.empty() ? "" : ", ") + name;
    PAX_FAIL(
        "learner.optimizer: ", type,
        " computes statistics over whole tensors (factored moments, trust ratios), but with ", axes,
        " each process holds blocks of them; use one of ", usable,
        ", or a mesh whose data and mdl axes are 1 (replica axis for plain data parallelism) and a stage axis of 1");
  }
  return learner.make_optimizer_without_clipping();
}

TrainStep::TrainStep(const nn::BaseModel& model, const Learner& learner, TrainStepOptions options)
    : model_(model),
      tx_(step_optimizer(learner, options.fsdp, options.tp, options.stage)),
      vn_(options.vn),
      fsdp_(options.fsdp),
      tp_(options.tp),
      stage_(options.stage),
      impl_(std::make_shared<Impl>()) {
  const std::vector<LossTerm> terms = loss_terms(options.loss_aggregator, learner.loss_name);
  const MetricRules rules = metric_rules(options.metrics);
  const bool skip_nonfinite = learner.skip_nonfinite_steps;
  const double max_norm = learner.skip_step_gradient_norm_value;
  const double clip_norm = learner.clip_gradient_norm_to_value;
  const nn::BaseModel* m = &model_;
  optim::GradientTransformation tx = tx_;
  const std::string axis = options.data_parallel_axis;
  const VariationalNoise vn = options.vn;
  const bool summaries_on = options.summaries;
  const nn::FsdpOptions fsdp = options.fsdp;
  const nn::TensorParallelOptions tp = options.tp;
  const nn::PipelineOptions stage = options.stage;
  const bool sharded = fsdp.enabled() || tp.enabled() || stage.enabled();
  PAX_CHECK(!sharded || !axis.empty(), "train step: sharded params (fsdp axis '", fsdp.axis, "', tp axis '", tp.axis,
            "', stage axis '", stage.axis, "') need the data-parallel axis set");
  const std::string replica_axis = options.replica_axis;
  // The params' shapes whole, held under stage (a pipeline stage's layers),
  // and held under stage and tp (the layers' declarations), to tell each
  // split's blocks: stage's from the whole, tp's from stage's, fsdp's from
  // tp's.
  const Tree global_params = sharded ? global_state_shapes()["params"] : Tree();
  const Tree stage_params = stage.enabled() ? state_shapes({}, {}, stage)["params"] : global_params;
  const Tree mdl_params = tp.enabled() ? state_shapes({}, tp, stage)["params"] : stage_params;
  const std::vector<bool> stage_split = stage.enabled() ? split_leaves(stage_params, global_params)
                                                        : std::vector<bool>{};
  const std::vector<bool> mdl_split = tp.enabled() ? split_leaves(mdl_params, stage_params) : std::vector<bool>{};
  // Losses are normalised before the gradient when the gradients come out
  // summed (several terms; blocks, whose gather's derivative sums them).
  const bool normalise = !axis.empty() && (terms.size() > 1 || sharded);
  auto step = [m, tx, terms, rules, vn, skip_nonfinite, max_norm, clip_norm, axis, replica_axis, summaries_on, fsdp, tp,
               stage, sharded, mdl_params, mdl_split, stage_split,
               normalise](const TrainState& state, const Tree& batch, const Array& key) {
    std::vector<std::string> collections = mutable_collections(state);
    std::optional<Array> loss_weight;  // set by aggregate_loss
    // Each block draws its own noise.
    const Array noise_key =
        random::fold_in(fsdp.enabled() ? random::fold_in(key, uint32_t(fsdp.index)) : key, kNoiseStream);
    auto loss_fn = [&](const Tree& params) {
      TrainState with_params = state;
      with_params.params = vn.add_noise(params, state.step, noise_key, mdl_split, tp, stage_split, stage);
      nn::ApplyOptions options{.rngs = {{"dropout", key}},
                               .mutable_collections = collections,
                               .train = true,
                               .summaries = summaries_on,
                               .fsdp = fsdp,
                               .tp = tp,
                               .stage = stage};
      auto out = nn::apply_with(
          *m, model_variables(with_params), [&](const nn::BaseModel& model) { return model.fprop_batch(batch).first; },
          options);
      const Tree& metrics = out.output;
      Array aux = out.aux_loss.astype(DType::f32);
      if (normalise) aux = aux / float(axis_size(axis));  // the losses are normalised already
      Array loss = aggregate_loss(terms, metrics, m->type_name(), axis, normalise, &loss_weight) + aux;
      return std::make_pair(loss, std::make_pair(metrics, std::make_pair(out.updates, out.summaries)));
    };
    auto [loss_aux, grads] = value_and_grad(loss_fn, has_aux)(state.params);
    auto [loss, aux] = loss_aux;
    auto [metrics, written] = aux;
    auto [updated_collections, summaries] = written;
    // At the first trace: a metric key the model does not report would log nothing.
    check_metric_keys(rules, metric_names(metrics), m->type_name());
    LeafSplits splits;
    if (fsdp.enabled()) splits.data = split_leaves(state.params, mdl_params), splits.data_axis = fsdp.axis;
    if (tp.enabled()) splits.mdl = mdl_split, splits.mdl_axis = tp.axis;
    if (stage.enabled()) splits.stage = stage_split, splits.stage_axis = stage.axis;
    if (!axis.empty()) {
      Reduced r =
          reduce_over(axis, loss_weight, rules, sharded ? Tree::dict() : grads, metrics, updated_collections, loss);
      // fsdp's blocks come summed over its axis; the rest of the sum is here
      // (tp's and stage's blocks are summed over the batch axes like whole
      // arrays).
      if (fsdp.enabled()) {
        grads = psum_leaves(psum_leaves(grads, splits.data, false, axis), splits.data, true, replica_axis);
      } else if (tp.enabled() || stage.enabled()) {
        grads = dist::psum(grads, axis, kGradientBucketBytes);  // normalised already
      } else {
        grads = r.grads;
      }
      metrics = r.metrics;
      updated_collections = r.collections;
      loss = r.loss;
    }
    Array grad_norm;
    if (sharded) {
      Array total = scalar(0.0f);
      for (const Array& sq : whole_squares(grads, splits)) total = total + sq.astype(DType::f32);
      grad_norm = sqrt(total);
    } else {
      grad_norm = optim::global_norm(grads);
    }
    // Under fsdp the clipping (as optim::clip_by_global_norm, with the norm
    // over every block) is the step's; the summaries see unclipped gradients
    // either way.
    Tree update_grads = grads;
    if (sharded && clip_norm > 0) {
      const Array keep = grad_norm < clip_norm;
      update_grads = tree_map(
          [&](const Array& g) {
            return where(keep, g, (g / grad_norm.astype(g.dtype())) * clip_norm).astype(g.dtype());
          },
          grads);
    }
    const Array finite = logical_and(isfinite(grad_norm), isfinite(loss));
    Array ok = scalar(true);
    if (skip_nonfinite) ok = logical_and(ok, finite);
    if (max_norm > 0) ok = logical_and(ok, grad_norm <= max_norm);
    // Collections the forward pass wrote replace their old values.
    Tree new_extra = state.extra;
    if (updated_collections.is_dict())
      for (const auto& [name, collection] : updated_collections.entries()) new_extra.set(name, collection);
    TrainState updated = state.apply_gradients(tx, update_grads, new_extra);
    TrainState next = updated;
    next.params = optim::tree_select(ok, updated.params, state.params, "train step params");
    next.opt_state = optim::tree_select(ok, updated.opt_state, state.opt_state, "train step optimizer state");
    next.extra = optim::tree_select(ok, updated.extra, state.extra, "train step collections");
    if (summaries_on) summaries = with_norm_summaries(summaries, state.params, grads, splits);
    Tree out = Tree::dict({{"metrics", metrics},
                           {"summaries", summaries},
                           {"loss", loss},
                           {"grad_norm", grad_norm.astype(DType::f32)},
                           {"skipped", logical_not(ok).astype(DType::f32)},
                           {"nonfinite", logical_not(finite).astype(DType::f32)}});
    return std::make_pair(next, out);
  };
  auto jitted = std::make_shared<decltype(jit(step))>(jit(step, {.donate_argnums = {0}, .name = "train_step"}));
  impl_->step = [jitted](TrainState state, const Tree& batch, const Array& key) {
    return (*jitted)(std::move(state), batch, key);
  };
  impl_->traces = [jitted] { return jitted->num_traces(); };
  impl_->arena_bytes = [jitted](const TrainState& state, const Tree& batch, const Array& key) {
    return jitted->lower(state, batch, key).compile().executable().memory().arena_bytes;
  };
}

TrainState TrainStep::init_state(const Array& key) const {
  // Sharded: one compiled program draws each whole variable, keeps this
  // process's block and frees the rest before the next (its memory plan), so
  // the whole model never exists at once.
  const nn::BaseModel& model = model_;
  const nn::FsdpOptions fsdp = fsdp_;
  const nn::TensorParallelOptions tp = tp_;
  const nn::PipelineOptions stage = stage_;
  Tree variables =
      sharded() ? jit([&model, fsdp, tp, stage](const Array& k) { return nn::init_sharded(model, k, fsdp, tp, stage); },
                      {.name = "init_sharded"})(key)
                : nn::init(model_, key);
  Tree params = variables.contains("params") ? variables["params"] : Tree::dict();
  if (vn_.enabled()) vn_.selection(params);  // a regex that selects nothing fails before training
  Tree extra = Tree::dict();
  for (const auto& [name, collection] : variables.entries())
    if (name != "params") extra.set(name, collection);
  return TrainState::create(params, tx_, extra);
}

Tree TrainStep::global_state_shapes() const { return state_shapes({}, {}); }

Tree TrainStep::state_shapes(const nn::FsdpOptions& fsdp, const nn::TensorParallelOptions& tp,
                             const nn::PipelineOptions& stage) const {
  // The same optimizer state's structure, from the params held so.
  return eval_shape([&](const Array& key) {
    Tree variables = nn::init_sharded(model_, key, fsdp, tp, stage);
    Tree params = variables.contains("params") ? variables["params"] : Tree::dict();
    Tree extra = Tree::dict();
    for (const auto& [name, collection] : variables.entries())
      if (name != "params") extra.set(name, collection);
    return TrainState::create(params, tx_, extra).to_tree();
  })(random::key(0));
}

namespace {

// The one dimension where `a` and `b` differ (-1: none).
int64_t split_dimension(const Shape& a, const Shape& b, const std::string& what) {
  int64_t dim = -1;
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (a[d] == b[d]) continue;
    PAX_CHECK(dim < 0, what, ": ", b, " differs from ", a, " in more than one dimension");
    dim = d;
  }
  return dim;
}

}  // namespace

dist::ShardSpecs TrainStep::state_specs() const {
  // Whole, held under stage alone (a pipeline stage's layers), under stage
  // and tp (tp's blocks of those over mdl), held (fsdp's blocks of those,
  // along tp's dimension: nn::held_spec). Stage's split is the outer one
  // where tp or fsdp split its blocks too.
  const Tree global = global_state_shapes();
  const Tree staged = stage_.enabled() ? state_shapes({}, {}, stage_) : global;
  const Tree mdl = tp_.enabled() ? state_shapes({}, tp_, stage_) : staged;
  const Tree local = state_shapes(fsdp_, tp_, stage_);
  const std::vector<std::string> paths = tree_paths(global);
  const std::vector<Array> g = tree_leaves(global), st = tree_leaves(staged), m = tree_leaves(mdl),
                           l = tree_leaves(local);
  PAX_CHECK(g.size() == l.size() && g.size() == m.size() && g.size() == st.size(), "train state: ", l.size(),
            " arrays, the whole state has ", g.size());
  dist::ShardSpecs specs;
  for (size_t i = 0; i < g.size(); ++i) {
    const std::string what = "train state " + paths[i];
    const Shape &whole = g[i].aval().shape, &stage_part = st[i].aval().shape, &part = m[i].aval().shape,
                &mine = l[i].aval().shape;
    const int64_t ds = split_dimension(whole, stage_part, what), dm = split_dimension(stage_part, part, what),
                  df = split_dimension(part, mine, what);
    if (ds < 0 && dm < 0 && df < 0) continue;
    if (dm < 0 && df < 0) {  // a stage's layers, whole over mdl and data
      dist::ShardSpec spec{whole, ds, stage_.size, stage_.index, {stage_.axis}};
      spec.check(what);
      specs[paths[i]] = spec;
      continue;
    }
    PAX_CHECK(dm < 0 || df < 0 || dm == df, what, ": split over mdl along dimension ", dm, " and over data along ", df,
              " (the two splits must nest along one dimension)");
    dist::ShardSpec spec{whole, dm >= 0 ? dm : df};
    PAX_CHECK(ds != spec.dim, what, ": split over stage and over mdl or data along one dimension, ", ds);
    spec.count = stage_part[spec.dim] / mine[spec.dim];
    if (ds >= 0) {
      spec.outer_dim = ds, spec.outer_count = stage_.size, spec.outer_index = stage_.index;
      spec.outer_axis = stage_.axis;
    }
    if (dm >= 0 && df >= 0) {
      spec.index = tp_.index * fsdp_.size + fsdp_.index;
      spec.axes = {tp_.axis, fsdp_.axis};
    } else if (dm >= 0) {
      spec.index = tp_.index;
      spec.axes = {tp_.axis};
    } else {
      spec.index = fsdp_.index;
      spec.axes = {fsdp_.axis};
    }
    spec.check(what);
    specs[paths[i]] = spec;
  }
  return specs;
}

std::pair<TrainState, Tree> TrainStep::operator()(TrainState state, const Tree& batch, const Array& key) const {
  return impl_->step(std::move(state), batch, key);
}

size_t TrainStep::num_traces() const { return impl_->traces(); }

size_t TrainStep::intermediate_bytes(const TrainState& state, const Tree& batch, const Array& key) const {
  return impl_->arena_bytes(state, batch, key);
}

struct EvalStep::Impl {
  std::function<std::pair<Tree, Tree>(const Tree&, const Tree&)> step;
  std::function<size_t(const Tree&, const Tree&)> arena_bytes;
};

EvalStep::EvalStep(const nn::BaseModel& model, const nn::FsdpOptions& fsdp, const nn::TensorParallelOptions& tp,
                   const nn::PipelineOptions& stage)
    : impl_(std::make_shared<Impl>()) {
  const nn::BaseModel* m = &model;
  auto step = [m, fsdp, tp, stage](const Tree& variables, const Tree& batch) {
    return nn::apply_with(*m, variables, [&](const nn::BaseModel& model) { return model.fprop_batch(batch); },
                          {.summaries = false, .fsdp = fsdp, .tp = tp, .stage = stage})
        .output;
  };
  auto jitted = std::make_shared<decltype(jit(step))>(jit(step, {.name = "eval_step"}));
  impl_->step = [jitted](const Tree& variables, const Tree& batch) { return (*jitted)(variables, batch); };
  impl_->arena_bytes = [jitted](const Tree& variables, const Tree& batch) {
    return jitted->lower(variables, batch).compile().executable().memory().arena_bytes;
  };
}

size_t EvalStep::intermediate_bytes(const Tree& variables, const Tree& batch) const {
  return impl_->arena_bytes(variables, batch);
}

std::pair<Tree, Tree> EvalStep::operator()(const Tree& variables, const Tree& batch) const {
  return impl_->step(variables, batch);
}

Tree decode_batch(const nn::BaseModel& model, const Tree& variables, const Tree& batch, const Array& key) {
  nn::ApplyOptions options{.rngs = {{"decode", key}}, .mutable_collections = {nn::kDecoderCache}, .summaries = false};
  return nn::apply_with(
             model, variables, [&](const nn::BaseModel& m) { return m.decode(batch); }, options)
      .output;
}

Tree decode_state_shapes(const nn::BaseModel& model, const Tree& variables, const Tree& batch) {
  return eval_shape([&](const Tree& vars, const Tree& b) {
    nn::ApplyOptions options{.mutable_collections = {nn::kDecoderCache}, .summaries = false};
    return nn::apply_with(
               model, vars,
               [&](const nn::BaseModel& m) {
                 m.init_decode_states(b);
                 return 0;
               },
               options)
        .updates;
  })(variables, batch);
}

}  // namespace pax::train

// The train step: the model's loss on this process's batch differentiated
// with respect to its params, summed into the global batch's over the
// processes, checked, and turned into updates by the learner's optimizer,
// all inside one jitted program. Read TrainStep::TrainStep's `step` top to
// bottom for what happens to a batch.
#include "pax/train/steps.h"

#include <optional>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/interp/interpreter.h"
#include "pax/nn/layer.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/optim/tree_utils.h"
#include "pax/train/step_sums.h"

namespace pax::train {

namespace {

// fold_in data of the variational noise's stream (the step key itself is dropout's).
constexpr uint32_t kNoiseStream = 0x766e;

// What the step's functions read: fixed when the step is built.
struct StepContext {
  const nn::BaseModel* model = nullptr;
  optim::GradientTransformation tx;
  std::vector<LossTerm> terms;
  MetricRules rules;
  VariationalNoise vn;
  bool summaries = true;
  bool skip_nonfinite = true;
  double max_norm = 0;   // skip a step whose gradient norm is above this (0: never)
  double clip_norm = 0;  // clipping inside the step (sharded: the norm over every block)
  nn::ShardingPlan plan;
  // Which params leaves this process holds as blocks, per axis of the plan.
  nn::LeafSplits splits;
  // Losses are normalised over the processes before the gradient when the
  // gradients come out summed (several loss terms; blocks, whose gather's
  // derivative sums them).
  bool normalise = false;
  const std::string& batch_axis() const { return plan.batch_axis; }
};

// The forward and backward pass on this process's batch.
struct LossAndGradients {
  Array loss;
  Tree grads;                        // of the loss by the params this process holds
  Tree metrics;                      // compute_loss's {name: [value, weight]}
  Tree collections;                  // the collections the forward pass wrote
  Tree summaries;                    // the layers' add_summary values
  std::optional<Array> loss_weight;  // this process's weight of a one-metric loss (see aggregate_loss)
};

// The names of the collections other than params (written during training).
std::vector<std::string> mutable_collections(const TrainState& state) {
  std::vector<std::string> names;
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) names.push_back(name);
  return names;
}

// The names of compute_loss's metrics ({name: [value, weight]}).
std::vector<std::string> metric_names(const Tree& metrics) {
  std::vector<std::string> names;
  if (metrics.is_dict())
    for (const auto& [name, entry] : metrics.entries()) names.push_back(name);
  return names;
}

// The model's loss and its gradient on `batch`: the params with variational
// noise, the forward pass in training mode (dropout keys from `key`), the
// learner's loss from the metrics plus the layers' auxiliary losses.
LossAndGradients loss_and_gradients(const StepContext& ctx, const TrainState& state, const Tree& batch,
                                    const Array& key) {
  const nn::ShardingPlan& plan = ctx.plan;
  const std::vector<std::string> collections = mutable_collections(state);
  std::optional<Array> loss_weight;  // set by aggregate_loss
  // Each fsdp block draws its own noise.
  const Array noise_key =
      random::fold_in(plan.fsdp.enabled() ? random::fold_in(key, uint32_t(plan.fsdp.index)) : key, kNoiseStream);
  struct Aux {
    Tree metrics, collections, summaries;
  };
  auto loss_fn = [&](const Tree& params) {
    TrainState noisy = state;
    noisy.params = ctx.vn.add_noise(params, state.step, noise_key, plan, ctx.splits);
    const nn::ApplyOptions options{.rngs = {{"dropout", key}},
                                   .mutable_collections = collections,
                                   .train = true,
                                   .summaries = ctx.summaries,
                                   .sharding = plan.variables_only()};
    auto out = nn::apply_with(
        *ctx.model, model_variables(noisy), [&](const nn::BaseModel& model) { return model.fprop_batch(batch).first; },
        options);
    Array aux_loss = out.aux_loss.astype(DType::f32);
    if (ctx.normalise) aux_loss = aux_loss / float(axis_size(ctx.batch_axis()));
    const Array loss =
        aggregate_loss(ctx.terms, out.output, ctx.model->type_name(), ctx.batch_axis(), ctx.normalise, &loss_weight) +
        aux_loss;
    return std::make_pair(
        loss, Tree::dict({{"metrics", out.output}, {"collections", out.updates}, {"summaries", out.summaries}}));
  };
  auto [loss_aux, grads] = value_and_grad(loss_fn, has_aux)(state.params);
  const Array& loss = loss_aux.first;
  const Tree& aux = loss_aux.second;
  // At the first trace: a metric key the model does not report would log nothing.
  check_metric_keys(ctx.rules, metric_names(aux["metrics"]), ctx.model->type_name());
  return {loss, grads, aux["metrics"], aux["collections"], aux["summaries"], loss_weight};
}

// The global batch's loss, metrics, collections and gradients from every
// process's own (nothing to do on one process). fsdp's blocks come summed
// over its axis by the gather's derivative; the rest of their sum is here.
// tp's and stage's blocks are summed over the batch axes like whole arrays.
LossAndGradients over_global_batch(const StepContext& ctx, LossAndGradients local) {
  const nn::ShardingPlan& plan = ctx.plan;
  if (ctx.batch_axis().empty()) return local;
  GlobalBatch global = sum_over_batch(ctx.batch_axis(), local.loss_weight, ctx.rules,
                                      plan.sharded() ? Tree::dict() : local.grads, local.metrics, local.collections,
                                      local.loss);
  if (plan.fsdp.enabled()) {
    const std::vector<bool>& blocks = ctx.splits.data;
    global.grads =
        psum_leaves(psum_leaves(local.grads, blocks, false, ctx.batch_axis()), blocks, true, plan.replica_axis);
  } else if (plan.sharded()) {
    global.grads = dist::psum(local.grads, ctx.batch_axis(), kGradientBucketBytes);  // normalised already
  }
  return {global.loss, global.grads, global.metrics, global.collections, local.summaries, std::nullopt};
}

// The norm of the gradient of every parameter, whole (a block's squares
// summed over the axes it is split over).
Array gradient_norm(const StepContext& ctx, const Tree& grads) {
  if (!ctx.plan.sharded()) return optim::global_norm(grads);
  Array total = scalar(0.0f);
  for (const Array& sq : whole_squares(grads, ctx.splits, ctx.plan)) total = total + sq.astype(DType::f32);
  return sqrt(total);
}

// The gradients the optimizer sees: under sharding, clipped here as
// optim::clip_by_global_norm would, with the norm over every block (whole,
// the learner's optimizer clips them itself).
Tree clipped(const StepContext& ctx, const Tree& grads, const Array& norm) {
  if (!ctx.plan.sharded() || ctx.clip_norm <= 0) return grads;
  const Array keep = norm < ctx.clip_norm;
  return tree_map(
      [&](const Array& g) { return where(keep, g, (g / norm.astype(g.dtype())) * ctx.clip_norm).astype(g.dtype()); },
      grads);
}

// Whether the step's loss and gradients are finite, and whether its update
// is applied (the learner's skip checks).
struct StepChecks {
  Array finite, apply;
};
StepChecks step_checks(const StepContext& ctx, const Array& loss, const Array& norm) {
  StepChecks c{logical_and(isfinite(norm), isfinite(loss)), scalar(true)};
  if (ctx.skip_nonfinite) c.apply = logical_and(c.apply, c.finite);
  if (ctx.max_norm > 0) c.apply = logical_and(c.apply, norm <= ctx.max_norm);
  return c;
}

// The optimizer's update of `state` with `grads`, and the collections the
// forward pass wrote in place of their old values; `state` itself where
// `apply` is false.
TrainState updated_state(const StepContext& ctx, const TrainState& state, const Tree& grads, const Tree& written,
                         const Array& apply) {
  Tree extra = state.extra;
  if (written.is_dict())
    for (const auto& [name, collection] : written.entries()) extra.set(name, collection);
  const TrainState updated = state.apply_gradients(ctx.tx, grads, extra);
  TrainState next = updated;
  next.params = optim::tree_select(apply, updated.params, state.params, "train step params");
  next.opt_state = optim::tree_select(apply, updated.opt_state, state.opt_state, "train step optimizer state");
  next.extra = optim::tree_select(apply, updated.extra, state.extra, "train step collections");
  return next;
}

// The step's outputs (steps.h): metrics, summaries (with the per-layer norms
// of the params before the update and of the unclipped gradients), loss,
// gradient norm, and whether the update was skipped or not finite.
Tree step_outputs(const StepContext& ctx, const LossAndGradients& global, const Tree& params, const Array& norm,
                  const StepChecks& checks) {
  Tree summaries = global.summaries;
  if (ctx.summaries) summaries = with_norm_summaries(summaries, params, global.grads, ctx.splits, ctx.plan);
  return Tree::dict({{"metrics", global.metrics},
                     {"summaries", summaries},
                     {"loss", global.loss},
                     {"grad_norm", norm.astype(DType::f32)},
                     {"skipped", logical_not(checks.apply).astype(DType::f32)},
                     {"nonfinite", logical_not(checks.finite).astype(DType::f32)}});
}

// The optimizer of a train step: under sharding without the clipping (the
// step clips with the norm over every block), and only one that works on
// blocks.
optim::GradientTransformation step_optimizer(const Learner& learner, const nn::ShardingPlan& plan) {
  if (!plan.sharded()) return learner.make_optimizer();
  const auto* optimizer = dynamic_cast<const optim::OptimizerHParams*>(learner.optimizer.get());
  if (optimizer && optimizer->needs_whole_tensors()) {
    std::string usable;
    for (const std::string& name : optim::blockwise_optimizers()) usable += (usable.empty() ? "" : ", ") + name;
    PAX_FAIL(
        "learner.optimizer: ", optimizer->type_name(),
        " computes statistics over whole tensors (factored moments, trust ratios), but with ", plan.describe_splits(),
        " each process holds blocks of them; use one of ", usable,
        ", or a mesh whose data and mdl axes are 1 (replica axis for plain data parallelism) and a stage axis of 1");
  }
  return learner.make_optimizer_without_clipping();
}

}  // namespace

struct TrainStep::Impl {
  std::function<std::pair<TrainState, Tree>(TrainState, const Tree&, const Array&)> step;
  std::function<size_t()> traces;
  std::function<size_t(const TrainState&, const Tree&, const Array&)> arena_bytes;
};

TrainStep::TrainStep(const nn::BaseModel& model, const Learner& learner, TrainStepOptions options)
    : model_(model),
      tx_(step_optimizer(learner, options.sharding)),
      vn_(options.vn),
      plan_(options.sharding),
      impl_(std::make_shared<Impl>()) {
  const nn::ShardingPlan& plan = plan_;
  PAX_CHECK(!plan.sharded() || !plan.batch_axis.empty(), "train step: sharded params (fsdp axis '", plan.fsdp.axis,
            "', tp axis '", plan.tp.axis, "', stage axis '", plan.stage.axis, "') need the batch axis set");
  auto ctx = std::make_shared<StepContext>();
  ctx->model = &model_;
  ctx->tx = tx_;
  ctx->terms = loss_terms(options.loss_aggregator, learner.loss_name);
  ctx->rules = metric_rules(options.metrics);
  ctx->vn = options.vn;
  ctx->summaries = options.summaries;
  ctx->skip_nonfinite = learner.skip_nonfinite_steps;
  ctx->max_norm = learner.skip_step_gradient_norm_value;
  ctx->clip_norm = learner.clip_gradient_norm_to_value;
  ctx->plan = plan;
  ctx->normalise = !plan.batch_axis.empty() && (ctx->terms.size() > 1 || plan.sharded());
  if (plan.sharded()) {
    // The params' shapes whole, held under stage (a pipeline stage's
    // layers), under stage and tp (the layers' declarations), and as this
    // process holds them: stage's blocks are told from the whole, tp's from
    // stage's, fsdp's from tp's.
    const Tree whole = global_state_shapes()["params"];
    const Tree staged = state_shapes({.stage = plan.stage})["params"];
    const Tree mdl = state_shapes({.tp = plan.tp, .stage = plan.stage})["params"];
    if (plan.stage.enabled()) ctx->splits.stage = split_leaves(staged, whole);
    if (plan.tp.enabled()) ctx->splits.mdl = split_leaves(mdl, staged);
    if (plan.fsdp.enabled()) ctx->splits.data = split_leaves(state_shapes(plan)["params"], mdl);
  }
  // One step on this process's batch, as the learner and the plan say.
  auto step = [ctx](const TrainState& state, const Tree& batch, const Array& key) {
    const LossAndGradients local = loss_and_gradients(*ctx, state, batch, key);
    const LossAndGradients global = over_global_batch(*ctx, local);
    const Array norm = gradient_norm(*ctx, global.grads);
    const StepChecks checks = step_checks(*ctx, global.loss, norm);
    TrainState next = updated_state(*ctx, state, clipped(*ctx, global.grads, norm), global.collections, checks.apply);
    return std::make_pair(std::move(next), step_outputs(*ctx, global, state.params, norm, checks));
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
  const nn::ShardingPlan plan = plan_.variables_only();
  Tree variables = plan.sharded() ? jit([&model, plan](const Array& k) { return nn::init_sharded(model, k, plan); },
                                        {.name = "init_sharded"})(key)
                                  : nn::init(model_, key);
  Tree params = variables.contains("params") ? variables["params"] : Tree::dict();
  if (vn_.enabled()) vn_.selection(params);  // a regex that selects nothing fails before training
  Tree extra = Tree::dict();
  for (const auto& [name, collection] : variables.entries())
    if (name != "params") extra.set(name, collection);
  return TrainState::create(params, tx_, extra);
}

Tree TrainStep::global_state_shapes() const { return state_shapes({}); }

Tree TrainStep::state_shapes(const nn::ShardingPlan& plan) const {
  // The same optimizer state's structure, from the params held so.
  return eval_shape([&](const Array& key) {
    Tree variables = nn::init_sharded(model_, key, plan);
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
  const nn::FsdpOptions& fsdp_ = plan_.fsdp;
  const nn::TensorParallelOptions& tp_ = plan_.tp;
  const nn::PipelineOptions& stage_ = plan_.stage;
  const Tree global = global_state_shapes();
  const Tree staged = stage_.enabled() ? state_shapes({.stage = stage_}) : global;
  const Tree mdl = tp_.enabled() ? state_shapes({.tp = tp_, .stage = stage_}) : staged;
  const Tree local = state_shapes(plan_);
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
    if (dm >= 0 && df >= 0 && dm != df) {  // two dimensions: mdl's split outer, data's inside each block
      PAX_CHECK(ds < 0, what,
                ": split over stage, mdl and data along three dimensions (one more than a checkpoint "
                "records)");
      dist::ShardSpec spec{whole, df, fsdp_.size, fsdp_.index, {fsdp_.axis}};
      spec.outer_dim = dm, spec.outer_count = tp_.size, spec.outer_index = tp_.index, spec.outer_axis = tp_.axis;
      spec.check(what);
      specs[paths[i]] = spec;
      continue;
    }
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

}  // namespace pax::train

// Train, eval and decode steps: the model's loss differentiated with respect
// to its params, checked, and turned into updates by the learner's optimizer,
// all inside one jitted program.
#include "pax/train/steps.h"

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/interp/interpreter.h"
#include "pax/nn/layer.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"

namespace pax::train {

Tree model_variables(const TrainState& state) {
  Tree vars = Tree::dict({{"params", state.params}});
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) vars.set(name, collection);
  return vars;
}

namespace {

// Names of the collections other than params (written during training).
std::vector<std::string> mutable_collections(const TrainState& state) {
  std::vector<std::string> names;
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) names.push_back(name);
  return names;
}

// The global batch's gradients, metrics and written collections from every
// process's own: one psum of (gradient * loss weight, loss weight, metric
// value * weight, metric weight, collections), then the weighted means.
struct Reduced {
  Tree grads, metrics, collections;
  Array loss;
};

Reduced reduce_over(const std::string& axis, const std::string& loss_name, const Tree& grads, const Tree& metrics,
                    const Tree& collections, const Array& loss) {
  const Array weight = nn::metric_weight(metrics, loss_name).astype(DType::f32);
  // value * w, and 0 where w is 0: a process with no real example may have
  // NaN gradients and loss, a metric of weight 0 a NaN value; they add nothing.
  auto weighted = [](const Array& value, const Array& w) {
    return where(w > 0.0, value * w.astype(value.dtype()), zeros_like(value));
  };
  Tree weighted_metrics = Tree::dict();
  for (const auto& [name, pair] : metrics.entries()) {
    const Array w = pair[1].leaf().astype(DType::f32);
    weighted_metrics.set(name, Tree::list({Tree(weighted(pair[0].leaf().astype(DType::f32), w)), Tree(w)}));
  }
  Tree local = Tree::dict({{"grads", tree_map([&](const Array& g) { return weighted(g, weight); }, grads)},
                           {"loss", weighted(loss, weight)},
                           {"metrics", weighted_metrics},
                           {"collections", collections}});
  const Tree total = dist::psum(local, axis);
  const Array total_weight = total["metrics"][loss_name][1].leaf();  // the loss weight, summed
  const Array inv = where(total_weight > 0.0, 1.0 / maximum(total_weight, 1e-30), zeros_like(total_weight));
  Reduced r;
  r.grads = tree_map([&](const Array& g) { return g * inv.astype(g.dtype()); }, total["grads"]);
  r.loss = total["loss"].leaf() * inv;
  r.metrics = Tree::dict();
  for (const auto& [name, pair] : total["metrics"].entries()) {
    const Array sum_w = pair[1].leaf();
    const Array mean = pair[0].leaf() / maximum(sum_w, 1e-30);
    r.metrics.set(name, Tree::list({Tree(mean.astype(metrics[name][0].leaf().dtype())), Tree(sum_w)}));
  }
  // The process count is known when tracing: no collective for it.
  const double count = double(axis_size(axis));
  r.collections = tree_map([&](const Array& c) { return (c / count).astype(c.dtype()); }, total["collections"]);
  return r;
}

}  // namespace

struct TrainStep::Impl {
  std::function<std::pair<TrainState, Tree>(TrainState, const Tree&, const Array&)> step;
  std::function<size_t()> traces;
  std::function<size_t(const TrainState&, const Tree&, const Array&)> arena_bytes;
};

TrainStep::TrainStep(const nn::BaseModel& model, const Learner& learner, TrainStepOptions options)
    : model_(model), tx_(learner.make_optimizer()), impl_(std::make_shared<Impl>()) {
  const std::string loss_name = learner.loss_name;
  const bool skip_nonfinite = learner.skip_nonfinite_steps;
  const double max_norm = learner.skip_step_gradient_norm_value;
  const nn::BaseModel* m = &model_;
  optim::GradientTransformation tx = tx_;
  const std::string axis = options.data_parallel_axis;
  auto step = [m, tx, loss_name, skip_nonfinite, max_norm, axis](const TrainState& state, const Tree& batch,
                                                                 const Array& key) {
    std::vector<std::string> collections = mutable_collections(state);
    auto loss_fn = [&](const Tree& params) {
      TrainState with_params = state;
      with_params.params = params;
      nn::ApplyOptions options{.rngs = {{"dropout", key}}, .mutable_collections = collections, .train = true};
      auto out = nn::apply_with(
          *m, model_variables(with_params), [&](const nn::BaseModel& model) { return model.fprop_batch(batch).first; },
          options);
      const Tree& metrics = out.output;
      PAX_CHECK(metrics.is_dict() && metrics.contains(loss_name), "learner.loss_name '", loss_name,
                "' is not a metric of ", m->type_name(), "; its metrics: ", metrics.str());
      Array loss = nn::metric_value(metrics, loss_name).astype(DType::f32) + out.aux_loss.astype(DType::f32);
      return std::make_pair(loss, std::make_pair(metrics, out.updates));
    };
    auto [loss_aux, grads] = value_and_grad(loss_fn, has_aux)(state.params);
    auto [loss, aux] = loss_aux;
    auto [metrics, updated_collections] = aux;
    if (!axis.empty()) {
      PAX_CHECK(metrics.is_dict(), "data-parallel train step: the metrics of ", m->type_name(), " are not a dict");
      Reduced r = reduce_over(axis, loss_name, grads, metrics, updated_collections, loss);
      grads = r.grads;
      metrics = r.metrics;
      updated_collections = r.collections;
      loss = r.loss;
    }
    Array grad_norm = optim::global_norm(grads);
    const Array finite = logical_and(isfinite(grad_norm), isfinite(loss));
    Array ok = scalar(true);
    if (skip_nonfinite) ok = logical_and(ok, finite);
    if (max_norm > 0) ok = logical_and(ok, grad_norm <= max_norm);
    // Collections the forward pass wrote replace their old values.
    Tree new_extra = state.extra;
    if (updated_collections.is_dict())
      for (const auto& [name, collection] : updated_collections.entries()) new_extra.set(name, collection);
    TrainState updated = state.apply_gradients(tx, grads, new_extra);
    TrainState next = updated;
    next.params = optim::tree_select(ok, updated.params, state.params, "train step params");
    next.opt_state = optim::tree_select(ok, updated.opt_state, state.opt_state, "train step optimizer state");
    next.extra = optim::tree_select(ok, updated.extra, state.extra, "train step collections");
    Tree out = Tree::dict({{"metrics", metrics},
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
  Tree variables = nn::init(model_, key);
  Tree params = variables.contains("params") ? variables["params"] : Tree::dict();
  Tree extra = Tree::dict();
  for (const auto& [name, collection] : variables.entries())
    if (name != "params") extra.set(name, collection);
  return TrainState::create(params, tx_, extra);
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

EvalStep::EvalStep(const nn::BaseModel& model) : impl_(std::make_shared<Impl>()) {
  const nn::BaseModel* m = &model;
  auto step = [m](const Tree& variables, const Tree& batch) {
    return nn::apply_with(*m, variables, [&](const nn::BaseModel& model) { return model.fprop_batch(batch); }).output;
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
  nn::ApplyOptions options{.rngs = {{"decode", key}}, .mutable_collections = {nn::kDecoderCache}};
  return nn::apply_with(
             model, variables, [&](const nn::BaseModel& m) { return m.decode(batch); }, options)
      .output;
}

Tree decode_state_shapes(const nn::BaseModel& model, const Tree& variables, const Tree& batch) {
  return eval_shape([&](const Tree& vars, const Tree& b) {
    nn::ApplyOptions options{.mutable_collections = {nn::kDecoderCache}};
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

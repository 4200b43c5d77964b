// The eval and decode steps: the model's forward pass in evaluation mode
// (jitted), and decoding with the KV cache (eager); and the variables a
// TrainState gives the model.
#include "pax/train/steps.h"

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/nn/layer.h"

namespace pax::train {

Tree model_variables(const TrainState& state) {
  Tree vars = Tree::dict({{"params", state.params}});
  if (state.extra.is_dict())
    for (const auto& [name, collection] : state.extra.entries()) vars.set(name, collection);
  return vars;
}

struct EvalStep::Impl {
  std::function<Tree(const Tree&, const Tree&)> step;
  std::function<size_t(const Tree&, const Tree&)> arena_bytes;
};

EvalStep::EvalStep(const nn::BaseModel& model, const nn::ShardingPlan& plan, bool summaries)
    : impl_(std::make_shared<Impl>()) {
  const nn::BaseModel* m = &model;
  const nn::ShardingPlan variables_plan = plan.variables_only();
  auto step = [m, variables_plan, summaries](const Tree& variables, const Tree& batch) {
    auto out = nn::apply_with(*m, variables, [&](const nn::BaseModel& model) { return model.fprop_batch(batch); },
                              {.summaries = summaries, .sharding = variables_plan});
    return Tree::dict({{"metrics", out.output.first},
                       {"per_example", out.output.second},
                       {"summaries", summaries ? out.summaries : Tree::dict()}});
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

EvalStep::Outputs EvalStep::evaluate(const Tree& variables, const Tree& batch) const {
  const Tree out = impl_->step(variables, batch);
  return {out["metrics"], out["per_example"], out["summaries"]};
}

std::pair<Tree, Tree> EvalStep::operator()(const Tree& variables, const Tree& batch) const {
  Outputs out = evaluate(variables, batch);
  return {std::move(out.metrics), std::move(out.per_example)};
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

// Train / eval / decode steps: the jitted train step equals a hand-written
// eager step, BatchNorm statistics flow through the state, non-finite and
// too-large gradients skip the update, and eval / decode run the model.
#include "pax/train/steps.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/config/config.h"
#include "pax/nn/activations.h"
#include "pax/nn/batch_norm.h"
#include "pax/nn/containers.h"
#include "pax/nn/linears.h"
#include "pax/nn/models/classification.h"
#include "pax/nn/models/language_model.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/optim/aliases.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

using testing::all_close;

template <class Model = nn::ClassificationModel>
std::unique_ptr<Model> classifier(bool batch_norm) {
  auto first = nn::tpl<nn::Linear>();
  first->input_dims = 4;
  first->output_dims = 8;
  auto bn = nn::tpl<nn::BatchNorm>();
  bn->dim = 8;
  auto last = nn::tpl<nn::Linear>();
  last->input_dims = 8;
  last->output_dims = 3;
  auto seq = nn::tpl<nn::Sequential>();
  seq->layers = {first};
  if (batch_norm) seq->layers.push_back(bn);
  seq->layers.push_back(nn::tpl<nn::Tanh>());
  seq->layers.push_back(last);
  typename Model::HParams hp;
  hp.network_tpl = seq;
  hp.num_classes = 3;
  return nn::build<Model>(hp);
}

// A classifier that also reports a metric of weight 0 with a NaN value, as a
// process whose shard holds no example a metric counts would.
class EmptyMetricClassifier : public nn::ClassificationModel {
 public:
  struct HParams : nn::ClassificationModel::HParams {
    PAX_HPARAMS_NO_FIELDS(TestEmptyMetricClassifier, nn::ClassificationModel::HParams);
  };
  std::pair<Tree, Tree> compute_loss(const Tree& predictions, const Tree& input_batch) const override {
    auto [metrics, per_example] = nn::ClassificationModel::compute_loss(predictions, input_batch);
    metrics.set("empty", Tree::list({Tree(scalar(std::nanf(""))), Tree(scalar(0.0f))}));
    return {metrics, per_example};
  }
};
PAX_REGISTER_LAYER(EmptyMetricClassifier);

Tree batch(uint32_t seed) {
  return Tree::dict(
      {{"inputs", testing::random_array({6, 4}, DType::f32, seed)}, {"labels", array<int32_t>({0, 1, 2, 1, 0, 2})}});
}

Learner adam_learner(double lr) {
  Learner learner;
  auto adam = std::make_shared<optim::Adam>();
  adam->learning_rate = lr;
  learner.optimizer = adam;
  return learner;
}

// The step's planned intermediates for abstract arguments: nothing runs,
// they grow with the batch, and the real call reuses the compiled program.
TEST(TrainStep, IntermediateBytesFromAbstractArguments) {
  auto model = classifier(false);
  TrainStep step(*model, adam_learner(0.01));
  const TrainState state =
      TrainState::from_tree(eval_shape([&](const Array& k) { return step.init_state(k).to_tree(); })(random::key(0)));
  auto abstract_batch = [](int64_t n) {
    return eval_shape([n](const Array&) {
      return Tree::dict({{"inputs", zeros(Shape{n, 4})}, {"labels", zeros(Shape{n}, DType::i32)}});
    })(random::key(0));
  };
  const size_t small = step.intermediate_bytes(state, abstract_batch(6), random::key(1));
  const size_t large = step.intermediate_bytes(state, abstract_batch(6000), random::key(1));
  EXPECT_GT(small, 0u);
  EXPECT_GT(large, small + 6000 * 4 * 4) << "at least the batch-sized activations";
  EXPECT_EQ(step.num_traces(), 2u);
  auto [next, out] = step(step.init_state(random::key(0)), batch(0), random::key(1));
  EXPECT_TRUE(std::isfinite(out["loss"].leaf().item<float>()));
  EXPECT_EQ(step.num_traces(), 2u) << "the real call reuses the program compiled for the abstract batch of 6";
}

TEST(EvalStep, IntermediateBytesFromAbstractArguments) {
  auto model = classifier(false);
  TrainStep train(*model, adam_learner(0.01));
  EvalStep step(*model);
  const Tree variables =
      eval_shape([&](const Array& k) { return model_variables(train.init_state(k)); })(random::key(0));
  auto abstract_batch = [](int64_t n) {
    return eval_shape([n](const Array&) {
      return Tree::dict({{"inputs", zeros(Shape{n, 4})}, {"labels", zeros(Shape{n}, DType::i32)}});
    })(random::key(0));
  };
  const size_t small = step.intermediate_bytes(variables, abstract_batch(6));
  const size_t large = step.intermediate_bytes(variables, abstract_batch(6000));
  EXPECT_GT(small, 0u);
  EXPECT_GT(large, small + 6000 * 4 * 4) << "at least the batch-sized activations";
  auto [metrics, out] = step(model_variables(train.init_state(random::key(0))), batch(0));
  EXPECT_FALSE(metrics.entries().empty());
}

TEST(TrainStep, JittedStepEqualsAnEagerAdamStep) {
  auto model = classifier(false);
  TrainStep step(*model, adam_learner(0.01));
  TrainState state = step.init_state(random::key(0));
  EXPECT_EQ(state.extra.size(), 0u);

  // Eager reference: value_and_grad of total_loss, optax-style adam.
  optim::GradientTransformation tx = optim::adam(0.01);
  Tree params = state.params;
  Tree opt_state = tx.init(params);
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) {
    auto loss_fn = [&](const Tree& p) {
      auto out = nn::apply_with(*model, Tree::dict({{"params", p}}), [&](const nn::ClassificationModel& m) {
        return m.fprop_batch(batch(uint32_t(i))).first;
      });
      return nn::metric_value(out.output, "total_loss");
    };
    auto [loss, grads] = value_and_grad(loss_fn)(params);
    losses.push_back(loss.item<float>());
    auto [updates, next] = tx.update(grads, opt_state, params);
    params = optim::apply_updates(params, updates);
    opt_state = next;
  }
  for (int i = 0; i < 3; ++i) {
    auto [next, out] = step(std::move(state), batch(uint32_t(i)), random::key(uint32_t(i)));
    state = std::move(next);
    EXPECT_NEAR(out["loss"].leaf().item<float>(), losses[size_t(i)], 1e-5);
    EXPECT_EQ(out["skipped"].leaf().item<float>(), 0.0f);
    EXPECT_GT(out["grad_norm"].leaf().item<float>(), 0.0f);
    EXPECT_TRUE(out["metrics"].contains("accuracy"));
  }
  EXPECT_EQ(state.step.item<int32_t>(), 3);
  auto la = tree_leaves(state.params), lb = tree_leaves(params);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_TRUE(all_close(la[i], lb[i], 1e-5, 1e-6));
  EXPECT_EQ(step.num_traces(), 1u);
}

TEST(TrainStep, BatchStatisticsAreCarriedInTheState) {
  auto model = classifier(true);
  TrainStep step(*model, adam_learner(0.01));
  TrainState state = step.init_state(random::key(1));
  ASSERT_TRUE(state.extra.contains("batch_stats"));
  Array mean0 = tree_leaves(state.extra["batch_stats"])[0];
  auto [next, out] = step(state, batch(3), random::key(0));
  Array mean1 = tree_leaves(next.extra["batch_stats"])[0];
  EXPECT_FALSE(all_close(mean0, mean1, 0, 0));  // the moving statistics moved
  EXPECT_EQ(out["skipped"].leaf().item<float>(), 0.0f);
}

TEST(TrainStep, NonFiniteAndLargeGradientsSkipTheUpdate) {
  auto model = classifier(false);
  TrainStep step(*model, adam_learner(0.01));
  TrainState state = step.init_state(random::key(2));
  Tree bad = batch(4);
  std::vector<float> x = bad["inputs"].leaf().to_vector<float>();
  x[5] = std::nanf("");
  bad["inputs"] = array<float>(x, {6, 4});
  auto [next, out] = step(state, bad, random::key(0));
  EXPECT_EQ(out["skipped"].leaf().item<float>(), 1.0f);
  EXPECT_EQ(next.step.item<int32_t>(), 1);
  auto la = tree_leaves(next.params), lb = tree_leaves(state.params);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_TRUE(all_close(la[i], lb[i], 0, 0));
  auto sa = tree_leaves(next.opt_state), sb = tree_leaves(state.opt_state);
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(all_close(sa[i], sb[i], 0, 0));

  Learner strict = adam_learner(0.01);
  strict.skip_step_gradient_norm_value = 1e-6;
  TrainStep strict_step(*model, strict);
  auto [kept, out2] = strict_step(strict_step.init_state(random::key(2)), batch(4), random::key(0));
  EXPECT_EQ(out2["skipped"].leaf().item<float>(), 1.0f);

  Learner clipped = adam_learner(0.01);
  clipped.clip_gradient_norm_to_value = 1e-3;
  TrainStep clipped_step(*model, clipped);
  auto [moved, out3] = clipped_step(clipped_step.init_state(random::key(2)), batch(4), random::key(0));
  EXPECT_EQ(out3["skipped"].leaf().item<float>(), 0.0f);
}

// The data-parallel step sums value * weight over the processes: a NaN
// value of weight 0 must add nothing (NaN * 0 is NaN), as in the loss.
TEST(TrainStep, DataParallelMetricsSkipValuesOfWeightZero) {
  auto model = classifier<EmptyMetricClassifier>(false);
  TrainStep step(*model, adam_learner(0.01), {.sharding = {.batch_axis = "processes"}});
  auto [next, out] = step(step.init_state(random::key(5)), batch(6), random::key(0));
  const Tree& metrics = out["metrics"];
  EXPECT_EQ(nn::metric_weight(metrics, "empty").item<float>(), 0.0f);
  EXPECT_EQ(nn::metric_value(metrics, "empty").item<float>(), 0.0f);
  // The other metrics, the loss and the update are those of one process.
  TrainStep single(*model, adam_learner(0.01));
  auto [want_state, want] = single(single.init_state(random::key(5)), batch(6), random::key(0));
  for (const char* name : {"total_loss", "accuracy"}) {
    EXPECT_TRUE(all_close(nn::metric_value(metrics, name), nn::metric_value(want["metrics"], name), 1e-6, 1e-6))
        << name;
  }
  EXPECT_EQ(out["skipped"].leaf().item<float>(), 0.0f);
  auto got_params = tree_leaves(next.params), want_params = tree_leaves(want_state.params);
  for (size_t i = 0; i < got_params.size(); ++i) EXPECT_TRUE(all_close(got_params[i], want_params[i], 1e-6, 1e-6));
}

TEST(TrainStep, ErrorsNameTheLossAndTheOptimizer) {
  auto model = classifier(false);
  Learner learner = adam_learner(0.01);
  learner.loss_name = "total_los";
  TrainStep step(*model, learner);
  EXPECT_PAX_ERROR(step(step.init_state(random::key(0)), batch(0), random::key(0)),
                   "learner.loss_name 'total_los' is not a metric of ClassificationModel");
  Learner bad;
  bad.optimizer = std::make_shared<optim::ConstantSchedule>();
  EXPECT_PAX_ERROR(TrainStep(*model, bad), "learner.optimizer must be an optimizer (");
  Learner negative;
  negative.clip_gradient_norm_to_value = -1;
  EXPECT_PAX_ERROR(TrainStep(*model, negative), "clip_gradient_norm_to_value must be >= 0");
  EXPECT_NEAR(adam_learner(0.25).learning_rate(7), 0.25, 1e-9);
}

// An optimizer that reads whole tensors says so (needs_whole_tensors); split
// parameters refuse it, naming the registered optimizers that work on blocks.
TEST(TrainStep, SplitParametersRefuseOptimizersOfWholeTensors) {
  auto model = classifier(false);
  for (const char* name : {"Adafactor", "Lamb"}) {
    Learner learner;
    learner.optimizer = make_hparams(name, "optimizer");
    EXPECT_PAX_ERROR(
        TrainStep(*model, learner, {.sharding = {.batch_axis = "data", .fsdp = {.axis = "data", .size = 2}}}),
        std::string("learner.optimizer: ") + name +
            " computes statistics over whole tensors (factored moments, trust ratios), but with the "
            "mesh's data axis of 2 (fully sharded data parallelism) each process holds blocks of them; "
            "use one of Adagrad, Adam, Lion, RmsProp, Sgd,");
    TrainStep whole(*model, learner);  // one process holds every tensor whole
  }
  const std::vector<std::string> blockwise = optim::blockwise_optimizers();
  EXPECT_EQ(std::count(blockwise.begin(), blockwise.end(), "Adam"), 1);
  EXPECT_EQ(std::count(blockwise.begin(), blockwise.end(), "Adafactor"), 0);
}

TEST(EvalAndDecode, RunTheModel) {
  auto model = classifier(false);
  TrainStep step(*model, adam_learner(0.01));
  TrainState state = step.init_state(random::key(0));
  EvalStep eval(*model);
  auto [metrics, per_example] = eval(model_variables(state), batch(1));
  auto want = nn::apply_with(*model, model_variables(state),
                             [&](const nn::ClassificationModel& m) { return m.fprop_batch(batch(1)).first; });
  EXPECT_TRUE(all_close(nn::metric_value(metrics, "total_loss"), nn::metric_value(want.output, "total_loss"), 1e-6));

  Config cfg = Config::make("LanguageModel");
  cfg.apply_overrides({"lm_tpl.vocab_size=11", "lm_tpl.model_dims=8", "lm_tpl.stacked_transformer_tpl.num_layers=1",
                       "lm_tpl.stacked_transformer_tpl.num_heads=2", "lm_tpl.stacked_transformer_tpl.hidden_dims=16",
                       "max_decode_length=6"});
  auto lm = nn::build<nn::LanguageModel>(cfg);
  Tree variables = nn::init(*lm, random::key(0));
  Tree out = decode_batch(*lm, variables, Tree::dict({{"prefix", array<int32_t>({3, 4}, {1, 2})}}), random::key(1));
  EXPECT_EQ(out["output_ids"].leaf().shape(), (Shape{1, 6}));
}

}  // namespace
}  // namespace pax::train

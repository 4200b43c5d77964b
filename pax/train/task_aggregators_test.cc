// SingleTask's loss aggregator, metrics aggregator and variational noise
// (paxml's loss_aggregator, metrics and vn): the loss is the configured
// weighted sum of metrics, metrics are kept and combined as the aggregator
// says, and weight noise reaches the gradient of the selected variables only,
// from its start step on, with the standard deviation asked for. Also the
// step's own summaries (norms per layer).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "pax/nn/models/base_model.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/optim/configs.h"
#include "pax/testing/testing.h"
#include "pax/train/eval_decode.h"
#include "pax/train/steps.h"

namespace pax::train {
namespace {

// Two vectors pulled towards 1: total_loss = 0.5 |w - 1|^2 + 0.5 |v - 1|^2
// (weight 1), w_loss = 0.5 |w - 1|^2 (weight 3). Its gradient is the offset
// from 1, so an SGD step of rate 1 lands each parameter on 1 minus whatever
// noise the forward pass saw.
class QuadraticModel : public nn::BaseModel {
 public:
  struct HParams : Layer::HParams {
    int64_t dims = 4;
    PAX_HPARAMS(QuadraticModel, Layer::HParams, (dims, "Length of w and v.", range::size));
  };
  Tree compute_predictions(const Tree&) const override { return Tree::dict({{"w", theta("w")}, {"v", theta("v")}}); }
  std::pair<Tree, Tree> compute_loss(const Tree& p, const Tree&) const override {
    const Array w_loss = sum(square(p["w"].leaf() - 1.0)) * 0.5;
    const Array v_loss = sum(square(p["v"].leaf() - 1.0)) * 0.5;
    Tree metrics = Tree::dict({{"total_loss", nn::weighted_scalar(w_loss + v_loss, scalar(1.0f))},
                               {"w_loss", nn::weighted_scalar(w_loss, scalar(3.0f))}});
    return {metrics, Tree::dict()};
  }

 protected:
  void setup() override {
    const int64_t dims = hparams<HParams>().dims;
    create_variable("w", nn::WeightHParams{Shape{dims}, nn::WeightInit::constant(0.0)});
    create_variable("v", nn::WeightHParams{Shape{dims}, nn::WeightInit::constant(0.0)});
  }
};
PAX_REGISTER_LAYER(QuadraticModel);

std::unique_ptr<QuadraticModel> quadratic(int64_t dims) {
  QuadraticModel::HParams hp;
  hp.dims = dims;
  return nn::build<QuadraticModel>(hp);
}

Learner sgd_learner(double lr) {
  Learner learner;
  auto sgd = std::make_shared<optim::Sgd>();
  sgd->learning_rate = lr;
  learner.optimizer = sgd;
  return learner;
}

const Tree kNoBatch = Tree::dict({{"x", zeros(Shape{1})}});

// One SGD step of rate 1 from w = v = 0 with `options`: (new params, step output).
std::pair<Tree, Tree> one_step(const QuadraticModel& model, TrainStepOptions options, int64_t start_step = 0) {
  TrainStep step(model, sgd_learner(1.0), std::move(options));
  TrainState state = step.init_state(random::key(0));
  state.step = scalar(int32_t(start_step)).astype(state.step.dtype());
  auto [next, out] = step(std::move(state), kNoBatch, random::key(7));
  return {next.params, out};
}

TEST(LossAggregator, MultiLossIsTheWeightedSumOfItsMetrics) {
  auto model = quadratic(3);
  auto multi = std::make_shared<MultiLossAggregator>();
  multi->loss_keys = {"total_loss", "w_loss"};
  multi->loss_weights = {0.5, 0.25};
  auto [params, out] = one_step(*model, {.loss_aggregator = multi});
  // total_loss = 0.5*3 + 0.5*3 = 3, w_loss = 1.5: loss = 0.5 * 3 + 0.25 * 1.5.
  EXPECT_NEAR(out["loss"].leaf().item<float>(), 1.875, 1e-6);
  // d/dw = (0.5 + 0.25) (w - 1) = -0.75, d/dv = 0.5 (v - 1) = -0.5: one step of rate 1.
  EXPECT_TRUE(testing::all_close(params["w"].leaf(), full(Shape{3}, 0.75), 1e-6, 0));
  EXPECT_TRUE(testing::all_close(params["v"].leaf(), full(Shape{3}, 0.5), 1e-6, 0));

  auto single = std::make_shared<LossAggregator>();
  single->loss_key = "w_loss";
  auto [w_only, out_w] = one_step(*model, {.loss_aggregator = single});
  EXPECT_NEAR(out_w["loss"].leaf().item<float>(), 1.5, 1e-6);
  EXPECT_TRUE(testing::all_close(w_only["v"].leaf(), zeros(Shape{3}), 0, 0)) << "v is not in w_loss";
}

TEST(LossAggregator, BadSettingsNameWhatIsWrong) {
  auto model = quadratic(2);
  auto multi = std::make_shared<MultiLossAggregator>();
  multi->loss_keys = {"total_loss", "w_loss"};
  multi->loss_weights = {1.0};
  EXPECT_PAX_ERROR((void)TrainStep(*model, sgd_learner(1.0), {.loss_aggregator = multi}),
                   "loss_weights has 1 entries for 2 loss_keys");
  multi->loss_keys = {"total_loss", "total_loss"};
  multi->loss_weights = {};
  EXPECT_PAX_ERROR((void)TrainStep(*model, sgd_learner(1.0), {.loss_aggregator = multi}), "repeated ('total_loss')");
  multi->loss_keys = {"total_loss", "w_los"};
  EXPECT_PAX_ERROR(one_step(*model, {.loss_aggregator = multi}),
                   "loss_aggregator.loss_keys[1] 'w_los' is not a metric of QuadraticModel");
  EXPECT_PAX_ERROR(loss_terms(std::make_shared<MeanMetrics>(), "total_loss"),
                   "loss_aggregator must be a loss aggregator (LossAggregator, MultiLossAggregator)");
}

Tree metrics_of(double loss, double loss_weight, double acc, double acc_weight) {
  return Tree::dict({{"loss", nn::weighted_scalar(scalar(float(loss)), scalar(float(loss_weight)))},
                     {"acc", nn::weighted_scalar(scalar(float(acc)), scalar(float(acc_weight)))}});
}

TEST(MetricsAggregator, MeanMaxAndWhichMetricsAreKept) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto feed = [&](MetricAccumulator acc) {
    acc.add(metrics_of(1.0, 1.0, 0.5, 2.0));
    acc.add(metrics_of(4.0, 3.0, 0.9, 1.0));
    acc.add(metrics_of(nan, 0.0, nan, 0.0));  // an empty batch counts for nothing
    return acc.values();
  };
  const auto means = feed(MetricAccumulator());
  EXPECT_DOUBLE_EQ(means.at("loss"), (1.0 + 12.0) / 4.0);
  EXPECT_NEAR(means.at("acc"), (1.0 + 0.9) / 3.0, 1e-7);

  auto max_acc = std::make_shared<MaxMetrics>();
  max_acc->metric_keys = {"acc"};
  const auto only_acc = feed(MetricAccumulator(metric_rules(max_acc)));
  EXPECT_EQ(only_acc.size(), 1u) << "metric_keys lists what is logged";
  EXPECT_NEAR(only_acc.at("acc"), 0.9, 1e-7);

  auto composite = std::make_shared<CompositeMetrics>();
  composite->metrics_p = {std::make_shared<MeanMetrics>(), max_acc};
  const auto both = feed(MetricAccumulator(metric_rules(composite)));
  EXPECT_DOUBLE_EQ(both.at("loss"), 13.0 / 4.0) << "the catch-all mean";
  EXPECT_NEAR(both.at("acc"), 0.9, 1e-7) << "a listed key takes precedence over the catch-all";
}

TEST(MetricsAggregator, AMetricIsCombinedOneWay) {
  auto mean_acc = std::make_shared<MeanMetrics>();
  mean_acc->metric_keys = {"acc"};
  auto max_acc = std::make_shared<MaxMetrics>();
  max_acc->metric_keys = {"acc"};
  auto composite = std::make_shared<CompositeMetrics>();
  composite->metrics_p = {mean_acc, max_acc};
  EXPECT_PAX_ERROR(metric_rules(composite),
                   "MaxMetrics takes the max of metric 'acc', which another aggregator already takes the mean");
  composite->metrics_p = {std::make_shared<MeanMetrics>(), std::make_shared<MaxMetrics>()};
  EXPECT_PAX_ERROR(metric_rules(composite), "give one of them metric_keys");
  composite->metrics_p = {};
  EXPECT_PAX_ERROR(metric_rules(composite), "metrics_p must hold at least one aggregator");
  EXPECT_PAX_ERROR(metric_rules(std::make_shared<LossAggregator>()),
                   "metrics must be a metrics aggregator (CompositeMetrics, MaxMetrics, MeanMetrics)");
}

// A listed metric key the model does not report would log nothing: the
// first step's trace refuses it, naming the setting, the key and the
// metrics there are.
TEST(MetricsAggregator, AKeyTheModelDoesNotReportIsRefusedAtTheFirstStep) {
  auto model = quadratic(2);
  auto max_logit = std::make_shared<MaxMetrics>();
  max_logit->metric_keys = {"max_logit"};
  EXPECT_PAX_ERROR(one_step(*model, {.metrics = max_logit}),
                   "metrics.metric_keys[0] 'max_logit' is not a metric of QuadraticModel, so nothing would be logged "
                   "for it; its metrics: total_loss, w_loss");
  auto typo = std::make_shared<MeanMetrics>();
  typo->metric_keys = {"w_loss", "total_los"};
  auto composite = std::make_shared<CompositeMetrics>();
  composite->metrics_p = {std::make_shared<MaxMetrics>(), typo};
  EXPECT_PAX_ERROR(one_step(*model, {.metrics = composite}),
                   "metrics.metrics_p[1].metric_keys[1] 'total_los' is not a metric of QuadraticModel");
  auto w_max = std::make_shared<MaxMetrics>();
  w_max->metric_keys = {"w_loss"};
  auto [params, out] = one_step(*model, {.metrics = w_max});
  EXPECT_NEAR(out["loss"].leaf().item<float>(), 2.0, 1e-6) << "a reported key trains";
}

TEST(MetricsAggregator, CheckMetricKeysListsTheModelsMetrics) {
  auto max_logit = std::make_shared<MaxMetrics>();
  max_logit->metric_keys = {"max_logit"};
  EXPECT_PAX_ERROR(check_metric_keys(metric_rules(max_logit), {"avg_xent", "total_loss"}, "LanguageModel"),
                   "metrics.metric_keys[0] 'max_logit' is not a metric of LanguageModel, so nothing would be logged "
                   "for it; its metrics: avg_xent, total_loss");
  check_metric_keys(metric_rules(max_logit), {"max_logit", "total_loss"}, "LanguageModel");
  check_metric_keys(metric_rules(std::make_shared<MeanMetrics>()), {}, "LanguageModel");  // every metric: no key
}

TEST(LossAggregator, LossValueIsTheWeightedSumOfLoggedMetrics) {
  auto multi = std::make_shared<MultiLossAggregator>();
  multi->loss_keys = {"avg_xent", "aux_loss"};
  multi->loss_weights = {1.0, 0.1};
  const std::vector<LossTerm> terms = loss_terms(multi, "total_loss");
  const std::map<std::string, double> metrics = {{"avg_xent", 2.0}, {"aux_loss", 3.0}, {"total_loss", 9.0}};
  EXPECT_DOUBLE_EQ(*loss_value(terms, metrics), 2.3);
  EXPECT_DOUBLE_EQ(*loss_value(loss_terms(nullptr, "total_loss"), metrics), 9.0);
  EXPECT_FALSE(loss_value(terms, {{"avg_xent", 2.0}})) << "a term not logged";
  EXPECT_PAX_ERROR(check_loss_keys(terms, {"avg_xent", "total_loss"}, "LanguageModel"),
                   "loss_aggregator.loss_keys[1] 'aux_loss' is not a metric of LanguageModel; its metrics: avg_xent, "
                   "total_loss");
  check_loss_keys(terms, {"avg_xent", "aux_loss"}, "LanguageModel");
}

TEST(VariationalNoise, SelectedVariablesSeeGaussianNoiseFromTheStartStep) {
  const int64_t n = 20000;
  auto model = quadratic(n);
  VariationalNoise vn;
  vn.vn_scale = 0.1;
  vn.vn_regex = "params/w";
  vn.vn_start_step = 5;
  // After one step of rate 1 each parameter is 1 minus the noise its forward pass saw.
  auto [noisy, out] = one_step(*model, {.vn = vn}, /*start_step=*/5);
  const std::vector<float> w = noisy["w"].leaf().to_vector<float>();
  double mean = 0, sq = 0;
  for (float x : w) {
    mean += (1.0 - x) / n;
    sq += (1.0 - x) * (1.0 - x) / n;
  }
  EXPECT_NEAR(mean, 0.0, 0.005);  // 0.1 / sqrt(20000) = 7e-4 standard error
  EXPECT_NEAR(std::sqrt(sq - mean * mean), 0.1, 0.003);
  EXPECT_TRUE(testing::all_close(noisy["v"].leaf(), ones(Shape{n}), 1e-6, 0)) << "v does not match params/w";

  auto [before, out_before] = one_step(*model, {.vn = vn}, /*start_step=*/4);
  EXPECT_TRUE(testing::all_close(before["w"].leaf(), ones(Shape{n}), 1e-6, 0)) << "no noise before vn_start_step";

  auto [again, out_again] = one_step(*model, {.vn = vn}, /*start_step=*/5);
  EXPECT_TRUE(testing::all_close(again["w"].leaf(), noisy["w"].leaf(), 0, 0)) << "the noise comes from the step key";
}

// The train step's summaries: per layer (here the root, "params"), the
// norms of the parameters and of their gradients; none when turned off.
TEST(TrainStepSummaries, NormsPerLayer) {
  const int64_t n = 5;
  auto model = quadratic(n);
  auto [params, out] = one_step(*model, {});
  // At w = v = 0 every gradient element of total_loss is -1.
  EXPECT_NEAR(out["summaries"]["grad_norm/params"].leaf().item<float>(), std::sqrt(2.0 * n), 1e-5);
  EXPECT_EQ(out["summaries"]["param_norm/params"].leaf().item<float>(), 0.0f);
  auto [quiet_params, quiet] = one_step(*model, {.summaries = false});
  EXPECT_TRUE(quiet["summaries"].is_none() || quiet["summaries"].size() == 0) << quiet["summaries"].str();
}

TEST(VariationalNoise, ARegexThatSelectsNothingIsRefused) {
  auto model = quadratic(2);
  VariationalNoise vn;
  vn.vn_scale = 0.1;
  vn.vn_regex = "decoder";
  TrainStep step(*model, sgd_learner(1.0), {.vn = vn});
  EXPECT_PAX_ERROR(step.init_state(random::key(0)),
                   "vn.vn_regex 'decoder' matches no variable, but vn.vn_scale is 0.1");
  vn.vn_regex = "params/(w";
  EXPECT_PAX_ERROR(vn.check(), "vn.vn_regex 'params/(w' is not a valid regular expression");
  vn.vn_regex = "";
  vn.vn_scale = -1;
  EXPECT_PAX_ERROR(vn.check(), "vn.vn_scale must be >= 0");
}

}  // namespace
}  // namespace pax::train

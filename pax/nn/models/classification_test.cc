// ClassificationModel with a Sequential network: loss, label smoothing,
// accuracy, top-5, weights, gradients and FLOPs.
#include "pax/nn/models/classification.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/nn/containers.h"
#include "pax/nn/linears.h"
#include "pax/ops/nn.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

Config classifier(int64_t in, int64_t classes, double smoothing = 0.0) {
  Config c = Config::make("ClassificationModel");
  auto& hp = c.as<ClassificationModel::HParams>();
  auto seq = tpl<Sequential>();
  auto linear = tpl<Linear>();
  linear->input_dims = in;
  linear->output_dims = classes;
  seq->layers = {tpl<Flatten>(), linear};
  hp.network_tpl = seq;
  hp.num_classes = classes;
  hp.label_smoothing = smoothing;
  return c;
}

TEST(ClassificationModel, LossAccuracyAndTop5) {
  Config cfg = classifier(6, 7, 0.1);
  auto model = build<ClassificationModel>(cfg);
  Tree vars = init(*model, random::key(0));
  Array x = testing::random_array({4, 2, 3}, DType::f32, 1);
  Array labels = array<int32_t>({0, 3, 6, 2});
  Tree batch = Tree::dict({{"inputs", x}, {"labels", labels}, {"weights", array<float>({1, 1, 0, 2})}});
  auto out = apply_with(*model, vars, [&](const ClassificationModel& m) { return m.fprop_batch(batch); });
  const Tree& metrics = out.output.first;
  // Direct computation.
  Array logits = matmul(reshape(x, {4, 6}), vars.at_path("params/network/layers_1/w").leaf());
  std::vector<double> lg = logits.to_vector<double>(), w = {1, 1, 0, 2};
  std::vector<int> lab = {0, 3, 6, 2};
  double loss = 0, acc = 0, top5 = 0;
  for (int i = 0; i < 4; ++i) {
    double mx = -1e30, z = 0;
    for (int j = 0; j < 7; ++j) mx = std::max(mx, lg[size_t(i * 7 + j)]);
    for (int j = 0; j < 7; ++j) z += std::exp(lg[size_t(i * 7 + j)] - mx);
    double xent = 0;
    int best = 0, above = 0;
    for (int j = 0; j < 7; ++j) {
      double lp = lg[size_t(i * 7 + j)] - mx - std::log(z);
      double t = (j == lab[size_t(i)] ? 0.9 : 0.0) + 0.1 / 7;
      xent -= t * lp;
      if (lg[size_t(i * 7 + j)] > lg[size_t(i * 7 + best)]) best = j;
      if (lg[size_t(i * 7 + j)] > lg[size_t(i * 7 + lab[size_t(i)])]) ++above;
    }
    loss += w[size_t(i)] * xent;
    acc += w[size_t(i)] * (best == lab[size_t(i)]);
    top5 += w[size_t(i)] * (above < 5);
  }
  EXPECT_TRUE(all_close(metric_value(metrics, "total_loss"), {loss / 4}, 1e-5));
  EXPECT_TRUE(all_close(metric_weight(metrics, "total_loss"), {4}));
  EXPECT_TRUE(all_close(metric_value(metrics, "accuracy"), {acc / 4}, 1e-6));
  EXPECT_TRUE(all_close(metric_value(metrics, "top5_accuracy"), {top5 / 4}, 1e-6));
  EXPECT_TRUE(all_close(metric_value(metrics, "num_predictions"), {4}));
  EXPECT_EQ(out.output.second["xent"].leaf().shape(), (Shape{4}));
}

TEST(ClassificationModel, GradientsFlopsAndErrors) {
  Config cfg = classifier(3, 5);
  cfg.set("dtype", "float64");
  cfg.set("fprop_dtype", "float64");
  auto model = build<ClassificationModel>(cfg);
  Tree vars = init(*model, random::key(0));
  Tree batch =
      Tree::dict({{"inputs", testing::random_array({2, 3}, DType::f64, 2)}, {"labels", array<int32_t>({1, 4})}});
  EXPECT_TRUE(testing::check_layer_vjp(*model, vars, {}, [&](const ClassificationModel& m, const std::vector<Array>&) {
    return metric_value(m.fprop_batch(batch).first, "total_loss");
  }));
  // 3 x (2 x 3 x 5) FLOPs of the matmul per example, plus a little elementwise work.
  const double flops = model->flops_per_example(batch);
  EXPECT_GE(flops, 90);
  EXPECT_LT(flops, 90 + 3 * 40);
  EXPECT_PAX_ERROR(apply_with(*model, vars,
                              [](const ClassificationModel& m) {
                                return m.compute_predictions(Tree::dict({{"image", zeros({2, 3}, DType::f64)}}));
                              }),
                   "the batch has no 'inputs'");
  Config bad = classifier(3, 4);
  bad.set("num_classes", "5");
  auto mismatched = build<ClassificationModel>(bad);
  EXPECT_PAX_ERROR(apply_with(*mismatched, init(*mismatched, random::key(0)),
                              [&](const ClassificationModel& m) {
                                return m.compute_predictions(Tree::dict({{"inputs", zeros({2, 3})}}));
                              }),
                   "logits must be (batch, num_classes = 5)");
}

}  // namespace
}  // namespace pax::nn

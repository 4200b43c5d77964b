// ClassificationModel.
#include "pax/nn/models/classification.h"

#include "pax/api/transforms.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

void ClassificationModel::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.network_tpl, "ClassificationModel '", path(), "': network_tpl must be set");
  PAX_CHECK(hp.num_classes > 0, "ClassificationModel '", path(), "': num_classes must be > 0, got ", hp.num_classes);
  PAX_CHECK(hp.label_smoothing >= 0 && hp.label_smoothing < 1, "ClassificationModel '", path(),
            "': label_smoothing must be in [0, 1), got ", hp.label_smoothing);
  network_ = &create_child("network", hp.network_tpl);
}

Tree ClassificationModel::compute_predictions(const Tree& input_batch) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(input_batch.contains(hp.inputs_key), "ClassificationModel: the batch has no '", hp.inputs_key, "'; it has ",
            input_batch.str());
  Array logits = network_->fprop(input_batch[hp.inputs_key].leaf());
  PAX_CHECK(logits.ndim() == 2 && logits.dim(1) == hp.num_classes, "ClassificationModel '", path(),
            "': the network gives ", logits.aval().str(), " but logits must be (batch, num_classes = ", hp.num_classes,
            ")");
  return Tree::dict({{"logits", logits}});
}

std::pair<Tree, Tree> ClassificationModel::compute_loss(const Tree& predictions, const Tree& input_batch) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(input_batch.contains(hp.labels_key), "ClassificationModel: the batch has no '", hp.labels_key, "'");
  Array logits = predictions["logits"].leaf();  // (B, C), in at least f32
  if (logits.dtype() != DType::f64) logits = logits.astype(DType::f32);
  Array labels = input_batch[hp.labels_key].leaf();  // (B,)
  PAX_CHECK(labels.ndim() == 1 && labels.dim(0) == logits.dim(0) && is_integer(labels.dtype()),
            "ClassificationModel: labels must be integers (batch,) = (", logits.dim(0), ",), got ",
            labels.aval().str());
  const int64_t b = logits.dim(0), c = logits.dim(1);
  Array weights = input_batch.contains("weights") ? input_batch["weights"].leaf().astype(logits.dtype())
                                                  : ones({b}, logits.dtype());
  Array log_probs = pax::nn::log_softmax(logits);
  Array onehot = pax::nn::one_hot(labels, c);
  Array targets = hp.label_smoothing > 0 ? onehot * (1.0 - hp.label_smoothing) + hp.label_smoothing / double(c)
                                         : onehot;
  Array xent = -sum(targets * log_probs, -1);  // (B,)
  Tree metrics = cross_entropy_metrics(xent, logits, labels, weights, "accuracy");
  if (summaries_enabled()) add_summary("example_xent", stop_gradient(xent), SummaryType::histogram);  // (B,)
  if (c >= 5) {
    Array total_weight = metric_value(metrics, "num_predictions");
    // The label's logit is among the 5 largest: fewer than 5 logits exceed it.
    Array label_logit = take_along_axis(logits, expand_dims(labels, {-1}), -1);  // (B, 1)
    Array above = sum((logits > label_logit).astype(logits.dtype()), -1);
    Array top5 = (above < 5.0).astype(logits.dtype());
    metrics["top5_accuracy"] = weighted_scalar(sum(top5 * weights) / maximum(total_weight, 1e-8), total_weight);
  }
  return {metrics, Tree::dict({{"xent", xent}})};
}

PAX_REGISTER_LAYER(ClassificationModel);

}  // namespace pax::nn

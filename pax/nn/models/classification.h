// ClassificationModel (as praxis ClassificationModel): a network maps the
// input to logits; the loss is softmax cross entropy with optional label
// smoothing; metrics are accuracy and top-5 accuracy.
//   input batch: {inputs (B, ...), labels (B,) int, weights (B,) optional}
#pragma once

#include "pax/nn/models/base_model.h"

namespace pax::nn {

class ClassificationModel : public BaseModel {
 public:
  struct HParams : Layer::HParams {
    HParamsPtr network_tpl;
    int64_t num_classes = 0;
    double label_smoothing = 0.0;
    std::string inputs_key = "inputs";
    std::string labels_key = "labels";
    PAX_HPARAMS(ClassificationModel, Layer::HParams,
                (network_tpl, "The network: maps inputs (B, ...) to logits (B, num_classes)."),
                (num_classes, "Number of classes (checked against the logits).", range::size),
                (label_smoothing, "Mass spread evenly over all classes in the targets (0: one-hot).",
                 range::probability),
                (inputs_key, "Key of the inputs in the batch."), (labels_key, "Key of the int labels in the batch."));
  };
  // {logits: (B, num_classes)}
  Tree compute_predictions(const Tree& input_batch) const override;
  // metrics: total_loss, avg_xent, accuracy, top5_accuracy (num_classes >= 5),
  // num_predictions; per example: xent (B,).
  std::pair<Tree, Tree> compute_loss(const Tree& predictions, const Tree& input_batch) const override;

 protected:
  void setup() override;

 private:
  const Layer* network_ = nullptr;
};

}  // namespace pax::nn

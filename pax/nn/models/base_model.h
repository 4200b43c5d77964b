// BaseModel: the interface the trainer uses, as praxis.base_model.BaseModel.
// compute_predictions maps an input batch (a Tree of named arrays, Pax's
// NestedMap) to predictions; compute_loss turns them into weighted scalar
// metrics — {name: [value, weight]}, "total_loss" among them — and
// per-example outputs. Models also report the FLOPs of a training step, for
// MFU.
#pragma once

#include <string>
#include <utility>

#include "pax/core/tree.h"
#include "pax/nn/layer.h"

namespace pax::nn {

// A weighted scalar metric (Praxis WeightedScalars entry): [value, weight].
Tree weighted_scalar(const Array& value, const Array& weight);
Array metric_value(const Tree& metrics, const std::string& name);
Array metric_weight(const Tree& metrics, const std::string& name);

// The metrics of a weighted cross entropy: total_loss and avg_xent (the
// weighted mean of xent), `accuracy_name` (weighted fraction of examples
// whose argmax logit is the label) and num_predictions (the total weight).
// logits (..., C); labels, weights and xent (...).
Tree cross_entropy_metrics(const Array& xent, const Array& logits, const Array& labels, const Array& weights,
                           const std::string& accuracy_name);

class BaseModel : public Layer {
 public:
  virtual Tree compute_predictions(const Tree& input_batch) const = 0;
  // (metrics, per-example outputs).
  virtual std::pair<Tree, Tree> compute_loss(const Tree& predictions, const Tree& input_batch) const = 0;
  // compute_predictions followed by compute_loss.
  std::pair<Tree, Tree> fprop_batch(const Tree& input_batch) const;
  // Decoding / sampling, for models that support it.
  virtual Tree decode(const Tree& input_batch) const;
  // Creates the decoder_cache collection that decode() keeps for a batch
  // shaped like `input_batch` (a language model's key/value caches), so that
  // its size can be known before decoding (train::decode_state_shapes). The
  // default creates nothing.
  virtual void init_decode_states(const Tree& input_batch) const;
  // FLOPs of one training step (forward and backward) per example of a
  // batch shaped like `input_batch`. The default traces the forward pass
  // (nothing is computed or allocated) and counts 3x its FLOPs.
  virtual double flops_per_example(const Tree& input_batch) const;
};

}  // namespace pax::nn

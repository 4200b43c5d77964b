// Dropout: in training, zeroes each element with probability 1 - keep_prob
// and scales the rest by 1 / keep_prob, with keys from the "dropout" stream;
// the identity when not training or when deterministic.
#pragma once

#include "pax/nn/layer.h"

namespace pax::nn {

class Dropout : public Layer {
 public:
  struct HParams : Layer::HParams {
    double keep_prob = 1.0;
    Ints noise_shape_broadcast_dims;
    bool deterministic = false;
    PAX_HPARAMS(Dropout, Layer::HParams,
                (keep_prob, "Probability of keeping an element (1 disables dropout).", range::keep_probability),
                (noise_shape_broadcast_dims, "Axes along which one mask value is shared (e.g. the time axis).",
                 range::closed(-64, 64)),
                (deterministic, "Never drop, even in training."));
  };
  Array fprop(const Array& x) const override;
  // Dropout of x, this process's part of an activation split over the mdl
  // axis (tensor parallelism: a part of the heads or of the hidden width):
  // its mask differs from the other parts' (nn/tensor_parallel.h,
  // key_of_this_part); fprop's would repeat on every part.
  Array fprop_split(const Array& x) const;

 protected:
  void setup() override;

 private:
  Array drop(const Array& x, bool split) const;
};

}  // namespace pax::nn

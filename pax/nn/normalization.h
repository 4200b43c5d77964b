// Normalisation layers: LayerNorm, RmsNorm (and BatchNorm, GroupNorm).
// Statistics are computed in f32 for 16-bit inputs; the result is in
// fprop_dtype.
#pragma once

#include <string>

#include "pax/nn/layer.h"

namespace pax::nn {

// (x - mean) / sqrt(var + eps) * scale + bias over the last axis.
class LayerNorm : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dim = 0;
    double epsilon = 1e-6;
    bool use_scale = true;
    bool use_bias = true;
    PAX_HPARAMS(LayerNorm, Layer::HParams, (dim, "Depth of the last axis.", range::size),
                (epsilon, "Added to the variance for stability.", range::non_negative),
                (use_scale, "Learn a scale (initialised to 1)."), (use_bias, "Learn a bias (initialised to 0)."));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;
};

// x / sqrt(mean(x^2) + eps) * scale over the last axis.
class RmsNorm : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dim = 0;
    double epsilon = 1e-6;
    PAX_HPARAMS(RmsNorm, Layer::HParams, (dim, "Depth of the last axis.", range::size),
                (epsilon, "Added to the mean square for stability.", range::non_negative));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;
};

}  // namespace pax::nn

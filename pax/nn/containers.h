// Generic containers: Sequential (layers applied in order) and Flatten
// (merge every axis after the batch axis), for networks built from configs
// alone, e.g. a CNN classifier.
#pragma once

#include "pax/nn/layer.h"

namespace pax::nn {

class Sequential : public Layer {
 public:
  struct HParams : Layer::HParams {
    std::vector<HParamsPtr> layers;
    PAX_HPARAMS(Sequential, Layer::HParams,
                (layers, "Templates of the layers, applied in order (each maps one array to one array)."));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;

 private:
  std::vector<const Layer*> layers_;
};

// (B, d1, d2, ...) -> (B, d1 * d2 * ...).
class Flatten : public Layer {
 public:
  struct HParams : Layer::HParams {
    PAX_HPARAMS_NO_FIELDS(Flatten, Layer::HParams);
  };
  Array fprop(const Array& x) const override;
};

}  // namespace pax::nn

// Activation layers, swappable by name in a template field (ReLU, GELU, SiLU,
// Tanh, Sigmoid, Identity). All derive from Activation, so a layer holding an
// activation template calls fprop without knowing which one it is.
#pragma once

#include "pax/nn/layer.h"

namespace pax::nn {

class Activation : public Layer {
 public:
  struct HParams : Layer::HParams {
    PAX_HPARAMS_NO_FIELDS(Activation, Layer::HParams);
  };
  Array fprop(const Array& x) const override = 0;
};

class ReLU : public Activation {
 public:
  struct HParams : Activation::HParams {
    PAX_HPARAMS_NO_FIELDS(ReLU, Activation::HParams);
  };
  Array fprop(const Array& x) const override;
};

class GELU : public Activation {
 public:
  struct HParams : Activation::HParams {
    bool approximate = true;
    PAX_HPARAMS(GELU, Activation::HParams,
                (approximate, "Use the tanh approximation (true) or the exact erf form (false)."));
  };
  Array fprop(const Array& x) const override;
};

class SiLU : public Activation {
 public:
  struct HParams : Activation::HParams {
    PAX_HPARAMS_NO_FIELDS(SiLU, Activation::HParams);
  };
  Array fprop(const Array& x) const override;
};

class Tanh : public Activation {
 public:
  struct HParams : Activation::HParams {
    PAX_HPARAMS_NO_FIELDS(Tanh, Activation::HParams);
  };
  Array fprop(const Array& x) const override;
};

class Sigmoid : public Activation {
 public:
  struct HParams : Activation::HParams {
    PAX_HPARAMS_NO_FIELDS(Sigmoid, Activation::HParams);
  };
  Array fprop(const Array& x) const override;
};

class Identity : public Activation {
 public:
  struct HParams : Activation::HParams {
    PAX_HPARAMS_NO_FIELDS(Identity, Activation::HParams);
  };
  Array fprop(const Array& x) const override { return x; }
};

}  // namespace pax::nn

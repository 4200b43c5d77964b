// Sequential and Flatten.
#include "pax/nn/containers.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

void Sequential::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(!hp.layers.empty(), "Sequential '", path(), "': needs at least one layer");
  layers_ = create_children("layers", hp.layers);
}

Array Sequential::fprop(const Array& x) const {
  Array y = x;
  for (const Layer* l : layers_) y = l->fprop(y);
  return y;
}

Array Flatten::fprop(const Array& x) const {
  PAX_CHECK(x.ndim() >= 1, "Flatten '", path(), "': needs a batch axis, got ", x.aval().str());
  return reshape(x, {x.dim(0), -1});
}

PAX_REGISTER_LAYER(Sequential);
PAX_REGISTER_LAYER(Flatten);

}  // namespace pax::nn

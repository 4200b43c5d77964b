// LayerNorm and RmsNorm.
#include "pax/nn/normalization.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

namespace {
// Statistics in at least f32.
Array stats_dtype(const Array& x) { return x.dtype() == DType::f64 ? x : x.astype(DType::f32); }

void check_last_axis(const Layer& l, const Array& x, int64_t dim) {
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == dim, l.type_name(), " '", l.path(), "': input ", x.aval().str(),
            " must end in dim = ", dim);
}
}  // namespace

void LayerNorm::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dim > 0, "LayerNorm '", path(), "': dim must be > 0, got ", hp.dim);
  if (hp.use_scale) create_variable("scale", WeightHParams{Shape{hp.dim}, WeightInit::constant(1.0)});
  if (hp.use_bias) create_variable("bias", WeightHParams{Shape{hp.dim}, WeightInit::constant(0.0)});
}

Array LayerNorm::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  check_last_axis(*this, x, hp.dim);
  Array xf = stats_dtype(x);
  Array m = mean(xf, -1, true);
  Array centered = xf - m;
  Array v = mean(centered * centered, -1, true);
  Array y = to_fprop_dtype(centered * rsqrt(v + hp.epsilon));
  if (hp.use_scale) y = y * theta("scale");
  if (hp.use_bias) y = y + theta("bias");
  return y;
}

void RmsNorm::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dim > 0, "RmsNorm '", path(), "': dim must be > 0, got ", hp.dim);
  create_variable("scale", WeightHParams{Shape{hp.dim}, WeightInit::constant(1.0)});
}

Array RmsNorm::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  check_last_axis(*this, x, hp.dim);
  Array xf = stats_dtype(x);
  Array ms = mean(xf * xf, -1, true);
  return to_fprop_dtype(xf * rsqrt(ms + hp.epsilon)) * theta("scale");
}

PAX_REGISTER_LAYER(LayerNorm);
PAX_REGISTER_LAYER(RmsNorm);

}  // namespace pax::nn

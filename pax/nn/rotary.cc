// RotaryPositionalEmbedding.
#include "pax/nn/rotary.h"

#include <cmath>

#include "pax/ops/numpy.h"

namespace pax::nn {

void RotaryPositionalEmbedding::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.embedding_dims > 0 && hp.embedding_dims % 2 == 0, "RotaryPositionalEmbedding '", path(),
            "': embedding_dims must be positive and even (features rotate in pairs), got ", hp.embedding_dims);
  PAX_CHECK(hp.min_timescale > 0 && hp.max_timescale > 0, "RotaryPositionalEmbedding '", path(),
            "': min_timescale and max_timescale must be > 0, got ", hp.min_timescale, " and ", hp.max_timescale);
}

Array RotaryPositionalEmbedding::fprop(const Array& inputs, const Array& positions) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(inputs.ndim() == 4 && inputs.dim(-1) == hp.embedding_dims, "RotaryPositionalEmbedding '", path(),
            "': inputs ", inputs.aval().str(), " must be (batch, time, heads, ", hp.embedding_dims, ")");
  const int64_t batch = inputs.dim(0), time = inputs.dim(1), half = hp.embedding_dims / 2;
  // Angles in f32 even for 16-bit inputs: positions reach thousands.
  const DType compute = inputs.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Array pos;  // (B or 1, T)
  if (positions.defined()) {
    PAX_CHECK(positions.ndim() == 2 && positions.dim(1) == time &&
                  (positions.dim(0) == batch || positions.dim(0) == 1) && positions.dtype() != DType::bool_,
              "RotaryPositionalEmbedding '", path(), "': positions ", positions.aval().str(), " must be (", batch,
              " or 1, ", time, ") numbers for inputs ", inputs.aval().str());
    pos = positions.astype(compute);
  } else {
    pos = reshape(arange<int64_t>(0, time, 1, compute), {1, time});
  }
  std::vector<double> timescale(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double fraction = 2.0 * double(i) / double(hp.embedding_dims);
    timescale[size_t(i)] = hp.min_timescale * std::pow(hp.max_timescale / hp.min_timescale, fraction);
  }
  Array angle = expand_dims(pos, {2, 3}) / array(timescale).astype(compute);  // (B, T, 1, H/2)
  Array sin_a = sin(angle), cos_a = cos(angle);
  std::vector<Array> halves = split(inputs.astype(compute), 2, -1);  // 2 x (B, T, N, H/2)
  Array first = halves[0] * cos_a - halves[1] * sin_a;
  Array second = halves[1] * cos_a + halves[0] * sin_a;
  return to_fprop_dtype(concatenate({first, second}, -1));
}

Array RotaryPositionalEmbedding::extend_step(const Array& inputs, const Array& position) const {
  PAX_CHECK(inputs.ndim() == 3, "RotaryPositionalEmbedding '", path(), "': extend_step inputs ", inputs.aval().str(),
            " must be (batch, heads, dims)");
  const int64_t batch = inputs.dim(0);
  PAX_CHECK(position.defined() && (position.ndim() == 0 || (position.ndim() == 1 && position.dim(0) == batch)),
            "RotaryPositionalEmbedding '", path(), "': extend_step position ",
            position.defined() ? position.aval().str() : "(none)", " must be a scalar or (", batch, ",)");
  Array pos = reshape(broadcast_to(position, Shape{batch}), {batch, 1});  // (B, 1)
  return squeeze(fprop(expand_dims(inputs, {1}), pos), 1);
}

PAX_REGISTER_LAYER(RotaryPositionalEmbedding);

}  // namespace pax::nn

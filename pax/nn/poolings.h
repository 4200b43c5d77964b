// MaxPool and AvgPool over the spatial axes of NHWC inputs, as
// flax.linen.max_pool / avg_pool (and praxis.layers.poolings.Pooling).
// Built from pad, strided slices and maximum / add, so they run (and
// differentiate) under every transform. Both reductions are separable: the
// window is reduced along H, then along W (kh + kw slices, not kh * kw).
#pragma once

#include <string>

#include "pax/nn/layer.h"

namespace pax::nn {

// Fields shared by the pooling layers.
struct PoolingHParams : Layer::HParams {
  Ints window_shape = {2, 2};
  Ints strides = {2, 2};
  std::string padding = "VALID";
  Ints explicit_padding;
  PAX_HPARAMS(Pooling, Layer::HParams, (window_shape, "(kh, kw) of the pooling window.", range::count),
              (strides, "(stride_h, stride_w) of the window.", range::count),
              (padding, "\"SAME\", \"VALID\" or \"EXPLICIT\" (then explicit_padding applies)."),
              (explicit_padding, "(top, bottom, left, right) padded rows / columns, with padding = EXPLICIT.",
               range::size));
};

// The maximum over each window; padded positions never win (they hold -inf).
// Floating inputs only. NaN in a window gives NaN. At ties the gradient is
// shared between the tied elements (as maximum's), unlike XLA's
// select_and_scatter which gives it to one of them.
class MaxPool : public Layer {
 public:
  struct HParams : PoolingHParams {
    PAX_HPARAMS_NO_FIELDS(MaxPool, PoolingHParams);
  };
  // x: (..., H, W, C) -> (..., H', W', C)
  Array fprop(const Array& x) const;

 protected:
  void setup() override;
};

// The mean over each window. By default padded positions are not counted
// (Flax's count_include_pad=False, Praxis's AVG pooling: a corner window of a
// SAME pooling averages only the real elements); count_include_pad = true
// counts them as zeros (flax.linen.avg_pool's default). 16-bit inputs are
// summed in f32.
class AvgPool : public Layer {
 public:
  struct HParams : PoolingHParams {
    bool count_include_pad = false;
    PAX_HPARAMS(AvgPool, PoolingHParams,
                (count_include_pad, "Divide by the full window size, padding included, instead of the real count."));
  };
  // x: (..., H, W, C) -> (..., H', W', C)
  Array fprop(const Array& x) const;

 protected:
  void setup() override;
};

}  // namespace pax::nn

// Conv2D, as praxis.layers.convolutions.Conv2D (and flax.linen.Conv): NHWC
// inputs, HWIO weights, lax::conv_general_dilated.
#pragma once

#include <string>

#include "pax/nn/layer.h"

namespace pax::nn {

// y = conv(x, w) (+ b). filter_shape = (kh, kw, in, out) names the layer's
// full input depth `in`; with feature_group_count = G the weight w is
// (kh, kw, in / G, out), as XLA's grouped convolution (G = in: depthwise,
// each output channel sees one input channel). With G = 1 this is Praxis's
// filter_shape exactly. w is drawn with the layer's params_init and
// fan_in = kh * kw * in / G, fan_out = kh * kw * out.
//
// Padding: "SAME" (output size ceil(size / stride), the extra row / column of
// an odd total at the end, as lax.padtype_to_pads), "VALID" (none), or
// "EXPLICIT" with explicit_padding = (top, bottom, left, right).
class Conv2D : public Layer {
 public:
  struct HParams : Layer::HParams {
    Ints filter_shape;
    Ints filter_stride = {1, 1};
    Ints dilations = {1, 1};
    std::string padding = "SAME";
    Ints explicit_padding;
    int64_t feature_group_count = 1;
    bool bias = false;
    WeightInit bias_init = WeightInit::constant(0.0);
    PAX_HPARAMS(Conv2D, Layer::HParams,
                (filter_shape, "(kh, kw, in, out): window size, input depth and output depth.", range::size),
                (filter_stride, "(stride_h, stride_w).", range::count),
                (dilations, "(dilation_h, dilation_w) of the window.", range::count),
                (padding, "\"SAME\", \"VALID\" or \"EXPLICIT\" (then explicit_padding applies)."),
                (explicit_padding, "(top, bottom, left, right) rows / columns of zeros, with padding = EXPLICIT.",
                 range::size),
                (feature_group_count, "Groups of input channels (in for a depthwise convolution); divides in and out.",
                 range::count),
                (bias, "Add a learnt bias b: (out,)."), (bias_init, "How b is initialised."));
  };
  // x: (..., H, W, in) -> (..., H', W', out); leading axes are batch axes
  // (none: a single image).
  Array fprop(const Array& x) const;

 protected:
  void setup() override;
};

// (lo, hi) padding per spatial axis for "SAME" / "VALID" / "EXPLICIT"
// (lax.padtype_to_pads); throws naming `who` for a bad padding or an input
// smaller than the (dilated) window.
std::vector<std::pair<int64_t, int64_t>> spatial_padding(const std::string& who, const std::string& padding,
                                                         const Ints& explicit_padding, const Ints& sizes,
                                                         const Ints& window, const Ints& strides,
                                                         const Ints& dilations);

}  // namespace pax::nn

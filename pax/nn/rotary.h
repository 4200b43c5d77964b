// RotaryPositionalEmbedding (RoPE), as praxis.layers.embedding_softmax.
//
// Features are paired first half with second half (Praxis's convention, not
// the interleaved (2i, 2i + 1) one): with H = embedding_dims and
// i in [0, H / 2),
//   timescale_i = min_timescale * (max_timescale / min_timescale)^(2 i / H)
//   angle       = position / timescale_i
//   y[i]         = x[i] cos(angle) - x[i + H/2] sin(angle)
//   y[i + H/2]   = x[i + H/2] cos(angle) + x[i] sin(angle)
// so that the dot product of a rotated query at position m with a rotated
// key at position n depends on m - n only. Angles are computed in f32 (f64
// for f64 inputs); the result is in fprop_dtype.
#pragma once

#include "pax/nn/layer.h"

namespace pax::nn {

class RotaryPositionalEmbedding : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t embedding_dims = 0;
    double min_timescale = 1.0;
    double max_timescale = 10000.0;
    PAX_HPARAMS(RotaryPositionalEmbedding, Layer::HParams,
                (embedding_dims, "Depth of the rotated features (the attention's dim_per_head); even.", range::size),
                (min_timescale, "Timescale of the fastest-rotating pair.", range::positive),
                (max_timescale, "Timescale bound of the slowest-rotating pair.", range::positive));
  };
  // inputs (B, T, N, H), positions (B or 1, T) of any real or integer dtype
  // (default: 0 .. T - 1 for every batch entry) -> (B, T, N, H).
  Array fprop(const Array& inputs, const Array& positions = Array()) const;
  // One decoding step: inputs (B, N, H) at `position`, an integer or real
  // scalar or a (B,) vector -> (B, N, H).
  Array extend_step(const Array& inputs, const Array& position) const;

 protected:
  void setup() override;
};

}  // namespace pax::nn

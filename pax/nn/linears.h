// Linear, Bias, FeedForward (linear + bias + activation) and MLPBlock (a
// stack of FeedForward layers), as praxis.layers.linears.
#pragma once

#include "pax/nn/activations.h"
#include "pax/nn/layer.h"

namespace pax::nn {

// How a weight splits over the mesh's mdl axis under tensor parallelism
// (nn/tensor_parallel.h); without it every process holds it whole.
enum class MdlSplit : int {
  none,    // whole on every process
  output,  // by output columns: the input is shared (enter_split), the output is this process's part
  input,   // by input rows: the input is this process's part, the outputs are summed (leave_split)
};
PAX_ENUM(MdlSplit, "none", "output", "input")

// y = x @ w, w: (input_dims, output_dims).
class Linear : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dims = 0;
    int64_t output_dims = 0;
    MdlSplit mdl_split = MdlSplit::none;
    PAX_HPARAMS(Linear, Layer::HParams, (input_dims, "Depth of the input.", range::size),
                (output_dims, "Depth of the output.", range::size),
                (mdl_split,
                 "Tensor parallelism: none, output (columns split over mdl) or input (rows; the "
                 "outputs are summed over mdl)."));
  };
  // x: (..., input_dims) -> (..., output_dims)
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;
};

// y = x + b, b: (dims,), initialised to zeros.
class Bias : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dims = 0;
    bool mdl_split = false;
    PAX_HPARAMS(Bias, Layer::HParams, (dims, "Depth of the input (and of the bias).", range::size),
                (mdl_split, "Tensor parallelism: the bias split over mdl, for an input that is this process's part."));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;
};

// activation(x @ w + b).
class FeedForward : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dims = 0;
    int64_t output_dims = 0;
    bool has_bias = true;
    MdlSplit mdl_split = MdlSplit::none;
    HParamsPtr linear_tpl = tpl<Linear>();
    HParamsPtr activation_tpl = tpl<ReLU>();
    PAX_HPARAMS(FeedForward, Layer::HParams, (input_dims, "Depth of the input.", range::size),
                (output_dims, "Depth of the output.", range::size), (has_bias, "Add a bias after the projection."),
                (mdl_split, "Tensor parallelism of the projection (see Linear); the bias follows it."),
                (linear_tpl, "Template of the projection (its dims are set from this layer's)."),
                (activation_tpl, "Template of the activation (ReLU, GELU, SiLU, Tanh, Sigmoid, Identity)."));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;

 private:
  const Linear* linear_ = nullptr;
  const Bias* bias_ = nullptr;
  const Activation* activation_ = nullptr;
};

// input -> hidden ... -> output through num_layers FeedForward layers; the
// last one's activation is Identity unless apply_activation_last.
class MLPBlock : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t input_dims = 0;
    int64_t hidden_dims = 0;
    int64_t output_dims = 0;
    int64_t num_layers = 2;
    bool apply_activation_last = false;
    HParamsPtr ff_tpl = tpl<FeedForward>();
    PAX_HPARAMS(MLPBlock, Layer::HParams, (input_dims, "Depth of the input.", range::size),
                (hidden_dims, "Depth of the hidden layers.", range::size),
                (output_dims, "Depth of the output.", range::size),
                (num_layers, "Number of FeedForward layers (>= 1).", range::closed(0, 4096)),
                (apply_activation_last, "Apply the activation after the last layer too."),
                (ff_tpl, "Template of each FeedForward layer."));
  };
  Array fprop(const Array& x) const override;

 protected:
  void setup() override;

 private:
  std::vector<const FeedForward*> layers_;
};

}  // namespace pax::nn

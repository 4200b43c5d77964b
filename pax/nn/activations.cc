// Activation layers.
#include "pax/nn/activations.h"

#include "pax/ops/nn.h"

namespace pax::nn {

Array ReLU::fprop(const Array& x) const { return pax::nn::relu(to_fprop_dtype(x)); }
Array GELU::fprop(const Array& x) const { return pax::nn::gelu(to_fprop_dtype(x), hparams<HParams>().approximate); }
Array SiLU::fprop(const Array& x) const { return pax::nn::silu(to_fprop_dtype(x)); }
Array Tanh::fprop(const Array& x) const { return pax::tanh(to_fprop_dtype(x)); }
Array Sigmoid::fprop(const Array& x) const { return pax::nn::sigmoid(to_fprop_dtype(x)); }

PAX_REGISTER_LAYER(ReLU);
PAX_REGISTER_LAYER(GELU);
PAX_REGISTER_LAYER(SiLU);
PAX_REGISTER_LAYER(Tanh);
PAX_REGISTER_LAYER(Sigmoid);
PAX_REGISTER_LAYER(Identity);

}  // namespace pax::nn

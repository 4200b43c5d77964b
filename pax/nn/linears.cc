// Linear, Bias, FeedForward, MLPBlock.
#include "pax/nn/linears.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

void Linear::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.input_dims > 0 && hp.output_dims > 0, "Linear '", path(),
            "': input_dims and output_dims must be > 0, got ", hp.input_dims, " and ", hp.output_dims);
  create_variable("w", WeightHParams{Shape{hp.input_dims, hp.output_dims}});
}

Array Linear::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.input_dims, "Linear '", path(), "': input ", x.aval().str(),
            " must end in input_dims = ", hp.input_dims);
  return matmul(to_fprop_dtype(x), theta("w"));
}

void Bias::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dims > 0, "Bias '", path(), "': dims must be > 0, got ", hp.dims);
  create_variable("b", WeightHParams{Shape{hp.dims}, WeightInit::constant(0.0)});
}

Array Bias::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.dims, "Bias '", path(), "': input ", x.aval().str(),
            " must end in dims = ", hp.dims);
  return to_fprop_dtype(x) + theta("b");
}

void FeedForward::setup() {
  const auto& hp = hparams<HParams>();
  auto linear = clone_template<Linear::HParams>(hp.linear_tpl, "linear_tpl", "FeedForward '" + path() + "': ");
  linear->input_dims = hp.input_dims;
  linear->output_dims = hp.output_dims;
  linear_ = &create_child<Linear>("linear", linear);
  if (hp.has_bias) {
    auto bias = tpl<Bias>();
    bias->dims = hp.output_dims;
    bias_ = &create_child<Bias>("bias", bias);
  }
  activation_ = &create_child<Activation>("activation", hp.activation_tpl);
}

Array FeedForward::fprop(const Array& x) const {
  Array y = linear_->fprop(x);
  if (bias_) y = bias_->fprop(y);
  return activation_->fprop(y);
}

void MLPBlock::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.num_layers >= 1, "MLPBlock '", path(), "': num_layers must be >= 1, got ", hp.num_layers);
  std::vector<HParamsPtr> tpls;
  for (int64_t i = 0; i < hp.num_layers; ++i) {
    auto ff = clone_template<FeedForward::HParams>(hp.ff_tpl, "ff_tpl", "MLPBlock '" + path() + "': ");
    ff->input_dims = i == 0 ? hp.input_dims : hp.hidden_dims;
    ff->output_dims = i == hp.num_layers - 1 ? hp.output_dims : hp.hidden_dims;
    if (i == hp.num_layers - 1 && !hp.apply_activation_last) ff->activation_tpl = tpl<Identity>();
    tpls.push_back(ff);
  }
  for (const Layer* l : create_children("mlp", tpls)) layers_.push_back(static_cast<const FeedForward*>(l));
}

Array MLPBlock::fprop(const Array& x) const {
  Array y = x;
  for (const FeedForward* l : layers_) y = l->fprop(y);
  return y;
}

PAX_REGISTER_LAYER(Linear);
PAX_REGISTER_LAYER(Bias);
PAX_REGISTER_LAYER(FeedForward);
PAX_REGISTER_LAYER(MLPBlock);

}  // namespace pax::nn

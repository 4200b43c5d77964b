// Linear, Bias, FeedForward, MLPBlock.
#include "pax/nn/linears.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

void Linear::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.input_dims > 0 && hp.output_dims > 0, "Linear '", path(),
            "': input_dims and output_dims must be > 0, got ", hp.input_dims, " and ", hp.output_dims);
  WeightHParams w{Shape{hp.input_dims, hp.output_dims}};
  if (hp.mdl_split != MdlSplit::none) w.mdl_dim = hp.mdl_split == MdlSplit::output ? 1 : 0;
  create_variable("w", w);
}

Array Linear::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  const TensorParallelOptions& tp = tensor_parallel();
  const bool rows = hp.mdl_split == MdlSplit::input && tp.enabled();
  const int64_t input_dims = rows ? hp.input_dims / tp.size : hp.input_dims;
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == input_dims, "Linear '", path(), "': input ", x.aval().str(),
            " must end in input_dims = ", input_dims, rows ? " (this process's part of the rows split over mdl)" : "");
  const Array w = theta("w");
  if (hp.mdl_split == MdlSplit::output) return matmul(enter_split(to_fprop_dtype(x), tp), w);
  const Array y = matmul(to_fprop_dtype(x), w);
  return rows ? leave_split(y, tp) : y;
}

void Bias::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dims > 0, "Bias '", path(), "': dims must be > 0, got ", hp.dims);
  WeightHParams b{Shape{hp.dims}, WeightInit::constant(0.0)};
  if (hp.mdl_split) b.mdl_dim = 0;
  create_variable("b", b);
}

Array Bias::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  const TensorParallelOptions& tp = tensor_parallel();
  const int64_t dims = hp.mdl_split && tp.enabled() ? hp.dims / tp.size : hp.dims;
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == dims, "Bias '", path(), "': input ", x.aval().str(),
            " must end in dims = ", dims);
  return to_fprop_dtype(x) + theta("b");
}

void FeedForward::setup() {
  const auto& hp = hparams<HParams>();
  auto linear = clone_template<Linear::HParams>(hp.linear_tpl, "linear_tpl", "FeedForward '" + path() + "': ");
  linear->input_dims = hp.input_dims;
  linear->output_dims = hp.output_dims;
  linear->mdl_split = hp.mdl_split;
  linear_ = &create_child<Linear>("linear", linear);
  if (hp.has_bias) {
    auto bias = tpl<Bias>();
    bias->dims = hp.output_dims;
    bias->mdl_split = hp.mdl_split == MdlSplit::output;
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

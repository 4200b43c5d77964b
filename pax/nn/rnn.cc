// LSTMCell.
#include "pax/nn/rnn.h"

#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

void LSTMCell::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.num_input_nodes > 0 && hp.num_output_nodes > 0, "LSTMCell '", path(),
            "': num_input_nodes and num_output_nodes must be > 0, got ", hp.num_input_nodes, " and ",
            hp.num_output_nodes);
  PAX_CHECK(!hp.cell_value_cap || *hp.cell_value_cap > 0, "LSTMCell '", path(), "': cell_value_cap must be > 0, got ",
            hp.cell_value_cap.value_or(0));
  const int64_t n = hp.num_output_nodes;
  create_variable("w", WeightHParams{Shape{hp.num_input_nodes + n, 4 * n}});  // (in + out, 4 * out)
  create_variable("b", WeightHParams{Shape{4 * n}, WeightInit::constant(0.0)});
}

Tree LSTMCell::init_states(int64_t batch_size) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(batch_size >= 0, "LSTMCell '", path(), "': init_states batch_size must be >= 0, got ", batch_size);
  const DType d = hp.fprop_dtype;
  return Tree::dict(
      {{"c", zeros({batch_size, hp.num_output_nodes}, d)}, {"m", zeros({batch_size, hp.num_output_nodes}, d)}});
}

Tree LSTMCell::fprop(const Tree& state, const Array& inputs) const {
  const auto& hp = hparams<HParams>();
  const int64_t n = hp.num_output_nodes;
  PAX_CHECK(state.is_dict() && state.size() == 2 && state.contains("c") && state.contains("m") &&
                state["c"].is_leaf() && state["m"].is_leaf(),
            "LSTMCell '", path(), "': state must be a dict {c, m} of arrays (see init_states), got ", state.str());
  Array x = to_fprop_dtype(inputs);             // (..., in)
  Array c = to_fprop_dtype(state["c"].leaf());  // (..., out)
  Array m = to_fprop_dtype(state["m"].leaf());  // (..., out)
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.num_input_nodes && is_floating(x.dtype()), "LSTMCell '", path(),
            "': inputs ", inputs.aval().str(), " must be floating and end in num_input_nodes = ", hp.num_input_nodes);
  Ints lead(x.shape().dims().begin(), x.shape().dims().end() - 1);
  Ints want = lead;
  want.push_back(n);
  PAX_CHECK(c.shape().dims() == want && m.shape().dims() == want, "LSTMCell '", path(), "': state c ",
            state["c"].leaf().aval().str(), " and m ", state["m"].leaf().aval().str(), " must both be ", ints_str(want),
            " for inputs ", inputs.aval().str());
  Array xmw = matmul(concatenate({x, m}, -1), theta("w")) + theta("b");  // (..., 4 * out)
  std::vector<Array> gates = split(xmw, 4, -1);                          // i_i, i_g, f_g, o_g: (..., out)
  Array forget = gates[2];
  if (hp.forget_gate_bias != 0.0) forget = forget + hp.forget_gate_bias;
  Array new_c = sigmoid(forget) * c + sigmoid(gates[1]) * tanh(gates[0]);
  if (hp.cell_value_cap) new_c = clip(new_c, -*hp.cell_value_cap, *hp.cell_value_cap);
  Array new_m = sigmoid(gates[3]) * (hp.output_nonlinearity ? tanh(new_c) : new_c);
  return Tree::dict({{"c", new_c}, {"m", new_m}});
}

Tree LSTMCell::fprop(const Tree& state, const Array& inputs, const Array& paddings) const {
  Tree next = fprop(state, inputs);
  const Shape& xs = inputs.shape();
  Ints lead(xs.dims().begin(), xs.dims().end() - 1);
  Ints with_one = lead;
  with_one.push_back(1);
  PAX_CHECK(paddings.shape().dims() == lead || paddings.shape().dims() == with_one, "LSTMCell '", path(),
            "': paddings ", paddings.aval().str(), " must be ", ints_str(lead), " or ", ints_str(with_one),
            " for inputs ", inputs.aval().str());
  Array p = reshape(paddings, with_one).astype(next["c"].leaf().dtype());  // (..., 1)
  auto keep = [&](const char* name) {
    Array old = to_fprop_dtype(state[name].leaf());
    return old * p + next[name].leaf() * (1.0 - p);
  };
  return Tree::dict({{"c", keep("c")}, {"m", keep("m")}});
}

PAX_REGISTER_LAYER(LSTMCell);

}  // namespace pax::nn

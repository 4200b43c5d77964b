// LSTMCell: one step of the classic LSTM, as
// praxis.layers.rnn_cell.LstmCellSimple. The state is a dict tree
// {c: cell, m: output (hidden)} (Praxis's NestedMap), so the cell runs
// inside pax::scan over time:
//
//   auto [last, ms] = scan([&](const Tree& s, const Array& x) {
//     Tree next = cell.fprop(s, x);
//     return std::make_pair(next, next["m"].leaf());
//   }, cell.init_states(batch), xs);                        // xs: (T, B, in)
#pragma once

#include <optional>

#include "pax/nn/layer.h"

namespace pax::nn {

// With [x, m] the inputs and the previous output concatenated on the last
// axis, xmw = [x, m] @ w + b splits into four equal parts, in this order
// (Praxis's): i_i (candidate), i_g (input gate), f_g (forget gate), o_g
// (output gate):
//   c' = sigmoid(f_g + forget_gate_bias) * c + sigmoid(i_g) * tanh(i_i)
//   c' = clip(c', -cell_value_cap, cell_value_cap)         (when set)
//   m' = sigmoid(o_g) * tanh(c')   (sigmoid(o_g) * c' without output_nonlinearity)
// w: (num_input_nodes + num_output_nodes, 4 * num_output_nodes), drawn with
// params_init; b: (4 * num_output_nodes,), zeros.
class LSTMCell : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t num_input_nodes = 0;
    int64_t num_output_nodes = 0;
    double forget_gate_bias = 0.0;
    std::optional<double> cell_value_cap = 10.0;
    bool output_nonlinearity = true;
    PAX_HPARAMS(LSTMCell, Layer::HParams, (num_input_nodes, "Depth of the inputs.", range::size),
                (num_output_nodes, "Depth of the cell and of the output m.", range::size),
                (forget_gate_bias, "Added to the forget gate's pre-activation (1 keeps more memory early on).",
                 range::finite),
                (cell_value_cap, "Clip the cell to [-cap, cap]; null: no clipping.", range::non_negative),
                (output_nonlinearity, "Apply tanh to the cell before the output gate."));
  };
  // The zero state {c: (batch_size, out), m: (batch_size, out)} in fprop_dtype.
  Tree init_states(int64_t batch_size) const;
  // One step: state {c: (..., out), m: (..., out)}, inputs (..., in) -> the
  // new state (same structure).
  Tree fprop(const Tree& state, const Array& inputs) const;
  // With paddings (..., 1) or (...,): where 1, the state is carried over
  // unchanged (padded steps at the end of shorter sequences).
  Tree fprop(const Tree& state, const Array& inputs, const Array& paddings) const;

 protected:
  void setup() override;
};

}  // namespace pax::nn

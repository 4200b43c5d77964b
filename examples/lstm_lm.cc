// The seed article's LSTM language model (its PyTorch version first, then
// "pure functions"), run as the article runs it: a one-layer LSTM over 17
// dimensions with learnt embeddings of a 43-token vocabulary and a learnt
// initial state, trained on the sequence 4, 8, 15, 16, 23, 42 with windows of
// bptt_length = 3 for 101 epochs of plain SGD at 0.1, the state carried from
// one window to the next without its gradient (the article's hc.detach()).
// The parameters are a tree and the loss of a window a pure function of
// (params, tokens, h, c); the weights start as the article's do
// (torch.manual_seed(0), torch.rand), so the run prints what the article
// prints:
//
//   Sample before: [0, 34, 34, 34, 34, 34]
//   Loss: 25.953862190246582      (epochs 0, 50 and 100)
//   Loss: 3.7642247080802917
//   Loss: 1.953722357749939
//   Sample after: [4, 8, 15, 16, 23, 42]
//
// (the losses to within float rounding: PyTorch's kernels and these round
// differently in the last bits).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "pax/pax.h"

using namespace pax;

namespace {

constexpr int64_t kVocab = 43;
constexpr int64_t kDim = 17;

// torch.rand after torch.manual_seed(0) on the CPU: MT19937 seeded with 0,
// each float the low 24 bits of one 32-bit draw times 2^-24.
Array torch_rand(std::mt19937& generator, const Shape& shape) {
  std::vector<float> values(size_t(shape.numel()));
  for (float& v : values) v = float(double(generator() & ((1u << 24) - 1)) * std::ldexp(1.0, -24));
  return array(values, shape);
}

// One LSTM step: gates from the input and the previous hidden state.
std::pair<Array, Array> lstm_cell(const Tree& cell, const Array& x, const Array& h, const Array& c) {
  Array ifgo = matmul(cell["weight_ih"].leaf(), x) + matmul(cell["weight_hh"].leaf(), h) + cell["bias"].leaf();
  std::vector<Array> gates = split(ifgo, 4);  // (4 dim,) -> i, f, g, o
  Array i = nn::sigmoid(gates[0]), f = nn::sigmoid(gates[1]), g = tanh(gates[2]), o = nn::sigmoid(gates[3]);
  Array new_c = f * c + i * g;
  return {o * tanh(new_c), new_c};
}

Array embedding(const Tree& params, int token) {
  return reshape(take(params["embeddings"].leaf(), array<int32_t>({token}), 0), {kDim});
}

// The negative log-likelihood of `tokens` from state (h, c), and the final
// state (the article's LSTMLM.forward).
std::pair<Array, std::vector<Array>> window_loss(const Tree& params, const std::vector<int>& tokens, Array h, Array c) {
  Array loss = scalar(0.0f);
  for (int t : tokens) {
    Array log_probs = nn::log_softmax(matmul(params["embeddings"].leaf(), h));  // (vocab,)
    loss = loss - slice_along(log_probs, 0, t, t + 1).astype(DType::f32);
    std::tie(h, c) = lstm_cell(params["cell"], embedding(params, t), h, c);
  }
  return {sum(loss), {h, c}};
}

// The article's greedy_argmax from the learnt initial state (hc_0).
std::string greedy_argmax(const Tree& params, int length = 6) {
  Array c = params["c_0"].leaf(), h = tanh(c);
  std::string out = "[";
  for (int i = 0; i < length; ++i) {
    const int t = argmax(matmul(params["embeddings"].leaf(), h)).item<int32_t>();
    out += (i ? ", " : "") + std::to_string(t);
    std::tie(h, c) = lstm_cell(params["cell"], embedding(params, t), h, c);
  }
  return out + "]";
}

// A double as Python prints it: the shortest digits that read back to it.
std::string python_repr(double value) {
  char digits[32];
  return std::string(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
}

}  // namespace

int main() {
  const std::vector<int> training_data = {4, 8, 15, 16, 23, 42};
  std::mt19937 generator(0);  // torch.manual_seed(0)
  Tree params;
  params["cell"]["weight_ih"] = torch_rand(generator, {4 * kDim, kDim});
  params["cell"]["weight_hh"] = torch_rand(generator, {4 * kDim, kDim});
  params["cell"]["bias"] = zeros({4 * kDim});
  params["embeddings"] = torch_rand(generator, {kVocab, kDim});
  params["c_0"] = zeros({kDim});
  std::printf("Sample before: %s\n", greedy_argmax(params).c_str());

  // The loss of one window as a function of (params, h, c), with the final
  // state as auxiliary output. The first window starts from hc_0 =
  // (tanh(c_0), c_0), so its gradient reaches c_0; the later ones start from
  // the carried state.
  auto window_grad = [](const std::vector<int>& window, bool first) {
    return value_and_grad(
        [window, first](const Tree& p, const Array& h, const Array& c) {
          const Array& c0 = p["c_0"].leaf();
          return first ? window_loss(p, window, tanh(c0), c0) : window_loss(p, window, h, c);
        },
        has_aux);
  };
  const size_t bptt_length = 3;
  for (int epoch = 0; epoch < 101; ++epoch) {
    Array h = zeros({kDim}), c = zeros({kDim});  // replaced by hc_0 in the first window
    double total_loss = 0;
    for (size_t start = 0; start < training_data.size(); start += bptt_length) {
      const std::vector<int> batch(training_data.begin() + long(start),
                                   training_data.begin() + long(std::min(training_data.size(), start + bptt_length)));
      auto [loss_state, grads] = window_grad(batch, start == 0)(params, h, c);
      auto [loss, state] = loss_state;
      h = stop_gradient(state[0]);  // hc.detach()
      c = stop_gradient(state[1]);
      if (epoch % 50 == 0) total_loss += loss.item<float>();
      // param.data -= param.grad * 0.1
      params = tree_map([](const Array& p, const Array& g) { return p - g * 0.1f; }, params, grads);
    }
    if (total_loss != 0) std::printf("Loss: %s\n", python_repr(total_loss).c_str());
  }
  std::printf("Sample after: %s\n", greedy_argmax(params).c_str());
  return 0;
}

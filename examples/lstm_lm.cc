// The seed article's LSTM language model, written as pure functions: the
// parameters are a tree, the loss over a window of tokens is a function of
// (params, tokens, h, c), and truncated backprop through time stops the
// gradient at the state carried from one window to the next. Trained with
// SGD + momentum (optax-style, with gradient clipping and a cosine schedule),
// then sampled greedily.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "pax/pax.h"

using namespace pax;

namespace {

constexpr int64_t kVocab = 128;  // bytes
constexpr int64_t kDim = 32;

// One LSTM step: gates from the input and the previous hidden state.
std::pair<Array, Array> lstm_cell(const Tree& cell, const Array& x, const Array& h, const Array& c) {
  Array ifgo = matmul(cell["w_ih"].leaf(), x) + matmul(cell["w_hh"].leaf(), h) + cell["b"].leaf();  // (4 dim,)
  std::vector<Array> gates = split(ifgo, 4);
  Array i = nn::sigmoid(gates[0]), f = nn::sigmoid(gates[1]), g = tanh(gates[2]), o = nn::sigmoid(gates[3]);
  Array new_c = f * c + i * g;
  return {o * tanh(new_c), new_c};
}

// Negative log-likelihood of `tokens` starting from state (h, c); returns the
// loss and the final state.
std::pair<Array, std::vector<Array>> window_loss(const Tree& params, const std::vector<int>& tokens, Array h, Array c) {
  const Array& emb = params["embeddings"].leaf();  // (vocab, dim)
  Array loss = scalar(0.0f);
  for (int t : tokens) {
    Array log_probs = nn::log_softmax(matmul(emb, h));  // (vocab,)
    loss = loss - slice_along(log_probs, 0, t, t + 1).astype(DType::f32);
    Array x = take(emb, array<int32_t>({t}), 0);  // (1, dim)
    std::tie(h, c) = lstm_cell(params["cell"], reshape(x, {kDim}), h, c);
  }
  return {sum(loss), {h, c}};
}

std::string greedy_sample(const Tree& params, int length) {
  Array c = params["c_0"].leaf(), h = tanh(c);
  const Array& emb = params["embeddings"].leaf();
  std::string out;
  for (int i = 0; i < length; ++i) {
    int t = argmax(matmul(emb, h)).item<int32_t>();
    out += t >= 32 && t < 127 ? char(t) : '?';
    std::tie(h, c) = lstm_cell(params["cell"], reshape(take(emb, array<int32_t>({t}), 0), {kDim}), h, c);
  }
  return out;
}

}  // namespace

int main() {
  const std::string text = "pure functions, pure joy.";
  std::vector<int> data(text.begin(), text.end());

  auto keys = random::split_keys(random::key(0), 3);
  Tree params;
  params["cell"]["w_ih"] = random::uniform(keys[0], {4 * kDim, kDim}, DType::f32, -0.3, 0.3);
  params["cell"]["w_hh"] = random::uniform(keys[1], {4 * kDim, kDim}, DType::f32, -0.3, 0.3);
  params["cell"]["b"] = zeros({4 * kDim});
  params["embeddings"] = random::uniform(keys[2], {kVocab, kDim}, DType::f32, -0.3, 0.3);
  params["c_0"] = zeros({kDim});

  std::printf("sample before: \"%s\"\n", greedy_sample(params, int(text.size())).c_str());

  // loss(params, h, c) for one window, with the final state as auxiliary
  // output. The first window starts from the learned initial state, so its
  // gradient reaches c_0; later windows start from the carried state.
  auto step_grad = [](const std::vector<int>& window, bool first) {
    return value_and_grad(
        [window, first](const Tree& p, const Array& h, const Array& c) {
          const Array& c0 = p["c_0"].leaf();
          auto [loss, state] = first ? window_loss(p, window, tanh(c0), c0) : window_loss(p, window, h, c);
          return std::make_pair(loss, state);
        },
        has_aux);
  };

  // SGD with momentum and a cosine-decayed learning rate; clipping the
  // gradient norm keeps the exploding gradients a recurrent net meets now and
  // then from undoing the training.
  // Windows of 13 tokens: each "pure " and the word that follows it (which
  // differs between the two) fall into one window, so the gradient teaches
  // the state to tell them apart, and training ends near zero loss whatever
  // the CPU's rounding (with 5, the sample depended on it).
  // The schedule decays over exactly the steps taken: epochs x windows, so
  // that the last step still learns (a step at count >= decay_steps runs at
  // learning rate 0).
  const size_t bptt = 13;
  const int epochs = 200;
  const int64_t decay_steps = epochs * int64_t((data.size() + bptt - 1) / bptt);
  const optim::Schedule learning_rate = optim::cosine_decay_schedule(0.05, decay_steps);
  optim::GradientTransformation tx = optim::chain({optim::clip_by_global_norm(2.0), optim::sgd(learning_rate, 0.9)});
  Tree opt_state = tx.init(params);
  int64_t steps = 0;
  double lowest_rate = 1.0;  // the smallest learning rate a step ran at
  for (int epoch = 0; epoch < epochs; ++epoch) {
    Array h = zeros({kDim}), c = zeros({kDim});  // replaced by c_0 in the first window
    float total = 0;
    for (size_t start = 0; start < data.size(); start += bptt) {
      std::vector<int> window(data.begin() + long(start), data.begin() + long(std::min(data.size(), start + bptt)));
      auto [value_state, grads] = step_grad(window, start == 0)(params, h, c);
      auto [loss, state] = value_state;
      total += loss.item<float>();
      h = stop_gradient(state[0]);
      c = stop_gradient(state[1]);
      lowest_rate = std::min(lowest_rate, learning_rate(scalar<int32_t>(int32_t(steps++))).item<double>());
      auto [updates, new_state] = tx.update(grads, opt_state, params);
      opt_state = new_state;
      params = optim::apply_updates(params, updates);
    }
    if (epoch % 25 == 0 || epoch == epochs - 1) std::printf("epoch %3d  loss %.4f\n", epoch, total);
  }
  std::printf("%lld steps of %lld, each at a learning rate > 0: %s\n", (long long)steps, (long long)decay_steps,
              steps == decay_steps && lowest_rate > 0 ? "yes" : "no");
  std::printf("sample after:  \"%s\"\n", greedy_sample(params, int(text.size())).c_str());
  return 0;
}

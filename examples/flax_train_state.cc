// flax.training.train_state.TrainState's example, as the Flax API page
// reads: a Dense(2) layer, TrainState.create(apply_fn=model.apply,
// params=..., tx=optax.adam(1e-3)), a loss through state.apply_fn, one
// apply_gradients(grads=...), and the loss before and after, printed as JAX
// prints them: Array(3.3514676, dtype=float32), Array(3.343844, dtype=float32).
//
// Flax draws Dense's kernel from jax.random.key(0) with its own key
// derivation; the kernel here is the one it draws
// (pax/train/testdata/make_train_state_fixture.py prints it).
#include <charconv>
#include <cstdio>
#include <string>

#include "pax/pax.h"

using namespace pax;

// A float32 scalar as JAX prints it: the shortest digits that read back to it.
void print_array(float value) {
  char digits[32];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  std::printf("Array(%s, dtype=float32)\n", std::string(digits, end).c_str());
}

int main() {
  // model = nn.Dense(2); variables = model.init(jax.random.key(0), x)
  nn::FeedForward::HParams dense;
  dense.input_dims = 2;
  dense.output_dims = 2;
  dense.activation_tpl = nn::tpl<nn::Identity>();
  auto model = nn::build<nn::FeedForward>(dense);
  const Array kernel = array<float>({-0x1.1ac472p+0f, -0x1.2fd4p+0f, -0x1.d9db3ap-1f, 0x1.0d32fcp-3f}, Shape{2, 2});
  const Tree params = Tree::dict({{"bias", Tree::dict({{"b", zeros({2})}})}, {"linear", Tree::dict({{"w", kernel}})}});

  // state = TrainState.create(apply_fn=model.apply, params=variables['params'], tx=tx)
  const train::ApplyFn apply_fn = [&](const Tree& variables, const Tree& x) {
    return Tree(nn::apply(*model, variables, x.leaf()).output);
  };
  train::TrainState state = train::TrainState::create(apply_fn, params, optim::adam(1e-3));

  const Array x = ones({1, 2}), y = ones({1, 2});
  auto loss_fn = [&](const Tree& p) {
    const Array predictions = state.apply_fn(Tree::dict({{"params", p}}), Tree(x)).leaf();
    return mean(optim::l2_loss(predictions, y));
  };
  print_array(loss_fn(state.params).item<float>());
  const Tree grads = grad(loss_fn)(state.params);
  state = state.apply_gradients(grads);
  print_array(loss_fn(state.params).item<float>());
  return 0;
}

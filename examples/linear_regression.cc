// The seed article's first example, written functionally: a 1-D linear
// regressor whose loss is a pure function of a parameter dict {w, b}; grad
// gives the gradient tree, and a tree_map applies the update.
//   loss = sqrt(sum((y - (w x + b))^2))
#include <cstdio>

#include "pax/pax.h"

int main() {
  using namespace pax;

  auto predict = [](const Tree& params, const Array& x) { return params["w"].leaf() * x + params["b"].leaf(); };
  auto loss_fn = [&](const Tree& params, const Array& xs, const Array& ys) {
    return sqrt(sum(square(ys - predict(params, xs))));
  };
  auto grad_fn = grad(loss_fn);  // with respect to the first argument, the params tree

  Tree params = Tree::dict({{"w", scalar(13.0f)}, {"b", scalar(0.0f)}});
  Array xs = array<float>({42.0f});
  Array ys = array<float>({500.0f});

  std::printf("prediction for 42 before training: %.4f\n", predict(params, scalar(42.0f)).item<float>());
  const float lr = 0.002f;
  for (int step = 0; step < 15; ++step) {
    std::printf("step %2d  loss %.5f\n", step, loss_fn(params, xs, ys).item<float>());
    Tree grads = grad_fn(params, xs, ys);
    params = tree_map([lr](const Array& p, const Array& g) { return p - lr * g; }, params, grads);
  }
  std::printf("prediction for 42 after training:  %.4f\n", predict(params, scalar(42.0f)).item<float>());
  return 0;
}

// A first paxcc program: arrays, numpy-style arithmetic with broadcasting,
// reductions, matmul, softmax and random numbers — everything a newcomer
// meets before transforms and layers.
#include <iostream>

#include "pax/pax.h"

int main() {
  using namespace pax;

  // Creation and numpy broadcasting: (2, 3) + (3,) -> (2, 3).
  Array x = arange(6).astype(DType::f32);
  x = reshape(x, {2, 3});
  Array bias = array<float>({10, 20, 30});
  std::cout << "x + bias =\n" << x + bias << "\n\n";

  // Weak C++ scalars keep the array's dtype, as Python scalars do in JAX.
  Array h = ones({2, 2}, DType::bf16) * 0.5;
  std::cout << "bf16 * 0.5 = " << h << "\n\n";

  // Reductions with axes and keepdims.
  std::cout << "sum over axis 1 = " << sum(x, 1) << "\n";
  std::cout << "mean, keepdims  = " << mean(x, {0, 1}, true) << "\n\n";

  // Matrix multiply (oneDNN underneath) and einsum.
  Array w = reshape(arange(12).astype(DType::f32), {3, 4});
  std::cout << "x @ w =\n" << matmul(x, w) << "\n";
  std::cout << std::boolalpha
            << "einsum('ij,jk->ik') agrees: " << all(equal(einsum("ij,jk->ik", x, w), matmul(x, w))).item<bool>()
            << "\n\n";

  // A numerically stable softmax over the last axis.
  Array logits = array<float>({1, 2, 3, 1000, 1001, 1002}, {2, 3});
  std::cout << "softmax =\n" << nn::softmax(logits) << "\n\n";

  // Counter-based random numbers: the same key always gives the same values.
  Array key = random::key(0);
  auto keys = random::split_keys(key, 2);
  std::cout << "split(key(0)) = " << random::split(key) << "\n";
  std::cout << "normal(subkey, (3,)) = " << random::normal(keys[1], {3}) << "\n";
  std::cout << "uniform(subkey, (2, 2)) =\n" << random::uniform(keys[0], {2, 2}) << "\n";
  return 0;
}

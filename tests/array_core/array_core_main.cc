// A program that uses only the array core: arrays, lax, grad, vmap and jit,
// linked against the core, ir, compile and backend_cpu layers alone (no MPI,
// SentencePiece or zlib; tests/CMakeLists.txt checks its dynamic
// dependencies too). It checks its results against values computed here and
// exits non-zero on any mismatch.
#include <cmath>
#include <cstdio>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/ops/lax.h"

namespace {

int failures = 0;

void expect_near(const char* what, double got, double want) {
  if (std::fabs(got - want) > 1e-5 * (1 + std::fabs(want))) {
    std::printf("FAIL %s: got %.8g, want %.8g\n", what, got, want);
    ++failures;
  }
}

// f(x) = sum(tanh(x) * x)
pax::Array f(const pax::Array& x) { return pax::lax::reduce_sum(pax::lax::mul(pax::lax::tanh(x), x), {0}); }

}  // namespace

int main() {
  const std::vector<float> xs = {-1.5f, -0.25f, 0.0f, 0.5f, 2.0f};
  const pax::Array x = pax::array(xs);
  double want_f = 0;
  std::vector<double> want_g;
  for (float v : xs) {
    const double t = std::tanh(double(v));
    want_f += t * v;
    want_g.push_back(t + v * (1 - t * t));  // d/dx tanh(x) x
  }
  expect_near("f", pax::jit(f)(x).item<float>(), want_f);
  const std::vector<float> g = pax::jit(pax::grad(f))(x).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) expect_near("grad f", g[i], want_g[i]);
  // vmap of grad over a batch of two rows, the second doubled.
  const pax::Array batch =
      pax::array(std::vector<float>{-1.5f, -0.25f, 0.0f, 0.5f, 2.0f, -3.0f, -0.5f, 0.0f, 1.0f, 4.0f}, pax::Shape{2, 5});
  const std::vector<float> gb = pax::jit(pax::vmap(pax::grad(f)))(batch).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = 2.0 * xs[i], t = std::tanh(v);
    expect_near("vmap grad f", gb[i], want_g[i]);
    expect_near("vmap grad f (row 2)", gb[xs.size() + i], t + v * (1 - t * t));
  }
  std::printf(failures ? "array core: %d failure(s)\n" : "array core: grad, vmap and jit agree with the reference\n",
              failures);
  return failures ? 1 : 0;
}

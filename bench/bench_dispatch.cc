// Eager dispatch overhead: the cost of one operation on a 1-element array,
// which is all bookkeeping (shape rule, result allocation, kernel call).
#include <benchmark/benchmark.h>

#include "pax/pax.h"

namespace {

void BM_LaxAddScalar(benchmark::State& state) {
  pax::Array a = pax::array<float>({1.0f});
  pax::Array b = pax::array<float>({2.0f});
  for (auto _ : state) {
    pax::Array c = pax::lax::add(a, b);
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_LaxAddScalar);

void BM_LaxExpScalar(benchmark::State& state) {
  pax::Array a = pax::array<float>({1.0f});
  for (auto _ : state) {
    pax::Array c = pax::lax::exp(a);
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_LaxExpScalar);

// numpy-level add: promotion and broadcasting checks on top of the primitive.
void BM_NumpyAddScalar(benchmark::State& state) {
  pax::Array a = pax::array<float>({1.0f});
  pax::Array b = pax::array<float>({2.0f});
  for (auto _ : state) {
    pax::Array c = a + b;
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_NumpyAddScalar);

// A weak C++ literal operand is materialised as a scalar and broadcast.
void BM_NumpyAddLiteral(benchmark::State& state) {
  pax::Array a = pax::array<float>({1.0f});
  for (auto _ : state) {
    pax::Array c = a + 2.0;
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_NumpyAddLiteral);

void BM_ReshapeScalar(benchmark::State& state) {
  pax::Array a = pax::array<float>({1.0f});
  for (auto _ : state) {
    pax::Array c = pax::lax::reshape(a, {1, 1});
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_ReshapeScalar);

}  // namespace

BENCHMARK_MAIN();

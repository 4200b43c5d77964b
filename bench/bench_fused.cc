// Fused-loop microbenchmarks on the shapes of the GPT step, in f32 and bf16:
// bias + GELU forward with its residuals, and its backward. Run with
// PAX_COMPILE=sync (generated code built before timing) or off (interpreted).
#include <benchmark/benchmark.h>

#include "pax/pax.h"

namespace {

using pax::Array;
using pax::DType;

constexpr int64_t kRows = 2048, kCols = 1024;

Array rnd(int seed, pax::Shape s, DType dt) {
  return pax::random::uniform(pax::random::key(seed), s, DType::f32, -2.0, 2.0).astype(dt);
}

std::vector<Array> gelu_fwd(const Array& h, const Array& b) {
  Array x = h + b;
  Array x2 = x * x;
  Array t = pax::tanh((x + x2 * x * 0.044715) * 0.7978845608);
  Array a = t + 1.0;
  Array half = x * 0.5;
  return {x, x2, a, half, half * a, 1.0 - t * t};
}

void BM_GeluFwd(benchmark::State& state, DType dt) {
  Array h = rnd(0, {kRows, kCols}, dt), b = rnd(1, {kCols}, dt);
  auto f = pax::jit([](const Array& h, const Array& b) { return gelu_fwd(h, b); });
  f(h, b);
  for (auto _ : state) benchmark::DoNotOptimize(f(h, b));
}
BENCHMARK_CAPTURE(BM_GeluFwd, f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GeluFwd, bf16, DType::bf16)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GeluBwd(benchmark::State& state, DType dt) {
  Array g = rnd(2, {kRows, kCols}, dt);
  std::vector<Array> r = gelu_fwd(rnd(0, {kRows, kCols}, dt), rnd(1, {kCols}, dt));
  auto f = pax::jit([](const Array& g, const Array& x, const Array& x2, const Array& a, const Array& half,
                       const Array& s) {
    Array gx = g * a * 0.5;
    Array gt = g * half * s * 0.7978845608;
    Array dx = gx + gt + gt * 0.044715 * x2 + gt * 0.044715 * x * x * 2.0;
    return std::vector<Array>{dx, pax::sum(dx, {0})};
  });
  f(g, r[0], r[1], r[2], r[3], r[5]);
  for (auto _ : state) benchmark::DoNotOptimize(f(g, r[0], r[1], r[2], r[3], r[5]));
}
BENCHMARK_CAPTURE(BM_GeluBwd, f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_GeluBwd, bf16, DType::bf16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

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
  auto f =
      pax::jit([](const Array& g, const Array& x, const Array& x2, const Array& a, const Array& half, const Array& s) {
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

// The attention softmax's normalisation: a row-broadcast division.
void BM_RowDivide(benchmark::State& state, DType dt) {
  Array e = rnd(3, {8, 4, 256, 256}, dt), s = rnd(4, {8, 4, 256, 1}, dt) + 3.0;
  auto f = pax::jit([](const Array& e, const Array& s) { return e / s; });
  f(e, s);
  for (auto _ : state) benchmark::DoNotOptimize(f(e, s));
}
BENCHMARK_CAPTURE(BM_RowDivide, f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same on inputs that are not in the cache (eight sets, 128 MiB in all),
// as in a training step.
void BM_RowDivideCold(benchmark::State& state, DType dt) {
  std::vector<Array> e, s;
  for (int k = 0; k < 8; ++k) {
    e.push_back(rnd(10 + k, {8, 4, 256, 256}, dt));
    s.push_back(rnd(20 + k, {8, 4, 256, 1}, dt) + 3.0);
  }
  auto f = pax::jit([](const Array& e, const Array& s) { return e / s; });
  f(e[0], s[0]);
  size_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(e[k], s[k]));
    k = (k + 1) % e.size();
  }
}
BENCHMARK_CAPTURE(BM_RowDivideCold, f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GPT step's MLP forward loop: bias add and tanh-GELU, two outputs. On
// inputs in the cache (1 set of 8 MiB) or not (32 sets, 256 MiB in all).
void BM_BiasGelu(benchmark::State& state) {
  std::vector<Array> h;
  for (int k = 0; k < state.range(0); ++k) h.push_back(rnd(100 + k, {kRows, kCols}, DType::f32));
  const Array b = rnd(1, {kCols}, DType::f32);
  auto f = pax::jit([](const Array& h, const Array& b) {
    Array x = h + b;
    return std::vector<Array>{x, pax::nn::gelu(x, true)};
  });
  f(h[0], b);
  size_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(h[k], b));
    k = (k + 1) % h.size();
  }
}
BENCHMARK(BM_BiasGelu)->Arg(1)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();

// The MLP's bias + GELU and its derivative, as a training step runs them
// (PAX_PROFILE=1 splits the forward loop from the backward's).
void BM_BiasGeluGrad(benchmark::State& state) {
  const Array h = rnd(100, {kRows, kCols}, DType::f32), b = rnd(1, {kCols}, DType::f32),
              w = rnd(101, {kRows, kCols}, DType::f32);
  auto f =
      pax::jit(pax::grad<0>([&](const Array& h, const Array& b) { return pax::sum(pax::nn::gelu(h + b, true) * w); }));
  f(h, b);
  for (auto _ : state) benchmark::DoNotOptimize(f(h, b));
}
BENCHMARK(BM_BiasGeluGrad)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same loop after the product that feeds it (the MLP's first layer, its
// output written by oneDNN just before the loop reads it); PAX_PROFILE=1
// splits the time between the two.
void BM_MatmulBiasGelu(benchmark::State& state) {
  const Array x = rnd(2, {kRows, 256}, DType::f32), w = rnd(3, {256, kCols}, DType::f32);
  const Array b = rnd(1, {kCols}, DType::f32);
  auto f = pax::jit([](const Array& x, const Array& w, const Array& b) {
    Array h = pax::matmul(x, w) + b;
    return std::vector<Array>{h, pax::nn::gelu(h, true)};
  });
  f(x, w, b);
  for (auto _ : state) benchmark::DoNotOptimize(f(x, w, b));
}
BENCHMARK(BM_MatmulBiasGelu)->Unit(benchmark::kMillisecond)->UseRealTime();

// A plain two-input loop: memory bound (24 MiB read and written).
void BM_AxPlusY(benchmark::State& state, DType dt) {
  Array x = rnd(5, {kRows, kCols}, dt), y = rnd(6, {kRows, kCols}, dt);
  auto f = pax::jit([](const Array& x, const Array& y) { return x * 3.0 + y * y; });
  f(x, y);
  for (auto _ : state) benchmark::DoNotOptimize(f(x, y));
}
BENCHMARK_CAPTURE(BM_AxPlusY, f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();

// The attention softmax of the GPT step, forward and backward, on one set
// of inputs (in a large last-level cache) or eight (64 MiB each, not): masked logits -> probabilities (kept for the
// matmul with the values) and the logits' gradient, from the probabilities
// alone as attention_probs (nn/attention.cc) forms it.
void BM_AttentionSoftmax(benchmark::State& state) {
  std::vector<Array> x, g;
  for (int k = 0; k < state.range(0); ++k) {
    x.push_back(rnd(30 + k, {8, 4, 256, 256}, DType::f32));
    g.push_back(rnd(40 + k, {8, 4, 256, 256}, DType::f32));
  }
  const Array mask = rnd(50, {8, 1, 256, 256}, DType::f32) > 0.0;
  const auto probs = pax::custom_vjp([](const Array& l) { return pax::nn::softmax(l, -1); },
                                     [](const Array& l) {
                                       Array p = pax::nn::softmax(l, -1);
                                       return std::make_pair(p, p);
                                     },
                                     [](const Array& p, const Array& g) {
                                       const Array gp = g * p;
                                       return gp - p * pax::sum(gp, {-1}, true);
                                     });
  auto f = pax::jit([&](const Array& x, const Array& mask, const Array& g) {
    auto [p, back] = pax::vjp([&](const Array& l) { return probs(pax::where(mask, l, pax::full_like(l, -1e30))); }, x);
    return std::vector<Array>{p, back(g)};
  });
  f(x[0], mask, g[0]);
  size_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(x[k], mask, g[k]));
    k = (k + 1) % x.size();
  }
}
BENCHMARK(BM_AttentionSoftmax)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GPT step's loss: softmax cross-entropy of (8, 256, 4096) f32 logits
// with integer labels, its value and the logits' gradient.
void BM_CrossEntropy(benchmark::State& state) {
  const Array logits = rnd(60, {8, 256, 4096}, DType::f32);
  const Array labels = pax::random::randint(pax::random::key(61), {8, 256}, 0, 4096);
  auto f = pax::jit(pax::value_and_grad<0>([](const Array& logits, const Array& labels) {
    return pax::mean(pax::nn::softmax_cross_entropy_with_integer_labels(logits, labels));
  }));
  f(logits, labels);
  for (auto _ : state) benchmark::DoNotOptimize(f(logits, labels));
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GPT step's residual add and pre-LN layer norm (8 x 256 rows of 256),
// forward and backward: one row sweep each way. On inputs in the cache (1
// set) or not (16 sets of 2 MiB each, 32 MiB in all).
void BM_ResidualLayerNorm(benchmark::State& state) {
  std::vector<Array> h, r;
  for (int k = 0; k < state.range(0); ++k) {
    h.push_back(rnd(70 + k, {2048, 256}, DType::f32));
    r.push_back(rnd(90 + k, {8, 256, 256}, DType::f32));
  }
  const Array b = rnd(71, {256}, DType::f32), scale = rnd(72, {256}, DType::f32),
              w = rnd(73, {8, 256, 256}, DType::f32);
  auto f = pax::jit(pax::value_and_grad<0>([&](const Array& h, const Array& b, const Array& r) {
    const Array x = r + pax::reshape(h + b, {8, 256, 256});
    const Array m = pax::mean(x, -1, true);
    const Array c = x - m;
    const Array y = c * pax::rsqrt(pax::mean(c * c, -1, true) + 1e-5) * scale;
    return pax::sum(y * w);
  }));
  f(h[0], b, r[0]);
  size_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(h[k], b, r[k]));
    k = (k + 1) % h.size();
  }
}
BENCHMARK(BM_ResidualLayerNorm)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GPT step's optimizer: AdamW (weight decay 0.01) on one parameter of
// the given shape, its update and moments, donated as in the train step; on
// one state kept in the cache (range 1) or cycling through several (their
// parameters, gradients and moments 64 MiB or more in all).
void BM_AdamW(benchmark::State& state, pax::Shape shape) {
  using pax::train::TrainState;
  pax::optim::GradientTransformation tx = pax::optim::adamw(3e-4, {.weight_decay = 0.01});
  auto f = pax::jit([&](const TrainState& s, const pax::Tree& g) { return s.apply_gradients(tx, g); },
                    {.donate_argnums = {0}});
  std::vector<TrainState> states;
  std::vector<pax::Tree> grads;
  for (int64_t k = 0; k < state.range(0); ++k) {
    grads.push_back(pax::Tree::dict({{"w", rnd(80 + int(k), shape, DType::f32)}}));
    states.push_back(f(TrainState::create(pax::Tree::dict({{"w", rnd(81, shape, DType::f32)}}), tx), grads.back()));
  }
  size_t k = 0;
  for (auto _ : state) {
    states[k] = f(std::move(states[k]), grads[k]);
    benchmark::DoNotOptimize(states[k].step.item<int32_t>());
    k = (k + 1) % states.size();
  }
}
BENCHMARK_CAPTURE(BM_AdamW, qkv, pax::Shape{256, 3, 4, 64})
    ->Arg(1)
    ->Arg(16)
    ->Arg(96)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AdamW, mlp, pax::Shape{256, 1024})->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AdamW, embedding, pax::Shape{4096, 256})
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();

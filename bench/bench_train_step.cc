// Training-step benchmarks: an MLP (batch 128, 784-512-256-10) step eager vs
// jit, and the trace + compile time of a 4-layer transformer training step
// written as pure functions.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>

#include "pax/pax.h"

namespace {

using namespace pax;

// ---------------------------------------------------------------------------
// MLP

Tree mlp_init(const Array& key) {
  const int64_t sizes[] = {784, 512, 256, 10};
  auto keys = random::split_keys(key, 3);
  Tree params;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "layer" + std::to_string(i);
    const double scale = std::sqrt(2.0 / double(sizes[i]));
    params[name]["w"] = random::normal(keys[size_t(i)], {sizes[i], sizes[i + 1]}) * scale;
    params[name]["b"] = zeros({sizes[i + 1]});
  }
  return params;
}

Array mlp_loss(const Tree& params, const Array& x, const Array& labels) {
  Array h = x;
  for (int i = 0; i < 3; ++i) {
    const Tree& layer = params["layer" + std::to_string(i)];
    h = matmul(h, layer["w"].leaf()) + layer["b"].leaf();
    if (i < 2) h = nn::relu(h);
  }
  Array logp = nn::log_softmax(h);
  return -mean(sum(logp * nn::one_hot(labels, 10), -1));
}

Tree mlp_step(const Tree& params, const Array& x, const Array& labels) {
  Tree g = grad(mlp_loss)(params, x, labels);
  return tree_map([](const Array& p, const Array& d) { return p - 0.01 * d; }, params, g);
}

struct MlpData {
  Tree params = mlp_init(random::key(0));
  Array x = random::normal(random::key(1), {128, 784});
  Array labels = random::randint(random::key(2), {128}, 0, 10);
};

// FLOPs of one step: forward 2*B*sum(in*out), backward twice that.
double mlp_flops() { return 6.0 * 128 * (784 * 512 + 512 * 256 + 256 * 10); }

void BM_MlpStepEager(benchmark::State& state) {
  MlpData d;
  for (auto _ : state) d.params = mlp_step(d.params, d.x, d.labels);
  state.counters["GFLOP/s"] = benchmark::Counter(mlp_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlpStepEager)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MlpStepJit(benchmark::State& state) {
  MlpData d;
  auto step = jit(mlp_step, {.donate_argnums = {0}});
  d.params = step(std::move(d.params), d.x, d.labels);  // trace + compile outside the timing
  for (auto _ : state) d.params = step(std::move(d.params), d.x, d.labels);
  state.counters["GFLOP/s"] = benchmark::Counter(mlp_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlpStepJit)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------------------
// A 4-layer GPT-style transformer step (d=256, 4 heads, seq 128, batch 8,
// vocab 4096), written with the numpy / nn API.

constexpr int64_t kLayers = 4, kD = 256, kHeads = 4, kSeq = 128, kBatch = 8, kVocab = 4096;

Array layer_norm(const Array& x, const Array& scale, const Array& bias) {
  return nn::standardize(x, -1, 1e-5) * scale + bias;
}

Tree gpt_init(const Array& key) {
  auto keys = random::split_keys(key, 2 + 4 * kLayers);
  Tree p;
  p["wte"] = random::normal(keys[0], {kVocab, kD}) * 0.02;
  p["wpe"] = random::normal(keys[1], {kSeq, kD}) * 0.02;
  for (int64_t l = 0; l < kLayers; ++l) {
    Tree b;
    size_t k = size_t(2 + 4 * l);
    b["ln1_s"] = ones({kD});
    b["ln1_b"] = zeros({kD});
    b["qkv"] = random::normal(keys[k], {kD, 3 * kD}) * 0.02;
    b["proj"] = random::normal(keys[k + 1], {kD, kD}) * 0.02;
    b["ln2_s"] = ones({kD});
    b["ln2_b"] = zeros({kD});
    b["fc"] = random::normal(keys[k + 2], {kD, 4 * kD}) * 0.02;
    b["out"] = random::normal(keys[k + 3], {4 * kD, kD}) * 0.02;
    p["blocks"].push_back(b);
  }
  p["lnf_s"] = ones({kD});
  p["lnf_b"] = zeros({kD});
  return p;
}

Array gpt_loss(const Tree& p, const Array& tokens, const Array& targets) {
  const int64_t hd = kD / kHeads;
  Array x = take(p["wte"].leaf(), tokens, 0) + p["wpe"].leaf();  // (B, T, D)
  Array mask = tril(ones({kSeq, kSeq}, DType::bool_));
  for (int64_t l = 0; l < kLayers; ++l) {
    const Tree& b = p["blocks"][size_t(l)];
    Array qkv = matmul(layer_norm(x, b["ln1_s"].leaf(), b["ln1_b"].leaf()), b["qkv"].leaf());  // (B, T, 3D)
    std::vector<Array> parts = split(reshape(qkv, {kBatch, kSeq, 3, kHeads, hd}), 3, 2);
    Array q = squeeze(parts[0], 2), k = squeeze(parts[1], 2), v = squeeze(parts[2], 2);  // (B, T, H, hd)
    Array att = einsum("bthd,bshd->bhts", q, k) * (1.0 / std::sqrt(double(hd)));
    att = nn::softmax(where(mask, att, -1e9));
    Array y = reshape(einsum("bhts,bshd->bthd", att, v), {kBatch, kSeq, kD});
    x = x + matmul(y, b["proj"].leaf());
    Array h = nn::gelu(matmul(layer_norm(x, b["ln2_s"].leaf(), b["ln2_b"].leaf()), b["fc"].leaf()));
    x = x + matmul(h, b["out"].leaf());
  }
  Array logits = matmul(layer_norm(x, p["lnf_s"].leaf(), p["lnf_b"].leaf()), transpose(p["wte"].leaf()));
  Array logp = nn::log_softmax(logits);
  return -mean(take_along_axis(logp, expand_dims(targets, {-1}), -1));
}

Tree gpt_step(const Tree& p, const Array& tokens, const Array& targets) {
  Tree g = grad(gpt_loss)(p, tokens, targets);
  return tree_map([](const Array& w, const Array& d) { return w - 1e-3 * d; }, p, g);
}

void BM_TransformerTraceAndCompile(benchmark::State& state) {
  Tree params = gpt_init(random::key(0));
  Array tokens = random::randint(random::key(1), {kBatch, kSeq}, 0, kVocab);
  Array targets = random::randint(random::key(2), {kBatch, kSeq}, 0, kVocab);
  size_t eqns = 0;
  for (auto _ : state) {
    auto lowered = jit(gpt_step).lower(params, tokens, targets);  // a fresh jit: trace every time
    auto compiled = lowered.compile();
    eqns = lowered.jaxpr().eqns.size();
    benchmark::DoNotOptimize(&compiled);
  }
  state.counters["equations"] = double(eqns);
}
BENCHMARK(BM_TransformerTraceAndCompile)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_TransformerStepJit(benchmark::State& state) {
  Tree params = gpt_init(random::key(0));
  Array tokens = random::randint(random::key(1), {kBatch, kSeq}, 0, kVocab);
  Array targets = random::randint(random::key(2), {kBatch, kSeq}, 0, kVocab);
  auto step = jit(gpt_step, {.donate_argnums = {0}});
  params = step(std::move(params), tokens, targets);
  for (auto _ : state) params = step(std::move(params), tokens, targets);
  state.counters["tokens/s"] = benchmark::Counter(double(kBatch * kSeq), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TransformerStepJit)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

// The dot_product_attention primitive's forward and backward (eager, through
// lax::dot_product_attention and its vjp) at training shapes: [B, T, N, H]
// queries against T keys, causal (as is_causal or as a mask array, the way
// the language models pass it) or not, f32 and bf16. GFLOP/s count the
// products a causal pass needs: 4 B N T S H / 2 forward, twice that backward.
//   ./build/bench/bench_attention --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"

namespace {

using pax::Array;
using pax::DType;

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  enum Causal { none, flag, mask } causal;
  DType dtype;
  std::string name() const {
    const char* how[] = {"full", "is_causal", "causal_mask"};
    return std::to_string(batch) + "x" + std::to_string(seq) + "x" + std::to_string(heads) + "x" +
           std::to_string(head_dim) + "/" + how[causal] + "/" + pax::dtype_name(dtype);
  }
  double forward_flops() const {
    const double full = 4.0 * double(batch * heads) * double(seq) * double(seq) * double(head_dim);
    return causal == none ? full : full / 2;
  }
};

// Values in [-1, 1) from a fixed linear congruential sequence.
Array fill_array(const pax::Shape& shape, DType dtype, uint32_t seed) {
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1 << 24) * 2.0f - 1.0f;
  }
  return pax::from_host(v.data(), shape, DType::f32).astype(dtype);
}

struct Operands {
  Array q, k, v, dout;
  pax::lax::AttentionOptions options;
  explicit Operands(const AttentionCase& c) {
    const pax::Shape shape{c.batch, c.seq, c.heads, c.head_dim};  // [B, T, N, H]
    q = fill_array(shape, c.dtype, 1);
    k = fill_array(shape, c.dtype, 2);
    v = fill_array(shape, c.dtype, 3);
    dout = fill_array(shape, c.dtype, 4);
    options.is_causal = c.causal == AttentionCase::flag;
    if (c.causal == AttentionCase::mask) {
      const Array t = pax::lax::iota(DType::i32, {c.seq});
      options.mask = pax::reshape(pax::expand_dims(t, {1}) >= pax::expand_dims(t, {0}), {1, 1, c.seq, c.seq});
    }
  }
};

void forward(benchmark::State& state, AttentionCase c) {
  const Operands o(c);
  for (auto _ : state) {
    auto [out, lse] = pax::lax::dot_product_attention(o.q, o.k, o.v, o.options);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(c.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void backward(benchmark::State& state, AttentionCase c) {
  const Operands o(c);
  auto f = [&](const Array& q, const Array& k, const Array& v) {
    return pax::lax::dot_product_attention(q, k, v, o.options).first;
  };
  auto [out, pullback] = pax::vjp(f, o.q, o.k, o.v);
  for (auto _ : state) {
    auto grads = pullback(o.dout);
    benchmark::DoNotOptimize(std::get<0>(grads).data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2 * c.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

int register_cases() {
  const std::vector<AttentionCase> cases = {
      {2, 1024, 4, 64, AttentionCase::none, DType::f32},  {2, 1024, 4, 64, AttentionCase::flag, DType::f32},
      {2, 1024, 4, 64, AttentionCase::mask, DType::f32},  {1, 4096, 4, 64, AttentionCase::flag, DType::f32},
      {1, 4096, 4, 64, AttentionCase::mask, DType::f32},  {2, 1024, 4, 64, AttentionCase::flag, DType::bf16},
      {1, 4096, 4, 64, AttentionCase::mask, DType::bf16},
  };
  for (const AttentionCase& c : cases) {
    benchmark::RegisterBenchmark(("forward/" + c.name()).c_str(), forward, c)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("backward/" + c.name()).c_str(), backward, c)->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int registered = register_cases();

}  // namespace

BENCHMARK_MAIN();

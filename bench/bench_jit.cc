// jit benchmarks: a chain of 8 elementwise operations over 16M float32
// elements run eagerly, jitted (one fused loop), and jitted without fusion,
// beside one parallel memcpy of the same buffer; the dispatch overhead of a
// cached jitted function on tiny inputs; and the time to trace and compile a
// program of ~2000 equations. "bytes" counters are bytes read + written per
// second by one pass (x in, y out), the traffic of the fused loop.
#include <benchmark/benchmark.h>

#include "pax/backend/cpu/copy.h"
#include "pax/ir/executable.h"
#include "pax/pax.h"

namespace {

using pax::Array;

constexpr int64_t kN = 16 << 20;
constexpr double kBytes = double(kN) * sizeof(float);

void set_bandwidth(benchmark::State& state, double bytes_per_iter) {
  state.counters["bytes"] = benchmark::Counter(bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

// mul, add, max, mul, sub, mul, add, min.
Array chain(const Array& x) { return pax::minimum((pax::maximum(x * 1.5 + 0.25, 0.0) * 2.0 - x) * 0.75 + 1.0, 3.0); }

Array input() { return pax::random::uniform(pax::random::key(0), {kN}, pax::DType::f32, -2.0, 2.0); }

void BM_MemcpyPass(benchmark::State& state) {
  Array src = input();
  auto dst = pax::Buffer::allocate(size_t(kBytes));
  for (auto _ : state) {
    pax::cpu::copy_bytes(dst->data(), src.data(), size_t(kBytes));
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_MemcpyPass)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ChainEager(benchmark::State& state) {
  Array x = input();
  chain(x);  // the allocator's cache holds the buffers from now on
  for (auto _ : state) {
    Array y = chain(x);
    benchmark::DoNotOptimize(y.data());
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_ChainEager)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ChainJit(benchmark::State& state) {
  Array x = input();
  auto f = pax::jit(chain);
  f(x);
  for (auto _ : state) {
    Array y = f(x);
    benchmark::DoNotOptimize(y.data());
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_ChainJit)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same program compiled with one kernel per equation (planned memory, no fusion).
void BM_ChainJitUnfused(benchmark::State& state) {
  Array x = input();
  auto jaxpr = pax::make_jaxpr(chain)(x);
  pax::CompileOptions options;
  options.fuse = false;
  auto exe = pax::compile(pax::convert_constvars(*jaxpr), options);
  std::vector<Array> args = jaxpr->consts;
  args.push_back(x);
  exe->run(args);
  for (auto _ : state) {
    Array y = exe->run(args)[0];
    benchmark::DoNotOptimize(y.data());
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_ChainJitUnfused)->Unit(benchmark::kMillisecond)->UseRealTime();

// A cached jitted function on 4-element inputs: the cost of one call.
void BM_JitDispatch(benchmark::State& state) {
  auto f = pax::jit([](const Array& a, const Array& b) { return a * b + 1.0; });
  Array a = pax::array<float>({1, 2, 3, 4}), b = pax::array<float>({5, 6, 7, 8});
  f(a, b);
  for (auto _ : state) {
    Array y = f(a, b);
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_JitDispatch)->Unit(benchmark::kMicrosecond);

// The executable alone (no argument flattening or cache lookup).
void BM_ExecutableRunTiny(benchmark::State& state) {
  auto jaxpr =
      pax::make_jaxpr([](const Array& a, const Array& b) { return a * b + 1.0; })(pax::zeros({4}), pax::zeros({4}));
  auto exe = pax::compile(pax::convert_constvars(*jaxpr));
  std::vector<Array> args = jaxpr->consts;
  args.push_back(pax::array<float>({1, 2, 3, 4}));
  args.push_back(pax::array<float>({5, 6, 7, 8}));
  for (auto _ : state) {
    Array y = exe->run(args)[0];
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_ExecutableRunTiny)->Unit(benchmark::kMicrosecond);

// 250 blocks of 8 equations with a matmul every 25 blocks: 2010 equations.
Array long_chain(const Array& x, const Array& w) {
  namespace lax = pax::lax;
  Array y = x;
  for (int i = 0; i < 250; ++i) {
    y = lax::tanh(lax::add(lax::mul(y, w), lax::exp(lax::neg(y))));
    y = lax::sub(lax::max(y, lax::mul(y, y)), lax::abs(w));
    if (i % 25 == 24) y = lax::dot_general(y, w, {{1}, {0}, {}, {}});
  }
  return y;
}

void BM_TraceAndCompile2000(benchmark::State& state) {
  Array x = pax::zeros({16, 16}), w = pax::zeros({16, 16});
  size_t eqns = 0, optimized = 0;
  for (auto _ : state) {
    auto jaxpr = pax::make_jaxpr(long_chain)(x, w);
    auto exe = pax::compile(jaxpr);
    eqns = jaxpr->eqns.size();
    optimized = exe->optimized_jaxpr().eqns.size();
  }
  state.counters["eqns"] = double(eqns);
  state.counters["optimized_eqns"] = double(optimized);
}
BENCHMARK(BM_TraceAndCompile2000)->Unit(benchmark::kMillisecond);

void BM_Trace2000(benchmark::State& state) {
  Array x = pax::zeros({16, 16}), w = pax::zeros({16, 16});
  for (auto _ : state) benchmark::DoNotOptimize(pax::make_jaxpr(long_chain)(x, w));
}
BENCHMARK(BM_Trace2000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// Elementwise bandwidth: add and exp over 16M float32 elements, beside memcpy
// of the same buffer (single- and multi-threaded). Counters report the rate of
// memory traffic ("bytes": bytes read + bytes written per second).
#include <benchmark/benchmark.h>

#include <cstring>

#include "pax/backend/cpu/copy.h"
#include "pax/pax.h"

namespace {

constexpr int64_t kN = 16 << 20;
constexpr double kBytes = double(kN) * sizeof(float);

void set_bandwidth(benchmark::State& state, double bytes_per_iter) {
  state.counters["bytes"] = benchmark::Counter(bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MemcpySingleThread(benchmark::State& state) {
  pax::Array src = pax::ones({kN});
  auto dst = pax::Buffer::allocate(size_t(kBytes));
  for (auto _ : state) {
    std::memcpy(dst->data(), src.data(), size_t(kBytes));
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_MemcpySingleThread)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MemcpyParallel(benchmark::State& state) {
  pax::Array src = pax::ones({kN});
  auto dst = pax::Buffer::allocate(size_t(kBytes));
  for (auto _ : state) {
    pax::cpu::copy_bytes(dst->data(), src.data(), size_t(kBytes));
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_MemcpyParallel)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AddF32(benchmark::State& state) {
  pax::Array a = pax::random::uniform(pax::random::key(0), {kN});
  pax::Array b = pax::random::uniform(pax::random::key(1), {kN});
  for (auto _ : state) {
    pax::Array c = pax::lax::add(a, b);
    benchmark::DoNotOptimize(c.data());
  }
  set_bandwidth(state, 3 * kBytes);
}
BENCHMARK(BM_AddF32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ExpF32(benchmark::State& state) {
  pax::Array a = pax::random::uniform(pax::random::key(0), {kN});
  for (auto _ : state) {
    pax::Array c = pax::lax::exp(a);
    benchmark::DoNotOptimize(c.data());
  }
  set_bandwidth(state, 2 * kBytes);
}
BENCHMARK(BM_ExpF32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AddBF16(benchmark::State& state) {
  pax::Array a = pax::random::uniform(pax::random::key(0), {kN}, pax::DType::bf16);
  pax::Array b = pax::random::uniform(pax::random::key(1), {kN}, pax::DType::bf16);
  for (auto _ : state) {
    pax::Array c = pax::lax::add(a, b);
    benchmark::DoNotOptimize(c.data());
  }
  set_bandwidth(state, 3 * kBytes / 2);
}
BENCHMARK(BM_AddBF16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

// Matrix products through paxcc (eager lax::dot_general on Arrays, output
// allocation included) and through raw oneDNN (a dnnl::matmul created once and
// executed per iteration) on the same shapes, f32 and bf16, in GFLOP/s.
//   ./build-bench/bench/bench_matmul --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "pax/ops/lax.h"

namespace {

struct MatmulCase {
  int64_t batch, m, k, n;
  std::string name() const {
    std::string s = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    return batch > 1 ? std::to_string(batch) + "x(" + s + ")" : s;
  }
  double flops() const { return 2.0 * double(batch) * double(m) * double(k) * double(n); }
};

// Values in [-1, 1) from a fixed linear congruential sequence.
pax::Array fill_array(const pax::Shape& shape, pax::DType dtype, uint32_t seed) {
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1 << 24) * 2.0f - 1.0f;
  }
  std::vector<unsigned char> bytes(v.size() * pax::itemsize(dtype));
  pax::convert_host(pax::DType::f32, v.data(), dtype, bytes.data(), v.size());
  return pax::from_host(bytes.data(), shape, dtype);
}

void set_rate(benchmark::State& state, const MatmulCase& c) {
  state.counters["GFLOP/s"] = benchmark::Counter(c.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_pax(benchmark::State& state, MatmulCase c, pax::DType dtype) {
  const bool batched = c.batch > 1;
  pax::Array a = fill_array(batched ? pax::Shape{c.batch, c.m, c.k} : pax::Shape{c.m, c.k}, dtype, 1);
  pax::Array b = fill_array(batched ? pax::Shape{c.batch, c.k, c.n} : pax::Shape{c.k, c.n}, dtype, 2);
  const pax::lax::DotDimensionNumbers dn = batched ? pax::lax::DotDimensionNumbers{{2}, {1}, {0}, {0}}
                                                   : pax::lax::DotDimensionNumbers{{1}, {0}, {}, {}};
  for (auto _ : state) {
    pax::Array out = pax::lax::dot_general(a, b, dn);
    benchmark::DoNotOptimize(out.data());
  }
  set_rate(state, c);
}

void bm_dnnl(benchmark::State& state, MatmulCase c, pax::DType dtype) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::data_type dt = dtype == pax::DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const bool batched = c.batch > 1;
  const memory::format_tag tag = batched ? memory::format_tag::abc : memory::format_tag::ab;
  auto dims = [&](int64_t r, int64_t col) { return batched ? memory::dims{c.batch, r, col} : memory::dims{r, col}; };
  memory::desc a_md(dims(c.m, c.k), dt, tag), b_md(dims(c.k, c.n), dt, tag), c_md(dims(c.m, c.n), dt, tag);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  dnnl::matmul prim(pd);
  memory a_mem(a_md, engine), b_mem(b_md, engine), c_mem(c_md, engine);
  // Same values as the paxcc benchmark.
  pax::Array a = fill_array({int64_t(a_md.get_size() / pax::itemsize(dtype))}, dtype, 1);
  pax::Array b = fill_array({int64_t(b_md.get_size() / pax::itemsize(dtype))}, dtype, 2);
  std::memcpy(a_mem.get_data_handle(), a.data(), a.nbytes());
  std::memcpy(b_mem.get_data_handle(), b.data(), b.nbytes());
  for (auto _ : state) {
    prim.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  }
  set_rate(state, c);
}

// One product of the GPT step (bench/gpt_step.cc) with the operand layouts
// the compiled step gives it: weight gradients contract the token axes of two
// activations, projections contract a weight's leading or trailing axes.
struct LayoutCase {
  std::string name;
  pax::Shape lhs, rhs;
  pax::lax::DotDimensionNumbers dims;
};

void bm_pax_layout(benchmark::State& state, const LayoutCase& c, pax::DType dtype) {
  pax::Array a = fill_array(c.lhs, dtype, 1), b = fill_array(c.rhs, dtype, 2);
  pax::Array out = pax::lax::dot_general(a, b, c.dims);
  double k = 1;
  for (int64_t axis : c.dims.lhs_contracting) k *= double(c.lhs.dims()[size_t(axis)]);
  for (auto _ : state) {
    out = pax::lax::dot_general(a, b, c.dims);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(out.shape().numel()) * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<LayoutCase> layouts = {
      {"ff1_dW_x^T.dy", {2048, 256}, {2048, 1024}, {{0}, {0}, {}, {}}},
      {"ff1_dW_rm", {256, 2048}, {2048, 1024}, {{1}, {0}, {}, {}}},
      {"ff2_dW_h^T.dy", {2048, 1024}, {2048, 256}, {{0}, {0}, {}, {}}},
      {"emb_dW_dl^T.x", {8, 256, 4096}, {8, 256, 256}, {{0, 1}, {0, 1}, {}, {}}},
      {"ff1_fwd_x.w", {2048, 256}, {256, 1024}, {{1}, {0}, {}, {}}},
      {"logits_x.e^T", {8, 256, 256}, {4096, 256}, {{2}, {1}, {}, {}}},
      {"ff1_dX_dy.w^T", {2048, 1024}, {256, 1024}, {{1}, {1}, {}, {}}},
      {"qkv_fwd_x.w", {8, 256, 256}, {256, 4, 64}, {{2}, {0}, {}, {}}},
      {"qkv_dW_x^T.dy", {8, 256, 256}, {8, 256, 4, 64}, {{0, 1}, {0, 1}, {}, {}}},
      {"attn_pv", {8, 4, 256, 256}, {8, 256, 4, 64}, {{3}, {1}, {0, 1}, {0, 2}}},
      {"attn_pv_dp", {8, 4, 256, 256}, {8, 256, 4, 64}, {{2}, {1}, {0, 1}, {0, 2}}},
  };
  for (const LayoutCase& c : layouts) {
    benchmark::RegisterBenchmark(("gpt_product/f32/" + c.name).c_str(), bm_pax_layout, c, pax::DType::f32)
        ->UseRealTime();
  }
  const std::vector<MatmulCase> cases = {{1, 256, 256, 256},    {1, 512, 512, 512},  {1, 1024, 1024, 1024},
                                         {1, 2048, 2048, 2048}, {1, 2048, 256, 768}, {1, 2048, 1024, 256},
                                         {32, 256, 64, 256},    {1, 256, 2048, 1024}};
  for (pax::DType dtype : {pax::DType::f32, pax::DType::bf16}) {
    const std::string dn = pax::dtype_short_name(dtype);
    for (const MatmulCase& c : cases) {
      benchmark::RegisterBenchmark(("matmul/" + dn + "/" + c.name() + "/pax").c_str(), bm_pax, c, dtype)->UseRealTime();
      benchmark::RegisterBenchmark(("matmul/" + dn + "/" + c.name() + "/dnnl").c_str(), bm_dnnl, c, dtype)
          ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

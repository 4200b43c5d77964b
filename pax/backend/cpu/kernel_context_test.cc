// The CPU's kernels and fused loops take their scratch memory from the
// KernelContext they are given, never from the host cache behind it: each
// kernel whose helpers need scratch (the GEMM's packed operands, oneDNN's
// reorders and scratchpads, reduction partials, scatter-add's window tables)
// and each fused reduction of a compiled program runs with a context whose
// scratch function counts its calls and hands out host memory of its own;
// the host cache must see no allocation meanwhile, and the results must have
// the bits the host context gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/backend/backend.h"
#include "pax/backend/cpu/cpu_backend.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::random_array;

constexpr Device kCpu{DeviceKind::cpu, 0};

std::atomic<int64_t> g_scratch_calls{0};
std::atomic<int64_t> g_scratch_bytes{0};

void release_own(void* data, size_t /*capacity*/, Device /*device*/) { std::free(data); }

// Host memory from outside the host cache, so that the cache's count of
// allocations shows whether anything still asks it.
std::shared_ptr<Buffer> own_host_memory(size_t nbytes) {
  const size_t capacity = std::max<size_t>(64, (nbytes + 63) / 64 * 64);
  void* data = std::aligned_alloc(64, capacity);
  PAX_CHECK(data, "kernel_context_test: out of memory for ", capacity, " bytes");
  return Buffer::wrap(data, nbytes, capacity, kCpu, release_own);
}

std::shared_ptr<Buffer> counting_scratch(size_t nbytes, int /*index*/) {
  g_scratch_calls += 1;
  g_scratch_bytes += int64_t(nbytes);
  return own_host_memory(nbytes);
}

const KernelContext& counting_context() {
  static const KernelContext context{kCpu, nullptr, nullptr, counting_scratch};
  return context;
}

// What one run asked of the context and of the host cache.
struct Run {
  std::vector<Array> outputs;
  int64_t scratch_calls = 0, scratch_bytes = 0;
  uint64_t host_allocations = 0;
};

// Runs the one equation of `j` on `args` through its CPU kernel with `ctx`;
// the outputs live outside the host cache.
Run run_kernel(const KernelContext& ctx, const Jaxpr& j, const std::vector<Array>& args) {
  PAX_CHECK(j.eqns.size() == 1 && j.constvars.empty() && j.invars.size() == args.size(),
            "kernel_context_test: expected one equation over the arguments, got\n", j.str());
  const Eqn& e = j.eqns[0];
  Run run;
  std::vector<TensorView> in, out;
  for (Var v : e.inputs) {
    const size_t k = size_t(std::find(j.invars.begin(), j.invars.end(), v) - j.invars.begin());
    PAX_CHECK(k < args.size(), "kernel_context_test: an input that is no argument");
    in.push_back(TensorView{const_cast<void*>(args[k].buffer()->data()), &args[k].shape(), args[k].dtype()});
  }
  for (Var v : e.outputs) {
    const AVal& a = j.aval(v);
    run.outputs.emplace_back(a, own_host_memory(size_t(a.shape.numel()) * itemsize(a.dtype)));
  }
  for (const Array& o : run.outputs) out.push_back(TensorView{o.buffer()->data(), &o.shape(), o.dtype()});
  const KernelFn kernel = cpu::cpu_kernel(e.prim);
  PAX_CHECK(kernel, "kernel_context_test: no CPU kernel for ", prim_name(e.prim));
  const uint64_t allocations = host_allocator_stats().allocations;
  const int64_t calls = g_scratch_calls, bytes = g_scratch_bytes;
  kernel(ctx, e.params, in, out);
  run.host_allocations = host_allocator_stats().allocations - allocations;
  run.scratch_calls = g_scratch_calls - calls;
  run.scratch_bytes = g_scratch_bytes - bytes;
  return run;
}

::testing::AssertionResult same_bits(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " outputs";
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].aval() != b[k].aval() ||
        std::memcmp(a[k].buffer()->data(), b[k].buffer()->data(), size_t(a[k].size()) * itemsize(a[k].dtype())) != 0) {
      return ::testing::AssertionFailure() << "output " << k << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

// The kernel of `j` takes all its scratch from the context it is given.
void expect_scratch_from_context(const std::string& what, const JaxprPtr& j, const std::vector<Array>& args) {
  SCOPED_TRACE(what);
  const Run host = run_kernel(host_kernel_context(), *j, args);
  const Run counted = run_kernel(counting_context(), *j, args);
  EXPECT_EQ(host.scratch_calls, 0);
  EXPECT_GT(counted.scratch_calls, 0) << "the kernel asked its context for no scratch";
  EXPECT_GT(counted.scratch_bytes, 0);
  EXPECT_EQ(counted.host_allocations, 0u) << "the kernel took scratch from the host cache, not from its context";
  EXPECT_TRUE(same_bits(host.outputs, counted.outputs));
}

TEST(KernelContext, DotGeneralPacksOperandsInContextScratch) {
  // Contracting axes 0 and 2 of the lhs merge into no single stride: the
  // operand is packed first.
  const lax::DotDimensionNumbers apart{{0, 2}, {0, 1}, {}, {}};
  Array a = random_array({6, 5, 7}, DType::f32, 1), b = random_array({6, 7, 9}, DType::f32, 2);
  expect_scratch_from_context(
      "f32, lhs packed",
      make_jaxpr([&](const Array& x, const Array& y) { return lax::dot_general(x, y, apart); })(a, b), {a, b});
  // f16 operands as well: packed in order and converted (where this CPU has
  // no f16 GEMM, also multiplied into an f32 temporary).
  Array a16 = a.astype(DType::f16), b16 = b.astype(DType::f16);
  expect_scratch_from_context(
      "f16, lhs packed and converted",
      make_jaxpr([&](const Array& x, const Array& y) { return lax::dot_general(x, y, apart); })(a16, b16), {a16, b16});
  // A^T B of a large A: the GEMM repacks A (AVX2's in-place kernels) or
  // oneDNN copies it in its scratchpad (AVX-512).
  const lax::DotDimensionNumbers transposed{{0}, {0}, {}, {}};
  Array at = random_array({512, 256}, DType::f32, 3), bt = random_array({512, 300}, DType::f32, 4);
  expect_scratch_from_context(
      "f32, A^T B",
      make_jaxpr([&](const Array& x, const Array& y) { return lax::dot_general(x, y, transposed); })(at, bt), {at, bt});
}

TEST(KernelContext, ConvReordersInContextScratch) {
  const lax::ConvDimensionNumbers nhwc = lax::conv_dimension_numbers("NHWC", "HWIO", "NHWC");
  auto conv = [&](const Array& x, const Array& w) {
    return lax::conv_general_dilated(x, w, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, nhwc);
  };
  // oneDNN computes in blocked layouts: the operands are reordered.
  Array x = random_array({2, 9, 8, 16}, DType::f32, 5), w = random_array({3, 3, 16, 8}, DType::f32, 6);
  expect_scratch_from_context("f32 NHWC", make_jaxpr(conv)(x, w), {x, w});
  // f16 is computed in f32: converted copies of the operands.
  Array x16 = x.astype(DType::f16), w16 = w.astype(DType::f16);
  expect_scratch_from_context("f16 NHWC", make_jaxpr(conv)(x16, w16), {x16, w16});
  // Plain NCHW with 16 features: oneDNN's blocked output is reordered back.
  const lax::ConvDimensionNumbers nchw = lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW");
  Array cx = random_array({2, 16, 9, 8}, DType::f32, 15), cw = random_array({16, 16, 3, 3}, DType::f32, 16);
  expect_scratch_from_context("f32 NCHW", make_jaxpr([&](const Array& a, const Array& b) {
                                return lax::conv_general_dilated(a, b, {1, 1}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, nchw);
                              })(cx, cw),
                              {cx, cw});
  // A window larger than the output: oneDNN's backward-by-weights form.
  Array gx = random_array({4, 3, 10, 10}, DType::f32, 7), gw = random_array({5, 3, 8, 8}, DType::f32, 8);
  expect_scratch_from_context("weight gradient form", make_jaxpr([&](const Array& a, const Array& b) {
                                return lax::conv_general_dilated(a, b, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, nchw);
                              })(gx, gw),
                              {gx, gw});
}

TEST(KernelContext, ReductionPartialsInContextScratch) {
  // Rows long enough to be cut into blocks, whose partials are scratch.
  Array x = random_array({int64_t(1) << 18}, DType::f32, 9);
  expect_scratch_from_context("reduce_sum", make_jaxpr([](const Array& a) { return lax::reduce_sum(a, {0}); })(x), {x});
  expect_scratch_from_context("argmax", make_jaxpr([](const Array& a) { return lax::argmax(a, 0); })(x), {x});
  Array rows = random_array({2, int64_t(1) << 17}, DType::f32, 10);
  expect_scratch_from_context("cumsum", make_jaxpr([](const Array& a) { return lax::cumsum(a, 1); })(rows), {rows});
}

TEST(KernelContext, ScatterAddWindowsInContextScratch) {
  std::vector<int32_t> idx(5000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919) % 1000);
  Array operand = random_array({1000, 64}, DType::f32, 11), updates = random_array({5000, 64}, DType::f32, 12);
  Array indices = array(idx, {5000, 1});
  expect_scratch_from_context("scatter_add", make_jaxpr([](const Array& o, const Array& i, const Array& u) {
                                return lax::scatter_add(o, i, u, {{1}, {0}, {0}});
                              })(operand, indices, updates),
                              {operand, indices, updates});
}

// The CPU's memory functions with buffers from outside the host cache: a
// program compiled over them allocates nothing there itself.
const Backend& own_memory_backend() {
  static const Backend backend = [] {
    Backend b = cpu::cpu_backend();
    b.memory.allocate = [](size_t nbytes, int /*index*/) { return own_host_memory(nbytes); };
    return b;
  }();
  return backend;
}

// A compiled program runs its fused loops with the executable's context.
void expect_fused_scratch_from_context(const std::string& what, const JaxprPtr& j, const std::vector<Array>& args) {
  SCOPED_TRACE(what);
  auto host = cpu::compile_cpu_program(j, {}, cpu::cpu_backend(), kCpu, host_kernel_context());
  auto counted = cpu::compile_cpu_program(j, {}, own_memory_backend(), kCpu, counting_context());
  ASSERT_NE(counted->str().find("fusion"), std::string::npos) << "not fused:\n" << counted->str();
  const std::vector<Array> expected = host->run(args);
  const uint64_t allocations = host_allocator_stats().allocations;
  const int64_t calls = g_scratch_calls;
  const std::vector<Array> got = counted->run(args);
  EXPECT_EQ(host_allocator_stats().allocations - allocations, 0u)
      << "the program took scratch from the host cache, not from its context";
  EXPECT_GT(g_scratch_calls - calls, 0) << "the fused reduction asked its context for no scratch";
  EXPECT_TRUE(same_bits(expected, got));
}

TEST(KernelContext, FusedReductionPartialsInContextScratch) {
  // Rows cut into blocks (run_row_reduce's partials).
  Array rows = random_array({2, int64_t(1) << 17}, DType::f32, 13);
  expect_fused_scratch_from_context(
      "row reduction", make_jaxpr([](const Array& a) { return lax::reduce_sum(lax::exp(a) * 2.0, {1}); })(rows),
      {rows});
  // Columns summed by several tasks (run_col_reduce's partial rows).
  Array cols = random_array({8192, 64}, DType::f32, 14);
  expect_fused_scratch_from_context(
      "column reduction", make_jaxpr([](const Array& a) { return lax::reduce_sum(lax::exp(a) * 2.0, {0}); })(cols),
      {cols});
}

}  // namespace
}  // namespace pax

// The process axis: lax's named-axis collectives over "processes" (outside any
// vmap of that name) run across the processes, and their derivative rules give
// cross-process gradients. Run as one process and under `mpirun -np 2` and
// `-np 4` (tests/CMakeLists.txt); references are computed from every rank's
// known input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "pax/api/control_flow.h"
#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/process_group.h"
#include "pax/nn/tensor_parallel.h"
#include "pax/interp/collective_thread.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/prims/control_flow.h"
#include "pax/prims/scan_pipeline.h"
#include "pax/testing/testing.h"

namespace pax::dist {
namespace {

using pax::testing::all_close;

const char* const kAxis = "processes";

// Rank r's value at flat index i: exact in bf16, with signs and orders that
// differ between ranks.
double rank_value(int r, int64_t i) { return double((i % 3 + 1) * (r % 2 == 0 ? r + 1 : -r) + i - 2); }

Array rank_input(int r, const Shape& shape, DType dtype) {
  std::vector<double> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = rank_value(r, int64_t(i));
  return array(v, shape).astype(dtype);
}

TEST(ProcessAxis, NameAndSize) {
  ProcessGroup& g = process_group();
  EXPECT_EQ(g.axis_name(), "processes");
  EXPECT_EQ(axis_size(kAxis), g.process_count());
  EXPECT_PAX_ERROR(g.set_axis_name(""), "non-empty name");
  g.set_axis_name("data");
  EXPECT_EQ(axis_size("data"), g.process_count());
  EXPECT_PAX_ERROR(axis_size(kAxis), "unbound axis name 'processes'");
  EXPECT_PAX_ERROR(lax::psum(scalar(1.0f), kAxis), "process axis (now named 'data'");
  EXPECT_TRUE(all_close(lax::psum(scalar(1.0f), "data"), {double(g.process_count())}));
  g.set_axis_name(kAxis);
}

TEST(ProcessAxis, UnboundNameFails) {
  Array x = rank_input(process_index(), Shape{2}, DType::f32);
  EXPECT_PAX_ERROR(lax::psum(x, "batch"), "psum: unbound axis name 'batch'");
  EXPECT_PAX_ERROR(lax::pmin(x, "batch"), "pmin: unbound axis name 'batch'");
  EXPECT_PAX_ERROR(lax::axis_index("batch"), "unbound axis name 'batch'");
  EXPECT_PAX_ERROR(lax::all_gather(x, "batch"), "unbound axis name 'batch'");
}

TEST(ProcessAxis, EagerReductions) {
  const int p = process_count();
  const Shape shape{2, 3};
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Array x = rank_input(process_index(), shape, dt);
    std::vector<double> sum(6, 0), mx(6, -1e300), mn(6, 1e300);
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < 6; ++i) {
        sum[size_t(i)] += rank_value(r, i);
        mx[size_t(i)] = std::max(mx[size_t(i)], rank_value(r, i));
        mn[size_t(i)] = std::min(mn[size_t(i)], rank_value(r, i));
      }
    Array s = lax::psum(x, kAxis);
    EXPECT_EQ(s.aval(), x.aval());
    EXPECT_TRUE(all_close(s, sum));
    EXPECT_TRUE(all_close(lax::pmax(x, kAxis), mx));
    EXPECT_TRUE(all_close(lax::pmin(x, kAxis), mn));
    if (is_floating(dt)) {
      std::vector<double> mean = sum;
      for (double& v : mean) v /= p;
      Array m = lax::pmean(x, kAxis);
      EXPECT_EQ(m.dtype(), dt);
      EXPECT_TRUE(all_close(m, mean, dt == DType::bf16 ? 1e-2 : 1e-6));
    }
  }
  // bool: pmax is "any", pmin is "all".
  Array b = array(std::vector<double>{1, process_index() == 0 ? 1.0 : 0.0, 0}, Shape{3}).astype(DType::bool_);
  EXPECT_TRUE(all_close(lax::pmax(b, kAxis), {1, 1, 0}));
  EXPECT_TRUE(all_close(lax::pmin(b, kAxis), {1, p == 1 ? 1.0 : 0.0, 0}));
  EXPECT_EQ(lax::pmin(b, kAxis).dtype(), DType::bool_);
  // 0-d and zero-size operands.
  EXPECT_TRUE(all_close(lax::psum(scalar(float(process_index() + 1)), kAxis), {p * (p + 1) / 2.0}));
  EXPECT_EQ(lax::psum(zeros(Shape{0, 3}), kAxis).shape(), (Shape{0, 3}));
}

TEST(ProcessAxis, EagerAllGatherAndAxisIndex) {
  const int p = process_count();
  Array idx = lax::axis_index(kAxis);
  EXPECT_EQ(idx.aval(), (AVal{Shape{}, DType::i32, false}));
  EXPECT_EQ(idx.item<int32_t>(), process_index());
  Array x = rank_input(process_index(), Shape{2, 3}, DType::f32);
  std::vector<double> stacked0, stacked1;
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < 6; ++i) stacked0.push_back(rank_value(r, i));
  for (int64_t a = 0; a < 2; ++a)
    for (int r = 0; r < p; ++r)
      for (int64_t b = 0; b < 3; ++b) stacked1.push_back(rank_value(r, a * 3 + b));
  Array g0 = lax::all_gather(x, kAxis);
  EXPECT_EQ(g0.shape(), (Shape{p, 2, 3}));
  EXPECT_TRUE(all_close(g0, stacked0));
  Array g1 = lax::all_gather(x, kAxis, 1);
  EXPECT_EQ(g1.shape(), (Shape{2, p, 3}));
  EXPECT_TRUE(all_close(g1, stacked1));
  Array t0 = lax::all_gather(x, kAxis, 0, /*tiled=*/true);
  EXPECT_EQ(t0.shape(), (Shape{2 * p, 3}));
  EXPECT_TRUE(all_close(t0, stacked0));
  Array t1 = lax::all_gather(x, kAxis, 1, /*tiled=*/true);
  EXPECT_EQ(t1.shape(), (Shape{2, 3 * p}));
  EXPECT_TRUE(all_close(t1, stacked1));
  EXPECT_PAX_ERROR(lax::all_gather(x, kAxis, 3), "all_gather");
}

// psum_scatter over the processes equals psum followed by this process's
// block, tiled along either dimension and untiled, in every dtype (bf16
// reduces in f32, as psum does).
TEST(ProcessAxis, EagerPsumScatterIsPsumThenThisProcesssBlock) {
  const int p = process_count();
  const int me = process_index();
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Array rows = rank_input(me, Shape{2 * p, 3}, dt);
    Array s0 = lax::psum_scatter(rows, kAxis, 0, /*tiled=*/true);
    EXPECT_EQ(s0.aval(), (AVal{Shape{2, 3}, dt, false}));
    EXPECT_TRUE(all_close(s0, lax::slice(lax::psum(rows, kAxis), {2 * me, 0}, {2 * me + 2, 3}), 0, 0));
    Array cols = rank_input(me, Shape{3, 2 * p}, dt);
    Array s1 = lax::psum_scatter(cols, kAxis, -1, /*tiled=*/true);
    EXPECT_TRUE(all_close(s1, lax::slice(lax::psum(cols, kAxis), {0, 2 * me}, {3, 2 * me + 2}), 0, 0));
    Array one = rank_input(me, Shape{3, p}, dt);
    Array s2 = lax::psum_scatter(one, kAxis, 1);
    EXPECT_EQ(s2.shape(), (Shape{3}));
    EXPECT_TRUE(all_close(s2, lax::squeeze(lax::slice(lax::psum(one, kAxis), {0, me}, {3, me + 1}), {1}), 0, 0));
    // The reference from every rank's known input.
    std::vector<double> want;
    for (int64_t i = 0; i < 3; ++i) {
      double total = 0;
      for (int r = 0; r < p; ++r) total += rank_value(r, i * p + me);
      want.push_back(total);
    }
    EXPECT_TRUE(all_close(s2, want, 0, 0));
  }
}

// all_gather then psum_scatter (its transpose) gives back p times the input.
TEST(ProcessAxis, AllGatherThenPsumScatterRoundTrip) {
  const int p = process_count();
  Array x = rank_input(process_index(), Shape{2, 3}, DType::f32);
  for (bool tiled : {true, false}) {
    for (int64_t axis : {0, 1}) {
      Array back = lax::psum_scatter(lax::all_gather(x, kAxis, axis, tiled), kAxis, axis, tiled);
      EXPECT_TRUE(all_close(back, x * double(p), 0, 0)) << "tiled " << tiled << " axis " << axis;
    }
  }
}

// Cross-process gradients through the pair: d/dx sum(all_gather(x) * c) is
// this process's block of the sum of every process's c; d/dx
// sum(psum_scatter(x) * d) is every process's d in its block.
TEST(ProcessAxis, PsumScatterAndAllGatherGradientsAcrossProcesses) {
  const int p = process_count();
  const int me = process_index();
  auto c_of = [&](int r) { return rank_input(r + 5, Shape{2 * p, 3}, DType::f32); };
  Array x = rank_input(me, Shape{2, 3}, DType::f32);
  Array c = c_of(me);
  Array g = grad([&](const Array& a) { return sum(lax::all_gather(a, kAxis, 0, true) * c); })(x);
  std::vector<double> want(6, 0.0);
  for (int r = 0; r < p; ++r) {
    std::vector<double> cr = c_of(r).to_vector<double>();
    for (size_t i = 0; i < 6; ++i) want[i] += cr[size_t(me) * 6 + i];
  }
  EXPECT_TRUE(all_close(g, want, 0, 0));
  // Untiled, along dimension 1.
  Array c1 = rank_input(me + 7, Shape{2, p, 3}, DType::f32);
  Array g1 = grad([&](const Array& a) { return sum(lax::all_gather(a, kAxis, 1) * c1); })(x);
  EXPECT_TRUE(all_close(g1, lax::squeeze(lax::slice(lax::psum(c1, kAxis), {0, me, 0}, {2, me + 1, 3}), {1}), 0, 0));
  // psum_scatter's gradient gathers the cotangents.
  Array xs = rank_input(me, Shape{3, 2 * p}, DType::f32);
  Array d = rank_input(me + 3, Shape{3, 2}, DType::f32);
  Array gs = grad([&](const Array& a) { return sum(lax::psum_scatter(a * a, kAxis, 1, true) * d); })(xs);
  EXPECT_TRUE(all_close(gs, lax::all_gather(d, kAxis, 1, true) * xs * 2.0, 0, 0));
  // bf16 operands keep their dtype through the pair and its gradient.
  Array h = x.astype(DType::bf16);
  Array gh = grad([&](const Array& a) { return sum(lax::all_gather(a, kAxis, 0, true) * c.astype(DType::bf16)); })(h);
  EXPECT_EQ(gh.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(gh, want, 1e-2, 1e-2));
}

// ppermute moves one block point to point: a ring shift gives each process
// its predecessor's x, a partial shift leaves the first process zeros, the
// gradient goes back to the sender, and jit runs it on the communication
// thread with the same result.
TEST(ProcessAxis, PpermuteShiftsBlocksAndItsGradientGoesBack) {
  const int p = process_count();
  const int me = process_index();
  const Array x = rank_input(me, Shape{2, 3}, DType::f32);
  std::vector<std::pair<int64_t, int64_t>> ring, shift;
  for (int r = 0; r < p; ++r) ring.emplace_back(r, (r + 1) % p);
  for (int r = 0; r + 1 < p; ++r) shift.emplace_back(r, r + 1);
  EXPECT_TRUE(all_close(lax::ppermute(x, kAxis, ring), rank_input((me + p - 1) % p, Shape{2, 3}, DType::f32), 0, 0));
  const Array shifted = lax::ppermute(x, kAxis, shift);
  EXPECT_TRUE(all_close(shifted, me == 0 ? zeros({2, 3}) : rank_input(me - 1, Shape{2, 3}, DType::f32), 0, 0));
  // d/dx of sum(ppermute(x) * c) on process r is the c of the process r sends to.
  const Array c = rank_input(me + 11, Shape{2, 3}, DType::f32);
  const Array g = grad([&](const Array& a) { return sum(lax::ppermute(a, kAxis, shift) * c); })(x);
  EXPECT_TRUE(all_close(g, me + 1 < p ? rank_input(me + 1 + 11, Shape{2, 3}, DType::f32) : zeros({2, 3}), 0, 0));
  auto jitted = jit([&](const Array& a) { return lax::ppermute(a * 2.0, kAxis, ring); });
  EXPECT_TRUE(all_close(jitted(x), rank_input((me + p - 1) % p, Shape{2, 3}, DType::f32) * 2.0, 0, 0));
  EXPECT_PAX_ERROR(lax::ppermute(x, kAxis, {{0, 0}, {0, 0}}), "ppermute: member 0 appears twice among the sources");
  EXPECT_PAX_ERROR(lax::ppermute(x, kAxis, {{0, p}}), "names a member outside the");
}

// A dimension the process count does not divide is the same pax::Error on
// every rank, before any data moves; the group works on afterwards.
TEST(ProcessAxis, PsumScatterOfANonDivisibleDimensionFailsOnEveryRank) {
  const int p = process_count();
  const std::string size = "the size " + std::to_string(p) + " of axis 'processes'";
  if (p > 1) {
    EXPECT_PAX_ERROR(lax::psum_scatter(zeros(Shape{2 * p + 1, 3}), kAxis, 0, true),
                     "psum_scatter: dimension 0 of f32[" + std::to_string(2 * p + 1) + ",3] has size " +
                         std::to_string(2 * p + 1) + ", not a multiple of " + size);
  }
  EXPECT_PAX_ERROR(lax::psum_scatter(zeros(Shape{3, p + 1}), kAxis, 1), ", not " + size);
  EXPECT_PAX_ERROR(jit([](const Array& a) { return lax::psum_scatter(a, kAxis, 1); })(zeros(Shape{3, p + 1})),
                   ", not " + size);
  EXPECT_TRUE(all_close(lax::psum(scalar(1.0f), kAxis), {double(p)}));
}

// Inside vmap(axis_name="processes") the batch is the axis, on every process.
TEST(ProcessAxis, VmapOfTheSameNameTakesPrecedence) {
  Array x = array(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  Array s = vmap([](const Array& e) { return lax::psum(e, kAxis); }, {.axis_name = kAxis})(x);
  EXPECT_TRUE(all_close(s, {9, 12, 9, 12, 9, 12}));
  Array n = vmap([](const Array& e) { return e * double(axis_size(kAxis)); }, {.axis_name = kAxis})(x);
  EXPECT_TRUE(all_close(n, {3, 6, 9, 12, 15, 18}));
  Array i = vmap([](const Array&) { return lax::axis_index(kAxis); }, {.axis_name = kAxis})(x);
  EXPECT_TRUE(all_close(i, {0, 1, 2}));
}

// d/dx sum(psum(x*x)) = psum(1) * 2x = 2 * P * x (jax's rule for psum inside
// a mapped axis); pmean divides by P again; all_gather's cotangent is this
// process's slice of psum(ct).
TEST(ProcessAxis, GradientsAcrossProcesses) {
  const int p = process_count();
  const int me = process_index();
  Array x = rank_input(me, Shape{4}, DType::f32);
  std::vector<double> xv = x.to_vector<double>();
  auto times = [&](double k) {
    std::vector<double> v = xv;
    for (double& e : v) e *= k;
    return v;
  };
  Array g = grad([](const Array& a) { return sum(lax::psum(a * a, kAxis)); })(x);
  EXPECT_TRUE(all_close(g, times(2.0 * p)));
  Array gm = grad([](const Array& a) { return sum(lax::pmean(a * a, kAxis)); })(x);
  EXPECT_TRUE(all_close(gm, times(2.0)));
  // w[r, i] = r * 10 + i
  std::vector<double> wv;
  for (int r = 0; r < p; ++r)
    for (int i = 0; i < 4; ++i) wv.push_back(r * 10 + i);
  Array w = array(wv, Shape{p, 4}).astype(DType::f32);
  Array ga = grad([&](const Array& a) { return sum(lax::all_gather(a, kAxis) * w); })(x);
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(double(p) * (me * 10 + i));
  EXPECT_TRUE(all_close(ga, want));
  // jvp of psum: the tangents summed over the processes.
  auto [out, tangent] =
      jvp([](const Array& a) { return lax::psum(a, kAxis); }, std::make_tuple(x), std::make_tuple(ones(Shape{4})));
  EXPECT_TRUE(all_close(tangent, std::vector<double>(4, double(p))));
}

// The loss of a one-layer tanh regression over a batch, mean over the rows.
Array regression_loss(const Array& w, const Array& xs, const Array& ys) {
  Array err = tanh(matmul(xs, w)) - ys;
  return mean(err * err);
}

// A data-parallel SGD step: each process takes the gradient on its rows of the
// batch and pmean's it; the step equals the full-batch step of one process.
TEST(ProcessAxis, DataParallelSgdStepMatchesFullBatch) {
  const int p = process_count();
  const int me = process_index();
  const int64_t rows = 3;  // per process
  const int64_t features = 5, outputs = 2;
  Array w = pax::testing::random_array(Shape{features, outputs}, DType::f32, 7);
  Array xs_all = pax::testing::random_array(Shape{rows * p, features}, DType::f32, 8);
  Array ys_all = pax::testing::random_array(Shape{rows * p, outputs}, DType::f32, 9);
  Array xs = lax::slice(xs_all, {me * rows, 0}, {(me + 1) * rows, features});
  Array ys = lax::slice(ys_all, {me * rows, 0}, {(me + 1) * rows, outputs});
  const double lr = 0.5;

  Array local = grad(regression_loss)(w, xs, ys);
  Array g = lax::pmean(local, kAxis);
  Array stepped = w - g * lr;
  Array full = grad(regression_loss)(w, xs_all, ys_all);
  Array want = w - full * lr;
  EXPECT_TRUE(all_close(g, full, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(stepped, want, 1e-5, 1e-6));
  // Every process ends with the same parameters.
  Array gathered = lax::all_gather(stepped, kAxis);
  for (int r = 0; r < p; ++r) {
    Array row = lax::squeeze(lax::slice(gathered, {r, 0, 0}, {r + 1, features, outputs}), {0});
    EXPECT_TRUE(all_close(row, stepped, 0, 0));
  }
}

// Under jit the collectives stay primitives of the program (never folded or
// fused) and run the process group when the executable runs.
TEST(ProcessAxis, JitRunsTheCollectives) {
  const int p = process_count();
  const int me = process_index();
  auto f = [](const Array& x) {
    Array s = lax::psum(x, kAxis);
    Array i = lax::axis_index(kAxis).astype(DType::f32);
    return std::make_pair(s + i, lax::all_gather(lax::pmax(x, kAxis) - lax::pmin(x, kAxis) + i, kAxis));
  };
  auto jaxpr = make_jaxpr(f)(zeros(Shape{3}));
  int collectives = 0;
  for (const Eqn& e : jaxpr->eqns) collectives += is_collective(e.prim);
  EXPECT_EQ(collectives, 5) << jaxpr->str();
  auto jf = jit(f);
  for (int call = 0; call < 2; ++call) {  // traced, then cached
    Array x = rank_input(me, Shape{3}, DType::f32) + double(call);
    auto [s, g] = jf(x);
    std::vector<double> want_s, want_g;
    for (int64_t k = 0; k < 3; ++k) {
      double sum = 0, hi = -1e300, lo = 1e300;
      for (int r = 0; r < p; ++r) {
        sum += rank_value(r, k) + call;
        hi = std::max(hi, rank_value(r, k));
        lo = std::min(lo, rank_value(r, k));
      }
      want_s.push_back(sum + me);
      want_g.push_back(hi - lo);
    }
    for (int r = 0; r < p; ++r)
      for (int64_t k = 0; k < 3; ++k) want_g.push_back(want_g[size_t(k)] + r);
    want_g.erase(want_g.begin(), want_g.begin() + 3);
    EXPECT_TRUE(all_close(s, want_s));
    EXPECT_EQ(g.shape(), (Shape{p, 3}));
    EXPECT_TRUE(all_close(g, want_g));
  }
}

// A jitted psum_scatter (and its gradient) equals the eager one.
TEST(ProcessAxis, JitPsumScatterMatchesEager) {
  const int p = process_count();
  auto f = [](const Array& x) {
    Array s = lax::psum_scatter(x * 2.0, kAxis, 0, /*tiled=*/true);
    return s + lax::axis_index(kAxis).astype(DType::f32);
  };
  auto jf = jit(f);
  auto jg = jit(grad([&](const Array& x) { return sum(tanh(f(x))); }));
  for (int call = 0; call < 2; ++call) {  // traced, then cached
    Array x = rank_input(process_index(), Shape{2 * p, 3}, DType::f32) + double(call);
    EXPECT_TRUE(all_close(jf(x), f(x), 0, 0));
    EXPECT_TRUE(all_close(jg(x), grad([&](const Array& a) { return sum(tanh(f(a))); })(x), 1e-6, 1e-6));
  }
}

// Collectives of a compiled program run on the communication thread while
// the program computes: the results equal eager ones, every collective is
// counted, and a host-side collective right after the call comes after them.
TEST(ProcessAxis, JitCollectivesRunAlongsideComputation) {
  const int p = process_count();
  auto f = [](const Array& x, const Array& w) {
    Array grads = x * 3.0;
    Array a = lax::psum(grads, kAxis);                       // starts at once
    Array h = tanh(matmul(w, w));                            // computes meanwhile
    Array b = lax::pmax(sum(h, {1}) + sum(grads), kAxis);    // after h
    Array c = lax::all_gather(x, kAxis, 0, /*tiled=*/true);  // fetched ahead of its use
    return std::make_tuple(a + sum(h), b, c * 2.0);
  };
  auto jf = jit(f);
  Array w = pax::testing::random_array(Shape{32, 32}, DType::f32, 3);
  for (int call = 0; call < 3; ++call) {
    Array x = rank_input(process_index(), Shape{32}, DType::f32) + double(call);
    const int64_t before = communication_times().collectives;
    auto [a, b, c] = jf(x, w);
    if (call > 0 && p > 1) EXPECT_EQ(communication_times().collectives - before, 3);
    auto [ea, eb, ec] = f(x, w);
    EXPECT_TRUE(all_close(a, ea, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(b, eb, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(c, ec, 0, 0));
    EXPECT_TRUE(all_close(process_group().all_reduce(x), lax::psum(x, kAxis), 0, 0));
  }
}

// A scan whose layers gather their weight blocks (fully sharded layers in a
// Repeat): its body splits into a fetch of the gathers, run one iteration
// ahead, and a finish of the backward pass's reduce-scatters, run one
// iteration behind (prims/scan_pipeline.h). Values and gradients equal those
// of the whole weights on one process (the gradient of a block is the sum
// of every process's identical loss's gradient: P times the whole one).
TEST(ProcessAxis, ScanOfGatheredLayersOverlapsTheNeighbouringIterations) {
  const int p = process_count();
  const int me = process_index();
  const int64_t layers = 4, rows = 3, d = rows * p;
  auto block_of = [&](int r) { return pax::testing::random_array(Shape{layers, rows, d}, DType::f32, 40 + r); };
  std::vector<Array> blocks;
  for (int r = 0; r < p; ++r) blocks.push_back(block_of(r));
  const Array whole = concatenate(blocks, 1);  // [layers, d, d]
  const Array x = pax::testing::random_array(Shape{2, d}, DType::f32, 50);
  auto sharded_loss = [](const Array& ws, const Array& x) {
    auto [y, ys] = scan(
        [](const Array& y, const Array& w) {
          Array next = tanh(matmul(y, lax::all_gather(w.astype(DType::bf16), kAxis, 0, true).astype(DType::f32)));
          return std::make_pair(next, sum(next));
        },
        x, ws);
    return sum(square(y)) + sum(ys);
  };
  auto whole_loss = [](const Array& ws, const Array& x) {
    auto [y, ys] = scan(
        [](const Array& y, const Array& w) {
          Array next = tanh(matmul(y, w.astype(DType::bf16).astype(DType::f32)));
          return std::make_pair(next, sum(next));
        },
        x, ws);
    return sum(square(y)) + sum(ys);
  };
  auto step = jit(value_and_grad(sharded_loss));
  for (int call = 0; call < 2; ++call) {
    auto [loss, g] = step(blocks[size_t(me)], x);
    auto [want_loss, want_whole] = value_and_grad(whole_loss)(whole, x);
    EXPECT_TRUE(all_close(loss, want_loss, 1e-5, 1e-5));
    Array want = lax::slice(want_whole, {0, me * rows, 0}, {layers, (me + 1) * rows, d}) * double(p);
    EXPECT_TRUE(all_close(g, want, 1e-4, 1e-5));
  }
  // The forward scan fetches its gathers ahead; the backward scan also
  // finishes its reduce-scatters behind.
  auto jaxpr = make_jaxpr(value_and_grad(sharded_loss))(blocks[size_t(me)], x);
  std::vector<std::shared_ptr<const cf::ScanPipeline>> pipelines;
  for (const Eqn& e : jaxpr->eqns) {
    if (e.prim != Prim::scan) continue;
    const cf::ScanSpec spec = cf::scan_spec(e.params);
    pipelines.push_back(cf::scan_pipeline(spec.body, spec.num_consts, spec.num_carry));
  }
  ASSERT_EQ(pipelines.size(), 2u) << jaxpr->str();
  ASSERT_TRUE(pipelines[0] && pipelines[1]);
  EXPECT_TRUE(pipelines[0]->fetch);
  EXPECT_TRUE(pipelines[1]->fetch);
  EXPECT_TRUE(pipelines[1]->finish);
}

// Two reductions of one value in a scan body (psum and pmax of it): the
// body's finish program takes that value once.
TEST(ProcessAxis, ScanWithTwoReductionsOfOneValue) {
  const int p = process_count();
  const Array ws = pax::testing::random_array(Shape{4, 3}, DType::f32, 60);
  auto body = [](const Array& h, const Array& w) {
    Array next = tanh(h * w + 0.5);
    return std::make_pair(next, Tree::list({Tree(lax::psum(next, kAxis)), Tree(lax::pmax(next, kAxis))}));
  };
  auto f = [&](const Array& x) { return scan(body, x, ws).second; };
  const Tree got = jit(f)(rank_input(process_index(), Shape{3}, DType::f32));
  std::vector<Array> sums, maxima;
  for (int r = 0; r < p; ++r) {
    Array h = rank_input(r, Shape{3}, DType::f32);
    std::vector<Array> rows;
    for (int64_t t = 0; t < 4; ++t) {
      h = tanh(h * lax::squeeze(lax::slice(ws, {t, 0}, {t + 1, 3}), {0}) + 0.5);
      rows.push_back(h);
    }
    const Array stacked = stack(rows, 0);
    sums.push_back(stacked);
    maxima.push_back(stacked);
  }
  Array want_sum = sums[0], want_max = maxima[0];
  for (int r = 1; r < p; ++r) {
    want_sum = want_sum + sums[size_t(r)];
    want_max = maximum(want_max, maxima[size_t(r)]);
  }
  EXPECT_TRUE(all_close(got[0].leaf(), want_sum, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(got[1].leaf(), want_max, 1e-6, 1e-6));
}

// Megatron's split of an MLP over the processes (nn/tensor_parallel.h):
// the first weight by columns, the second by rows. Every process computes
// the whole MLP's loss, and its gradients are the whole MLP's (x's whole, the
// weights' for its own columns and rows), eagerly and under jit.
TEST(ProcessAxis, MegatronSplitMlpMatchesTheWholeOne) {
  const int p = process_count();
  const int me = process_index();
  const int64_t d = 4, part = 3, hidden = part * p;
  const Array w1 = pax::testing::random_array(Shape{d, hidden}, DType::f32, 70);
  const Array w2 = pax::testing::random_array(Shape{hidden, d}, DType::f32, 71);
  const Array x = pax::testing::random_array(Shape{2, d}, DType::f32, 72);
  const Array w1_part = lax::slice(w1, {0, me * part}, {d, (me + 1) * part});
  const Array w2_part = lax::slice(w2, {me * part, 0}, {(me + 1) * part, d});
  auto split_loss = [](const Array& x, const Array& a, const Array& b) {
    Array y = nn::leave_split(matmul(tanh(matmul(nn::enter_split(x, kAxis), a)), b), kAxis);
    return sum(square(y));
  };
  auto whole_loss = [](const Array& x, const Array& a, const Array& b) {
    return sum(square(matmul(tanh(matmul(x, a)), b)));
  };
  auto [want_loss, want] = value_and_grad<0, 1, 2>(whole_loss)(x, w1, w2);
  auto [want_x, want_w1, want_w2] = want;
  for (int jitted = 0; jitted < 2; ++jitted) {
    auto vg = value_and_grad<0, 1, 2>(split_loss);
    auto [loss, got] = jitted ? jit(vg)(x, w1_part, w2_part) : vg(x, w1_part, w2_part);
    auto [gx, g1, g2] = got;
    EXPECT_TRUE(all_close(loss, want_loss, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(gx, want_x, 1e-5, 1e-6));
    EXPECT_TRUE(all_close(g1, lax::slice(want_w1, {0, me * part}, {d, (me + 1) * part}), 1e-5, 1e-6));
    EXPECT_TRUE(all_close(g2, lax::slice(want_w2, {me * part, 0}, {(me + 1) * part, d}), 1e-5, 1e-6));
  }
}

TEST(ProcessAxis, JitDataParallelSgdStep) {
  const int p = process_count();
  const int me = process_index();
  const int64_t rows = 2, features = 4, outputs = 3;
  Array w = pax::testing::random_array(Shape{features, outputs}, DType::f32, 17);
  Array xs_all = pax::testing::random_array(Shape{rows * p, features}, DType::f32, 18);
  Array ys_all = pax::testing::random_array(Shape{rows * p, outputs}, DType::f32, 19);
  Array xs = lax::slice(xs_all, {me * rows, 0}, {(me + 1) * rows, features});
  Array ys = lax::slice(ys_all, {me * rows, 0}, {(me + 1) * rows, outputs});
  auto step = jit([](const Array& w, const Array& xs, const Array& ys) {
    return w - lax::pmean(grad(regression_loss)(w, xs, ys), kAxis) * 0.5;
  });
  Array got = step(w, xs, ys);
  Array want = w - grad(regression_loss)(w, xs_all, ys_all) * 0.5;
  EXPECT_TRUE(all_close(got, want, 1e-5, 1e-6));
  // A second step from the result, through the cached executable.
  Array got2 = step(got, xs, ys);
  Array want2 = want - grad(regression_loss)(want, xs_all, ys_all) * 0.5;
  EXPECT_TRUE(all_close(got2, want2, 1e-5, 1e-6));
}

}  // namespace
}  // namespace pax::dist

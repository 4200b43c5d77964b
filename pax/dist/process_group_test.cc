// ProcessGroup tests. They run as one process (ctest's usual run) and under
// `mpirun -np 2` (tests/CMakeLists.txt): every rank builds its input from its
// process index, and the expected results are computed locally from every
// rank's known input.
#include "pax/dist/process_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pax/core/stop.h"
#include "pax/api/jit.h"
#include "pax/dist/jax_utils.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::dist {
namespace {

using pax::testing::all_close;

// Rank r's value at flat index i: small integers (exact in bf16), signs and
// orders that differ between ranks so that sum, max and order all matter.
double value(int r, int64_t i) { return double((r + 1) * (i % 5 + 1) - 2 * ((i + r) % 4)); }

Array input(int r, const Shape& shape, DType dtype) {
  std::vector<double> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(r, int64_t(i));
  return array(v, shape).astype(dtype);
}

// The reference reduction of every rank's value at flat index i.
double reduce_ref(ReduceOp op, int64_t i, bool clamp_at_zero = false) {
  double acc = op == ReduceOp::max ? -1e300 : op == ReduceOp::min ? 1e300 : 0;
  for (int r = 0; r < process_count(); ++r) {
    double v = value(r, i);
    if (clamp_at_zero) v = std::max(v, 0.0);
    acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  return op == ReduceOp::mean ? acc / process_count() : acc;
}

int me() { return process_index(); }
int count() { return process_count(); }

TEST(ProcessGroup, IndexAndCount) {
  ProcessGroup& g = process_group();
  EXPECT_TRUE(g.initialized());
  EXPECT_GE(count(), 1);
  EXPECT_GE(me(), 0);
  EXPECT_LT(me(), count());
  if (!g.uses_mpi()) EXPECT_EQ(count(), 1);
  EXPECT_GT(g.timeout_seconds(), 0);
}

TEST(ProcessGroup, Barrier) {
  process_group().barrier();
  process_group().barrier(10);
}

TEST(ProcessGroup, AllReduceSumMeanMaxMin) {
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16, DType::u32}) {
    for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0, 4}, Shape{7}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
        if (op == ReduceOp::mean && !is_floating(dt)) continue;
        // Sums of negative values would wrap in u32.
        if (dt == DType::u32 && (op == ReduceOp::sum || op == ReduceOp::mean)) continue;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + reduce_op_name(op));
        std::vector<double> want(size_t(shape.numel()));
        for (size_t i = 0; i < want.size(); ++i) want[i] = reduce_ref(op, int64_t(i), dt == DType::u32);
        Array x = input(me(), shape, DType::f64);
        if (dt == DType::u32) x = maximum(x, 0.0);
        Array got = process_group().all_reduce(x.astype(dt), op);
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_EQ(got.shape(), shape);
        // bf16 rounds the mean (sums of small integers stay exact).
        EXPECT_TRUE(all_close(got, want, dt == DType::bf16 ? 1e-2 : 1e-6));
      }
    }
  }
}

TEST(ProcessGroup, AllGatherStackedAndTiled) {
  const Shape shape{2, 3};
  const int p = count();
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::bool_}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = [&](int r, int64_t i) {
      double x = value(r, i);
      return dt == DType::bool_ ? double(x != 0) : x;
    };
    Array x = input(me(), shape, dt);
    // Stacked along axis 0: [p, 2, 3]; axis 1: [2, p, 3]; axis -1: [2, 3, p].
    std::vector<double> s0, s1, s2, t0, t1;
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < 6; ++i) s0.push_back(v(r, i));
    for (int64_t a = 0; a < 2; ++a)
      for (int r = 0; r < p; ++r)
        for (int64_t b = 0; b < 3; ++b) s1.push_back(v(r, a * 3 + b));
    for (int64_t i = 0; i < 6; ++i)
      for (int r = 0; r < p; ++r) s2.push_back(v(r, i));
    t0 = s0;  // tiled along 0: [2p, 3] is the stacked [p, 2, 3] flattened
    for (int64_t a = 0; a < 2; ++a)
      for (int r = 0; r < p; ++r)
        for (int64_t b = 0; b < 3; ++b) t1.push_back(v(r, a * 3 + b));
    Array g0 = process_group().all_gather(x);
    EXPECT_EQ(g0.shape(), (Shape{p, 2, 3}));
    EXPECT_EQ(g0.dtype(), dt);
    EXPECT_TRUE(all_close(g0, s0));
    Array g1 = process_group().all_gather(x, 1);
    EXPECT_EQ(g1.shape(), (Shape{2, p, 3}));
    EXPECT_TRUE(all_close(g1, s1));
    Array g2 = process_group().all_gather(x, -1);
    EXPECT_EQ(g2.shape(), (Shape{2, 3, p}));
    EXPECT_TRUE(all_close(g2, s2));
    Array tg0 = process_group().all_gather(x, 0, /*tiled=*/true);
    EXPECT_EQ(tg0.shape(), (Shape{2 * p, 3}));
    EXPECT_TRUE(all_close(tg0, t0));
    Array tg1 = process_group().all_gather(x, 1, /*tiled=*/true);
    EXPECT_EQ(tg1.shape(), (Shape{2, 3 * p}));
    EXPECT_TRUE(all_close(tg1, t1));
  }
  // 0-d and zero-size inputs.
  Array s = process_group().all_gather(scalar(int32_t(10 + me())));
  std::vector<double> want;
  for (int r = 0; r < p; ++r) want.push_back(10 + r);
  EXPECT_EQ(s.shape(), (Shape{p}));
  EXPECT_TRUE(all_close(s, want));
  Array z = process_group().all_gather(input(me(), Shape{0, 2}, DType::f32), 0, true);
  EXPECT_EQ(z.shape(), (Shape{0, 2}));
}

TEST(ProcessGroup, Broadcast) {
  for (int root : {0, count() - 1}) {
    for (DType dt : {DType::f32, DType::i32, DType::bf16, DType::f64}) {
      Array got = process_group().broadcast(input(me(), Shape{3, 2}, dt), root);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_TRUE(all_close(got, input(root, Shape{3, 2}, dt)));
    }
  }
  Array s = process_group().broadcast(scalar(double(me() + 0.5)), 0);
  EXPECT_EQ(s.item<double>(), 0.5);
}

TEST(ProcessGroup, ReduceScatter) {
  const int p = count();
  const int me_ = me();
  for (DType dt : {DType::f32, DType::i32, DType::bf16, DType::f64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
      if (op == ReduceOp::mean && !is_floating(dt)) continue;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + reduce_op_name(op));
      auto reduced = [&](int64_t i) { return reduce_ref(op, i); };
      // Axis 0 of [2p, 3]: this rank keeps rows 2*me, 2*me+1.
      Array got0 = process_group().reduce_scatter(input(me_, Shape{2 * p, 3}, dt), op);
      std::vector<double> want0;
      for (int64_t row = 2 * me_; row < 2 * me_ + 2; ++row)
        for (int64_t c = 0; c < 3; ++c) want0.push_back(reduced(row * 3 + c));
      EXPECT_EQ(got0.shape(), (Shape{2, 3}));
      EXPECT_EQ(got0.dtype(), dt);
      EXPECT_TRUE(all_close(got0, want0, dt == DType::bf16 ? 1e-2 : 1e-6));
      // Axis 1 of [3, 2p]: this rank keeps columns 2*me, 2*me+1.
      Array got1 = process_group().reduce_scatter(input(me_, Shape{3, 2 * p}, dt), op, 1);
      std::vector<double> want1;
      for (int64_t row = 0; row < 3; ++row)
        for (int64_t c = 2 * me_; c < 2 * me_ + 2; ++c) want1.push_back(reduced(row * 2 * p + c));
      EXPECT_EQ(got1.shape(), (Shape{3, 2}));
      EXPECT_TRUE(all_close(got1, want1, dt == DType::bf16 ? 1e-2 : 1e-6));
    }
  }
}

// Bad arguments fail on every rank alike (the ranks agree on the call first),
// so the group stays usable.
TEST(ProcessGroup, BadArguments) {
  ProcessGroup& g = process_group();
  const int p = count();
  EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{2}, DType::i32), ReduceOp::mean), "needs a floating dtype");
  EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{2}, DType::bool_)), "cannot reduce bool");
  if (p > 1)
    EXPECT_PAX_ERROR(g.reduce_scatter(input(me(), Shape{2 * p + 1}, DType::f32)),
                     "not a multiple of the process count");
  EXPECT_PAX_ERROR(g.reduce_scatter(scalar(1.0f)), "rank >= 1");
  EXPECT_PAX_ERROR(g.reduce_scatter(input(me(), Shape{2, 2 * p}, DType::f32), ReduceOp::sum, 2), "axis");
  EXPECT_PAX_ERROR(g.broadcast(scalar(1.0f), p), "not a process index");
  EXPECT_PAX_ERROR(g.broadcast(scalar(1.0f), -1), "not a process index");
  EXPECT_PAX_ERROR(g.all_gather(scalar(1.0f), 0, true), "rank >= 1");
  EXPECT_PAX_ERROR(g.all_gather(input(me(), Shape{2, 3}, DType::f32), 3), "axis");
  EXPECT_PAX_ERROR(g.all_reduce(Array()), "empty Array");
  EXPECT_PAX_ERROR(g.set_timeout_seconds(0), "positive");
  EXPECT_PAX_ERROR(g.set_timeout_seconds(-2), "positive");
  // Still usable.
  EXPECT_TRUE(all_close(g.all_reduce(scalar(1.0)), {double(p)}));
}

TEST(ProcessGroup, MismatchedCallsThrowOnEveryRank) {
  if (count() == 1) GTEST_SKIP() << "needs several processes";
  ProcessGroup& g = process_group();
  EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{me() + 1}, DType::f32)), "the processes disagree");
  EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{2}, me() == 0 ? DType::f32 : DType::f64)), "rank 1 calls");
  EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{2}, DType::f32), me() == 0 ? ReduceOp::sum : ReduceOp::max),
                   "all_reduce #");
  // Different operations: an all_gather against a broadcast.
  if (me() == 0) {
    EXPECT_PAX_ERROR(g.all_gather(scalar(1.0f)), "calls broadcast");
  } else {
    EXPECT_PAX_ERROR(g.broadcast(scalar(1.0f)), "rank 0 calls all_gather");
  }
  // The group is still usable after a mismatch.
  EXPECT_TRUE(all_close(g.all_reduce(scalar(2.0)), {2.0 * count()}));
  g.barrier();
}

// Rank 0 alone runs a phase longer than the collectives' timeout (a restore
// or a save): the others wait for it at the phase barrier, not the timeout.
TEST(ProcessGroup, ChiefPhaseMayOutlastTheTimeout) {
  ProcessGroup& g = process_group();
  const double timeout = g.timeout_seconds();
  g.set_timeout_seconds(0.3);
  run_on_root([] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); });
  if (me() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  g.meet_after("a test's phase");
  EXPECT_TRUE(all_close(g.all_reduce(scalar(1.0)), {double(count())}));
  g.set_timeout_seconds(timeout);
}

// One rank skips a collective (`call`, by default a host-side all_reduce):
// the others throw within the (short) timeout, naming it (ctest's TIMEOUT
// bounds the wait); the group is unusable afterwards. Run one per launch
// (see tests/CMakeLists.txt); the group breaks for good.
void expect_timeout_naming(
    int skipper, const std::function<void()>& call = [] { process_group().all_reduce(scalar(1.0f)); }) {
  if (count() == 1) GTEST_SKIP() << "needs several processes";
  ProcessGroup& g = process_group();
  g.set_timeout_seconds(2);
  if (me() == skipper) return;
  std::string message;
  try {
    call();
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("all_reduce: timed out after"), std::string::npos) << message;
  EXPECT_NE(message.find("rank " + std::to_string(skipper)), std::string::npos) << message;
  EXPECT_PAX_ERROR(g.barrier(), "unusable");
}

TEST(DistTimeout, NonRootMissing) { expect_timeout_naming(1); }

// A compiled program's collective runs on the communication thread; its
// timeout reaches the program's caller, naming the rank that never came.
TEST(DistTimeout, CompiledCollectiveNamesTheMissingRank) {
  auto program = jit([](const Array& x) { return std::make_pair(lax::psum(x, "processes"), tanh(x) * 2.0); });
  expect_timeout_naming(count() - 1, [&] { program(full(Shape{1000}, 1.0f)); });
}

// A phase that outlasts even the phase timeout: the waiting ranks name it.
TEST(DistTimeout, ChiefPhaseTooLong) {
  if (count() == 1) GTEST_SKIP() << "needs several processes";
  ProcessGroup& g = process_group();
  g.set_timeout_seconds(0.5);
  g.set_phase_timeout_seconds(1);
  std::string message;
  try {
    run_on_root([] { std::this_thread::sleep_for(std::chrono::seconds(4)); });
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    message = e.what();
  }
  if (me() != 0) {
    EXPECT_NE(message.find("after a phase run on process 0 alone"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  }
  g.set_timeout_seconds(60);  // bounds MPI_Finalize at exit
}

// A process asked to stop waits at most the stop grace, not the hour of a
// phase timeout, for a peer that is busy elsewhere, and says why it gave up.
TEST(DistTimeout, StopRequestEndsAPhaseWait) {
  if (count() == 1) GTEST_SKIP() << "needs several processes";
  ProcessGroup& g = process_group();
  g.set_timeout_seconds(0.5);
  g.set_phase_timeout_seconds(3600);
  g.set_stop_grace_seconds(1);
  if (me() != 0) request_stop();
  std::string message;
  try {
    // Rank 0 works alone for 6 s; the others would wait for it without the stop.
    run_on_root([] { std::this_thread::sleep_for(std::chrono::seconds(6)); });
  } catch (const Error& e) {
    message = e.what();
  }
  clear_stop_request();
  if (me() != 0) {
    EXPECT_NE(message.find("gave up waiting 1 s after this process was asked to stop"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  }
  g.set_timeout_seconds(60);  // bounds MPI_Finalize at exit
}

// Every rank arrives and agrees, then the last one moves no data (as if it had
// stopped mid-transfer): the others name it as the rank whose data never came.
TEST(DistTimeout, TransferStalled) {
  if (count() == 1) GTEST_SKIP() << "needs several processes";
  ProcessGroup& g = process_group();
  g.set_timeout_seconds(1);
  const int stalled = count() - 1;
  if (me() == stalled) {
    // Long enough for the others' timeout and their grace period (2 s).
    stall_next_transfer_for_testing(6);
    EXPECT_PAX_ERROR(g.all_reduce(input(me(), Shape{1000}, DType::f32)), "on purpose");
    return;
  }
  std::string message;
  try {
    g.all_reduce(input(me(), Shape{1000}, DType::f32));
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("moving data: rank " + std::to_string(stalled) + "'s data never arrived"), std::string::npos)
      << message;
  EXPECT_PAX_ERROR(g.barrier(), "unusable");
  // MPI_Finalize at exit waits for the stalled rank; the timeout also bounds that.
  g.set_timeout_seconds(60);
}
TEST(DistTimeout, RootMissing) { expect_timeout_naming(0); }

}  // namespace
}  // namespace pax::dist

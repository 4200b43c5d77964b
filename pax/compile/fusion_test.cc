// Fused loops against eager execution: the same bits for elementwise chains
// with broadcasts, bf16 / f16, integers, selects, conversions, special values
// and trailing row reductions; a tight tolerance for float sums over leading
// axes (another summation order). Also the grouping itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "pax/api/transforms.h"
#include "pax/backend/backend.h"
#include "pax/core/device_put.h"
#include "pax/backend/cpu/cpu_backend.h"
#include "pax/backend/cpu/fused_loop.h"
#include "pax/backend/cpu/native_compiler.h"
#include "pax/compile/fusion.h"
#include "pax/backend/cpu/gemm_dnnl.h"
#include "pax/ir/executable.h"
#include "pax/ops/lax.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

// The same bits, element by element. A NaN may differ in sign and payload:
// which of two NaN operands an instruction returns depends on the operand
// order the C++ compiler picked for a commutative operation.
::testing::AssertionResult same_bits(const Array& got, const Array& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got.aval().str() << ", want " << want.aval().str();
  }
  const size_t w = itemsize(got.dtype());
  const Array got_host = device_get(got), want_host = device_get(want);
  const auto* a = static_cast<const unsigned char*>(got_host.data());
  const auto* b = static_cast<const unsigned char*>(want_host.data());
  std::vector<double> gv, wv;
  for (size_t i = 0; i < got.nbytes(); i += w) {
    if (std::memcmp(a + i, b + i, w) == 0) continue;
    if (gv.empty()) {
      gv = got.to_vector<double>();
      wv = want.to_vector<double>();
    }
    if (std::isnan(gv[i / w]) && std::isnan(wv[i / w])) continue;
    return ::testing::AssertionFailure() << "element " << i / w << " differs: got " << gv[i / w] << ", want "
                                         << wv[i / w];
  }
  return ::testing::AssertionSuccess();
}

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Steps of the schedule printed by Executable::str() (fusion members excluded).
int top_level_steps(const std::string& s) {
  int n = 0;
  size_t p = 0;
  while ((p = s.find("\n    ", p)) != std::string::npos) {
    p += 5;
    n += s[p] != ' ' && s[p] != '}';
  }
  return n;
}

CompileOptions unfused() {
  CompileOptions o;
  o.fuse = false;
  return o;
}

// Compiles `jaxpr` (fused, and one kernel per equation) and compares both with
// eager evaluation: the same bits, or within `tol` when tol > 0.
void check(const JaxprPtr& jaxpr, const std::vector<Array>& args, int fusions, double tol = 0) {
  auto exe = compile(jaxpr);
  EXPECT_EQ(count_of(exe->str(), "fusion["), fusions) << exe->str();
  std::vector<Array> want = eval_jaxpr(*jaxpr, args);
  std::vector<Array> got = exe->run(args);
  std::vector<Array> plain = compile(jaxpr, unfused())->run(args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(plain[i], want[i])) << "unfused output " << i;
    if (tol > 0) EXPECT_TRUE(all_close(got[i], want[i], tol, tol)) << "output " << i << "\n" << exe->str();
    else EXPECT_TRUE(same_bits(got[i], want[i])) << "output " << i << "\n" << exe->str();
  }
}

template <class F, class... A>
void check_fn(F f, int fusions, const A&... args) {
  check(make_jaxpr(f)(args...), {args...}, fusions);
}

TEST(Fusion, ChainWithBroadcastsIsOneLoop) {
  auto f = [](const Array& x, const Array& row, const Array& col) {
    Array y = tanh(x * row + col) * 0.5 - exp(-x);
    return where(y > 0.1, y, x * y);
  };
  for (auto [m, n] : {std::pair<int64_t, int64_t>{37, 129}, {300, 1000}, {1, 1}}) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
      Array x = random_array({m, n}, dt, 1, -3, 3);
      Array row = random_array({n}, dt, 2);
      Array col = random_array({m, 1}, dt, 3);
      auto jaxpr = make_jaxpr(f)(x, row, col);
      check(jaxpr, {x, row, col}, 1);
      EXPECT_EQ(top_level_steps(compile(jaxpr)->str()), 1) << compile(jaxpr)->str();
    }
  }
}

// A nullary equation (an iota too large for constant folding) beside a
// fusable chain: the grouper must not look for its input.
TEST(Fusion, LargeIotaStaysAStepOfItsOwn) {
  const int64_t n = 100000;
  auto f = jit([n](const Array& x) { return exp(x + lax::iota(DType::f32, {n}) * 0.0f); });
  Array x = testing::random_array({n}, DType::f32, 3);
  EXPECT_TRUE(testing::all_close(f(x), exp(x)));
}

TEST(Fusion, EightOpChainOfLiterals) {
  auto f = [](const Array& x) { return minimum((maximum(x * 1.5 + 0.25, 0.0) * 2.0 - x) * 0.75 + 1.0, 3.0); };
  for (int64_t n : {100000, (1 << 21) + 13}) {  // the larger output is written with non-temporal stores
    Array x = random_array({n}, DType::f32, 4, -2, 2);
    check_fn(f, 1, x);
    EXPECT_EQ(top_level_steps(compile(make_jaxpr(f)(x))->str()), 1);
  }
}

TEST(Fusion, AccumulatorChainsMatchTheKernels) {
  // Loops whose instructions each combine the previous result with an input
  // or a constant run in vector registers; every operand order, NaN in
  // either operand of max / min, signed zeros, infinities, tails.
  std::vector<double> special = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-310, -1e-40, 3.5, -2.25, 1e30, 7.0};
  auto f = [](const Array& x, const Array& y) {
    Array a = (2.0 - x) / y * 3.0;              // constant first, array divisor
    Array b = maximum(minimum(x, 0.5), y);      // NaN from either side
    Array c = maximum(y, minimum(0.5, x)) - y;  // the accumulator second
    Array d = -abs(x) * y + x;                  // unary steps, array leaves
    return std::make_tuple(a, b, c, d);
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 15, 17, 63, 65, 1000, 100003}) {
      std::vector<double> xv = testing::random_values(n, 40, -4, 4), yv = testing::random_values(n, 41, -4, 4);
      for (size_t i = 0; i < special.size() && i < size_t(n); ++i) {
        xv[i * 7 % size_t(n)] = special[i];
        yv[i * 5 % size_t(n)] = special[(i + 3) % special.size()];
      }
      Array x = array(xv, {n}).astype(dt), y = array(yv, {n}).astype(dt);
      auto jaxpr = make_jaxpr(f)(x, y);
      EXPECT_EQ(count_of(compile(jaxpr)->str(), ", chain]"), 4) << compile(jaxpr)->str();
      check(jaxpr, {x, y}, 4);
    }
  }
  // A broadcast row as a leaf, and chains ending in row and column reductions.
  Array x = random_array({37, 129}, DType::f32, 42), row = random_array({129}, DType::f32, 43);
  check_fn([](const Array& x, const Array& row) { return x * row - 1.0; }, 1, x, row);
  check_fn([](const Array& x, const Array& row) { return sum(x * row - 1.0, -1); }, 1, x, row);
  check(make_jaxpr([](const Array& x) { return sum(x * 2.0 + 1.0, 0); })(x), {x}, 1, 1e-6);
}

TEST(Fusion, IntegerChains) {
  auto f = [](const Array& x, const Array& y) { return maximum(bitwise_xor(x * y, x), y) + x; };
  for (DType dt : {DType::u8, DType::u32, DType::i32, DType::i64}) {
    Array x = random_array({3000}, dt, 5, -100, 100), y = random_array({3000}, dt, 6, -100, 100);
    check_fn(f, 1, x, y);
  }
  auto g = [](const Array& x, const Array& y) {
    auto c = [&](int32_t v) { return broadcast_to(scalar(v), x.shape()); };
    Array a = lax::add(lax::mul(x, c(3)), y);
    Array b = lax::shift_right_arithmetic(a, c(1));
    Array r = lax::rem(b, lax::max(y, c(1)));
    Array m = lax::lt(r, x);
    return std::make_pair(lax::select_n(m, {r, lax::neg(x)}), lax::convert_element_type(r, DType::u8));
  };
  check_fn(g, 1, random_array({4099}, DType::i32, 7, -1000, 1000), random_array({4099}, DType::i32, 8, -50, 50));
}

TEST(Fusion, SelectWithArrayAndScalarSelectors) {
  auto f = [](const Array& k, const Array& a, const Array& b, const Array& c) {
    Array picked = lax::select_n(k, {a, lax::exp(b), c * 2.0});
    return lax::select_n(lax::gt(a, b), {picked, a + b});
  };
  Array a = random_array({2000}, DType::f32, 9), b = random_array({2000}, DType::f32, 10);
  Array c = random_array({2000}, DType::f32, 11);
  for (int32_t k : {-3, 0, 1, 2, 9}) check_fn(f, 1, scalar(k), a, b, c);
  auto g = [](const Array& k, const Array& a, const Array& b) { return lax::select_n(k, {lax::exp(a), b}); };
  check_fn(g, 1, scalar(true), a, b);
  check_fn(g, 1, random_array({2000}, DType::f32, 12) > 0.0, a, b);
}

TEST(Fusion, TranscendentalsWithOutOfRangeValues) {
  // sin / cos pick their algorithm per window of 512 elements; fused blocks
  // must see the same windows.
  for (DType dt : {DType::f32, DType::bf16}) {
    std::vector<float> v(5000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(std::sin(double(i)) * 3.0);
    v[700] = 5e4f;
    v[2047] = -1e5f;
    v[4097] = 1e6f;
    Array x = array(v, {5000}).astype(dt);
    check_fn([](const Array& x) { return sin(x) * cos(x * 0.5) + exp(x * 1e-5) + tanh(x) * nn::sigmoid(x); }, 1, x);
  }
}

TEST(Fusion, ConversionsAndSpecialValues) {
  Array x = array<float>({1.5f, -2.5f, NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 0.0f, -0.0f, 1e-30f, 7, 8.5f});
  auto f = [](const Array& x) {
    Array i = lax::convert_element_type(x * 1e3, DType::i32);  // saturates; NaN -> 0
    Array h = lax::convert_element_type(lax::convert_element_type(x, DType::bf16) * 3.0, DType::f32);
    Array p = lax::integer_pow(x, 3) + lax::integer_pow(x, -2);
    Array r = lax::round(x, lax::RoundingMethod::to_nearest_even) + lax::round(x);
    Array finite = lax::is_finite(x * 2.0);
    return std::make_tuple(i, h, p, r, lax::select_n(finite, {x * 0.0, sqrt(abs(x))}));
  };
  check_fn(f, 5, x);  // five independent loops
}

// int32 division, remainder, shifts and powers, float -> int32 and int32 ->
// bool conversions jitted: one fused loop, every instruction of it in
// generated code where a compiler builds it, and the bits of eager execution
// for zero divisors, INT32_MIN / -1, negative operands, shift counts outside
// [0, 32), NaN, infinities, values past the int32 range and halves.
TEST(Fusion, IntegerDivisionShiftsAndFloatToIntConversions) {
  const int32_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> a = {0, 1, -1, 7, -7, 100, -100, lo, hi, lo + 1, 12345678, -98765};
  const std::vector<int32_t> b = {0, -1, 1, 2, -2, 3, -3, 31, 32, 100, -100, lo, hi, -32, 0, 16};
  const std::vector<float> c = {
      NAN,   -NAN,          INFINITY, -INFINITY, 2147483648.0f, -2147483648.0f, -2147483648.0f - 1e3f, -0.5f, 0.5f,
      -0.0f, 2147483520.0f, 4e9f,     -1.5f,     2.99f,         1e-40f};
  const size_t n = a.size() * b.size();
  std::vector<int32_t> xv(n), yv(n);
  std::vector<float> cv(n);
  for (size_t i = 0; i < n; ++i) {
    xv[i] = a[i % a.size()];
    yv[i] = b[i / a.size()];
    cv[i] = c[i % c.size()];
  }
  Array x = array(xv, {int64_t(n)}), y = array(yv, {int64_t(n)}), v = array(cv, {int64_t(n)});
  auto f = [](const Array& x, const Array& y, const Array& v) {
    Array q = lax::div(x, y);
    Array r = lax::rem(x, y);
    Array shl = lax::neg(lax::shift_left(x, y));  // each op with another, for a run of two
    Array srl = lax::neg(lax::shift_right_logical(x, y));
    Array sra = lax::neg(lax::shift_right_arithmetic(x, y));
    Array p = lax::add(lax::integer_pow(x, 3), lax::integer_pow(y, -1));
    Array vi = lax::convert_element_type(v, DType::i32);
    Array hi = lax::convert_element_type(lax::convert_element_type(v, DType::bf16), DType::i32);
    Array nz = lax::convert_element_type(lax::sub(q, r), DType::bool_);
    return std::make_tuple(lax::neg(q), r, shl, srl, sra, p, lax::sub(vi, hi), vi, nz);
  };
  auto jaxpr = make_jaxpr(f)(x, y, v);
  const cpu::NativeBuildStats before = cpu::native_build_stats();
  auto exe = compile(jaxpr);
  // Each loop holds whole chains: the rest of the schedule is the outputs.
  const StepSchedule sched = schedule(exe->optimized_jaxpr(), true, cpu::cpu_lowering_target());
  EXPECT_EQ(sched.steps.size(), sched.groups.size()) << exe->str();
  check(jaxpr, {x, y, v}, int(sched.groups.size()));
  if (!cpu::native_compiler_available()) return;  // interpreted: the bits are checked above
  const cpu::NativeBuildStats after = cpu::native_build_stats();
  EXPECT_GT(after.compiled + after.cache_hits, before.compiled + before.cache_hits) << "no code built or loaded";
  EXPECT_EQ(after.failed, before.failed) << "a build of generated code failed";
  for (const FusionGroup& g : sched.groups) {
    cpu::FusedLoop loop(*g.program);
    loop.finalize();
    ASSERT_EQ(loop.compiled_runs.size(), 1u) << exe->str();
    EXPECT_EQ(loop.compiled_runs[0], std::make_pair(0, int(loop.instrs.size()))) << exe->str();
  }
}

TEST(Fusion, Bf16LoopsInWideRegistersAreBitIdentical) {
  // Loops of several bf16 operations hold bf16 values as f32 and round each
  // result: inputs read contiguously, through views and as splats; selects,
  // compares, conversions from and to bf16, stored intermediates, row
  // reductions; special values; outputs of 4 MiB and more (streamed).
  const size_t stream_was = cpu::set_stream_bytes_for_testing(size_t(4) << 20);
  auto f = [](const Array& x, const Array& row, const Array& s, const Array& h, const Array& i, const Array& d) {
    Array a = tanh(x * row + s) * 0.5 - exp(-x);
    Array b = where(a > x, a, x * a);
    Array c = lax::integer_pow(a, 3) + lax::convert_element_type(h, DType::bf16) +
              lax::convert_element_type(i, DType::bf16) * lax::convert_element_type(d, DType::bf16);
    Array c16 = lax::convert_element_type(c * 3.0, DType::f16);
    Array ci = lax::convert_element_type(c * 1e3, DType::i32);
    Array cf = lax::convert_element_type(c, DType::f32) * 2.0;
    Array same = lax::convert_element_type(b, DType::bf16) + a;
    Array back = lax::convert_element_type(cf * 0.3, DType::bf16) * a;
    Array finite = lax::is_finite(c * 1e30);
    return std::make_tuple(a, b, c16, ci, cf, same, back, finite, sum(c * a, -1));
  };
  for (auto [m, n] : {std::pair<int64_t, int64_t>{3, 37}, {37, 1029}, {2, (1 << 21) + 5}}) {
    std::vector<double> xv = testing::random_values(m * n, 50, -3, 3);
    const double special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e38, -1e-40, 3.0e38};
    for (size_t k = 0; k < std::size(special); ++k) xv[k * 13 % size_t(m * n)] = special[k];
    Array x = array(xv, {m, n}).astype(DType::bf16);
    Array row = random_array({n}, DType::bf16, 51);
    Array s = scalar(0.25f).astype(DType::bf16);
    Array h = random_array({m, n}, DType::f16, 52, -100, 100);
    Array i = random_array({m, n}, DType::i32, 53, -300000000, 300000000);
    Array d = random_array({m, n}, DType::f64, 54);
    auto jaxpr = make_jaxpr(f)(x, row, s, h, i, d);
    const std::string program = compile(jaxpr)->str();
    EXPECT_GE(count_of(program, "wide_bf16"), 1) << program;
    check(jaxpr, {x, row, s, h, i, d}, count_of(program, "fusion["));
  }
  cpu::set_stream_bytes_for_testing(stream_was);
}

TEST(Fusion, RowReductionsAreBitIdentical) {
  auto sum_last = [](const Array& x, const Array& w) { return sum(exp(x) * w, -1); };
  check_fn(sum_last, 1, random_array({64, 1000}, DType::f32, 13), random_array({1000}, DType::f32, 14));
  // Rows longer than one reduction block (32768): several partials per row.
  check_fn(sum_last, 1, random_array({3, 50000}, DType::f32, 15), random_array({50000}, DType::f32, 16));
  auto sum_all = [](const Array& x) { return sum(x * x + 1.0); };
  check_fn(sum_all, 1, random_array({3, 50000}, DType::f32, 17));
  check_fn(sum_all, 1, random_array({200, 100}, DType::bf16, 18));  // short rows, many per tile
  check_fn(sum_all, 1, random_array({7, 33}, DType::f16, 19));
  auto max_last = [](const Array& x) { return max(x * 2.0 - 1.0, -1); };
  Array with_nan = where(random_array({40, 77}, DType::f32, 20) > 0.9, NAN, random_array({40, 77}, DType::f32, 21));
  check_fn(max_last, 1, with_nan);
  check_fn([](const Array& x) { return min(abs(x), {1, 2}); }, 1, random_array({4, 5, 600}, DType::f32, 22));
  check_fn([](const Array& x) { return sum(x * 3, -1); }, 1, random_array({4, 1, 600}, DType::i32, 23, -100, 100));
  check_fn([](const Array& x) { return sum(x + 1.0, -1); }, 1, random_array({5, 65536 + 513}, DType::bf16, 24));
}

TEST(Fusion, ReductionWithOtherOutputs) {
  // e is needed after the loop: stored while the rows are reduced.
  auto softmax = [](const Array& x) {
    Array m = max(x, -1, true);
    Array e = exp(x - m);
    return e / sum(e, -1, true);
  };
  check_fn(softmax, 2, random_array({33, 1500}, DType::f32, 25, -5, 5));
  auto both = [](const Array& x) {
    Array y = tanh(x);
    return std::make_pair(sum(y, -1), y * 2.0);
  };
  check_fn(both, 1, random_array({17, 4000}, DType::f32, 26));
}

TEST(Fusion, LeadingAxisReductions) {
  auto sum0 = [](const Array& x) { return sum(x * 2.0 + 1.0, 0); };
  // Float sums run in another order: within a few ulp.
  check(make_jaxpr(sum0)(zeros({1000, 64})), {random_array({1000, 64}, DType::f32, 27)}, 1, 1e-5);
  check(make_jaxpr(sum0)(zeros({5000, 300})), {random_array({5000, 300}, DType::f32, 28)}, 1, 1e-5);
  check(make_jaxpr(sum0)(zeros({999, 130}, DType::bf16)), {random_array({999, 130}, DType::bf16, 29)}, 1, 1e-2);
  // Integer sums and maxima are exact.
  check_fn([](const Array& x) { return sum(x * 3, 0); }, 1, random_array({700, 50}, DType::i32, 30, -100, 100));
  check_fn([](const Array& x) { return max(x * 3.0, {0, 1}); }, 1, random_array({70, 5, 300}, DType::f32, 31));
}

TEST(Fusion, SameBitsForAnyThreadCount) {
  auto f = [](const Array& x) { return std::make_pair(sum(exp(x), 0), sum(tanh(x) * 3.0, -1)); };
  Array x = random_array({3000, 200}, DType::f32, 32);
  auto exe = compile(make_jaxpr(f)(x));
  const int threads = num_threads();
  set_num_threads(1);
  std::vector<Array> one = exe->run({x});
  set_num_threads(std::max(2, threads));
  std::vector<Array> many = exe->run({x});
  set_num_threads(threads);
  EXPECT_TRUE(same_bits(one[0], many[0]));
  EXPECT_TRUE(same_bits(one[1], many[1]));
}

TEST(Fusion, ValuesNeededOutsideTheLoop) {
  // bb is broadcast inside the loop and also read by the matmul; r is a
  // reshape of a loop result returned as well.
  auto f = [](const Array& x, const Array& b, const Array& w) {
    Array bb = broadcast_to(b, {8, 16});
    Array y = exp(x) + bb;
    Array r = reshape(y, {16, 8});
    return std::make_tuple(matmul(bb, w), r, nn::relu(matmul(y, w)) * 2.0);
  };
  check_fn(f, 2, random_array({8, 16}, DType::f32, 33), random_array({16}, DType::f32, 34),
           random_array({16, 4}, DType::f32, 35));
}

// A train step's keep-or-drop: an update computed from the gradient, kept
// only where the gradient's norm is finite. The norm's loop does not take the
// update (its result decides the keep-or-drop), so the update and the
// keep-or-drop run as one loop after it, and no loop reads the update back.
TEST(Fusion, AnUpdateKeptByANormJoinsItsSelect) {
  auto f = [](const Array& p, const Array& x, const Array& m) {
    const Array g = matmul(x, transpose(x)) * (1.0 / 300.0);  // a gradient: computed, not an input
    const Array sq = lax::integer_pow(g, 2);
    const Array ok = isfinite(sqrt(sum(sq)));
    const Array new_m = m * 0.9 + sq * 0.1;
    const Array new_p = p - g * 0.01 / (sqrt(new_m) + 1e-8);
    return std::make_pair(where(ok, new_p, p), where(ok, new_m, m));
  };
  const Array p = random_array({300, 300}, DType::f32, 60), x = random_array({300, 70}, DType::f32, 61);
  const Array m = random_array({300, 300}, DType::f32, 62, 0.0, 1.0);
  // The norm, the scalar test, the update with its keep-or-drop (the
  // products' sums in their kernel's order: within a few ulp).
  check(make_jaxpr(f)(p, x, m), {p, x, m}, 3, 1e-5);
  auto exe = compile(make_jaxpr(f)(p, x, m));
  const Jaxpr& j = exe->optimized_jaxpr();
  const StepSchedule sched = schedule(j, true, cpu::cpu_lowering_target());
  for (const FusionGroup& group : sched.groups) {
    bool selects = false, divides = false;
    for (size_t e : group.eqns) {
      selects = selects || j.eqns[e].prim == Prim::select_n;
      divides = divides || j.eqns[e].prim == Prim::div;
    }
    EXPECT_EQ(selects, divides) << exe->str();
  }
}

// What that rule leaves alone: loops whose values never meet the
// reduction's result again keep joining its loop after the result is read
// (a mean-squared error's value and gradient; a variance from two sums), and
// so does an update whose keep-or-drop is decided after it.
TEST(Fusion, LoopsThatNeverMeetTheirReductionAgainStayJoined) {
  auto mse = [](const Array& x, const Array& w, const Array& y) {
    return value_and_grad<1>([&](const Array& x, const Array& w) {
      const Array e = matmul(x, w) - y;
      return sum(e * e) / 64.0;
    })(x, w);
  };
  const Array x = random_array({64, 32}, DType::f32, 70), w = random_array({32, 16}, DType::f32, 71);
  const Array y = random_array({64, 16}, DType::f32, 72);
  check(make_jaxpr(mse)(x, w, y), {x, w, y}, 2, 1e-5);  // the error with its square's sum; its gradient's scale
  auto moments = [](const Array& h) {
    const Array mean = sum(h) / 4096.0;
    return std::make_pair(mean, sum(h * h) / 4096.0 - mean * mean);
  };
  check_fn(moments, 2, random_array({64, 64}, DType::f32, 73));
  auto late = [](const Array& p, const Array& x) {
    const Array g = matmul(x, transpose(x));
    const Array sq = lax::integer_pow(g, 2);
    const Array new_p = p - sq * 0.01;
    return where(isfinite(sqrt(sum(sq))), new_p, p);
  };
  const Array p = random_array({100, 100}, DType::f32, 74), x2 = random_array({100, 30}, DType::f32, 75);
  check(make_jaxpr(late)(p, x2), {p, x2}, 3, 1e-5);  // the update with the norm; the test; the keep-or-drop
}

TEST(Fusion, ZeroSizeAndScalars) {
  auto f = [](const Array& x) { return exp(x) * 2.0 + 1.0; };
  check_fn(f, 0, zeros({0, 3}));
  check_fn(f, 1, scalar(0.5f));
  check_fn([](const Array& x) { return sum(exp(x), -1); }, 0, zeros({4, 0}));
}

TEST(Fusion, IndependentChainsMerge) {
  // Two chains over the same domain joined at the end run as one loop.
  auto f = [](const Array& x, const Array& y) { return exp(x) * 2.0 + log1p(abs(y)) * 3.0; };
  check_fn(f, 1, random_array({5000}, DType::f32, 36), random_array({5000}, DType::f32, 37));
}

TEST(Fusion, RandomProgramsMatchEager) {
  // Random programs over [8, 16] or [33, 700] values mixing loops, broadcasts, reshapes,
  // reductions, transposes and matmuls: any schedule the grouping produces
  // must compute what eager execution computes.
  std::mt19937 gen(11);
  for (int trial = 0; trial < 80; ++trial) {
    const uint32_t seed = uint32_t(gen());
    const int64_t rows = trial % 4 == 3 ? 33 : 8, cols = trial % 4 == 3 ? 700 : 16;
    auto f = [seed, rows, cols](const Array& x, const Array& y, const Array& row, const Array& w) {
      std::mt19937 pick(seed);
      std::vector<Array> live = {x, y, x * row};
      std::vector<Array> outs;
      for (int step = 0; step < 24; ++step) {
        const Array& a = live[pick() % live.size()];
        const Array& b = live[pick() % live.size()];
        Array r;
        switch (pick() % 12) {
          case 0: r = a + b; break;
          case 1: r = a * b - 0.5; break;
          case 2: r = maximum(a, b); break;
          case 3: r = tanh(a) + row; break;
          case 4: r = exp(-abs(a)); break;
          case 5: r = a - sum(b, -1, true); break;  // reduce, then broadcast back
          case 6: r = a * max(b, 0, true); break;   // leading-axis reduction
          case 7: r = reshape(reshape(a, {rows * cols}) * 2.0, {rows, cols}); break;
          case 8: r = transpose(transpose(a) + 1.0); break;
          case 9: r = matmul(a, w); break;
          case 10: r = where(a > b, a, b * 3.0); break;
          default: r = a / (abs(b) + 1.0); break;
        }
        live.push_back(r);
        if (pick() % 4 == 0) outs.push_back(r);
      }
      outs.push_back(live.back());
      outs.push_back(sum(live[live.size() - 2]));
      return outs;
    };
    Array x = random_array({rows, cols}, DType::f32, seed), y = random_array({rows, cols}, DType::f32, seed + 1);
    Array row = random_array({cols}, DType::f32, seed + 2);
    Array w = random_array({cols, cols}, DType::f32, seed + 3, -0.1, 0.1);
    auto jaxpr = make_jaxpr(f)(x, y, row, w);
    const std::vector<Array> args = {x, y, row, w};
    std::vector<Array> want = eval_jaxpr(*jaxpr, args);
    auto exe = compile(jaxpr);
    std::vector<Array> got = exe->run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // Leading-axis sums run in another order: compare those within a tolerance.
      ASSERT_TRUE(all_close(got[i], want[i], 1e-5, 1e-5)) << "trial " << trial << " output " << i << "\n" << exe->str();
    }
  }
}

TEST(Fusion, LoopsAroundAMatmulStaySeparate) {
  // The elementwise ops after the matmul depend on it: they cannot join the
  // loop before it.
  auto g = [](const Array& x, const Array& w) {
    Array h = exp(x) * 2.0;
    Array z = matmul(h, w);
    return tanh(z) + sum(h);
  };
  check_fn(g, 2, random_array({6, 6}, DType::f32, 38), random_array({6, 6}, DType::f32, 39));
}

// A softmax over widened bf16 logits with a mask: the loops after the first
// recompute the convert and the select from the bf16 input instead of reading
// stored f32 copies (compile/passes/duplicate.cc), while the exponentials,
// dearer to recompute than to reload, are computed once, stored by the sum's
// loop and read by the division's, with the same bits.
TEST(Fusion, CheapWideningIsRecomputedExponentialsAreNot) {
  auto f = [](const Array& x, const Array& keep) {
    Array m = where(keep, x.astype(DType::f32), full({}, -1e9f, DType::f32));  // (64, 512)
    Array e = exp(m - max(m, {-1}, true));
    return e / sum(e, {-1}, true);
  };
  Array x = random_array({64, 512}, DType::bf16, 40, -4, 4);
  Array keep = random_array({1, 512}, DType::f32, 41) > 0.3;
  auto jaxpr = make_jaxpr(f)(x, keep);
  check(jaxpr, {x, keep}, 3);
  // The stored f32 values are the exponentials and the result.
  int stored = 0;
  const std::string program = compile(jaxpr)->str();
  std::istringstream lines(program);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("= fusion[") != std::string::npos) stored += count_of(line, ":f32[64,512]");
  }
  EXPECT_EQ(stored, 2) << program;
  EXPECT_EQ(count_of(program, " exp "), 1) << program;
  EXPECT_EQ(count_of(program, " convert_element_type"), 2) << program;  // in the max's and the sum's loops
}

// A value computed from an input of its own width (x * 3) is recomputed by
// the loop after the matmul rather than stored for it: reading x costs what
// reading the value would, and the store is saved.
TEST(Fusion, EqualWidthChainsAreRecomputedNotStored) {
  auto f = [](const Array& x, const Array& w) {
    Array s = x * full({}, 3.0f, DType::f32);   // (64, 512)
    Array y = matmul(x, w);                     // a step outside the loops
    return std::make_pair(sum(s), s * sum(y));  // one loop before it, one after
  };
  Array x = random_array({64, 512}, DType::f32, 47), w = random_array({512, 32}, DType::f32, 48);
  auto jaxpr = make_jaxpr(f)(x, w);
  auto exe = compile(jaxpr);
  int stored = 0;
  std::istringstream lines(exe->str());
  for (std::string line; std::getline(lines, line);) {
    if (line.find("= fusion[") != std::string::npos) stored += count_of(line, ":f32[64,512]");
  }
  EXPECT_EQ(stored, 1) << exe->str();  // the result only
  const std::vector<Array> args = {x, w};
  std::vector<Array> want = eval_jaxpr(*jaxpr, args), got = exe->run(args);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << "output " << i;
}

// A duplicated chain stops at a value stored anyway: the f32 copy of bf16
// probabilities (which a matmul reads) is re-widened from them in the later
// loop, not recomputed from the logits through the exponentials again.
TEST(Fusion, DuplicationReadsValuesStoredAnyway) {
  auto f = [](const Array& x, const Array& w) {
    Array p = nn::softmax(x.astype(DType::f32), -1).astype(DType::bf16);  // (64, 512)
    Array wide = p.astype(DType::f32);                                    // computed with p
    Array y = matmul(p, w);                                               // stores p
    return std::make_pair(y, wide * sum(y.astype(DType::f32)));           // reads wide after the matmul
  };
  Array x = random_array({64, 512}, DType::bf16, 45, -4, 4), w = random_array({512, 32}, DType::bf16, 46);
  auto jaxpr = make_jaxpr(f)(x, w);
  auto exe = compile(jaxpr);
  // The softmax's sum loop computes the exponentials (its division loop reads
  // them); the loop after the matmul does not.
  EXPECT_EQ(count_of(exe->str(), " exp "), 1) << exe->str();
  const std::vector<Array> args = {x, w};
  std::vector<Array> want = eval_jaxpr(*jaxpr, args), got = exe->run(args);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << "output " << i;
}

// A training step through a bf16 GELU: the forward loop stores the
// activation the matmul reads and tanh's f32 values; the backward loop reads
// tanh rather than computing it again, and recomputes the cheap rest (the
// widened input, tanh + 1) from the bf16 input and the stored tanh
// (duplication, and forward loops closed once a matmul has read them).
TEST(Fusion, BackwardReadsTanhAndRecomputesTheRest) {
  auto loss = [](const Array& x, const Array& b, const Array& w) {
    return sum(matmul(nn::gelu(x + b), w).astype(DType::f32));
  };
  Array x = random_array({256, 1024}, DType::bf16, 42), b = random_array({1024}, DType::bf16, 43);
  Array w = random_array({1024, 64}, DType::bf16, 44, -0.1, 0.1);
  auto jaxpr = make_jaxpr(value_and_grad<0, 1, 2>(loss))(x, b, w);
  auto exe = compile(jaxpr);
  std::istringstream lines(exe->str());
  int wide_stores = 0, tanh_loops = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("= fusion[") != std::string::npos) wide_stores += count_of(line, ":f32[256,1024]");
    if (line.find(" tanh ") != std::string::npos) ++tanh_loops;
  }
  // tanh; where this CPU has no bf16 GEMM, also the activation widened for the
  // product (passes/widen.cc), which the loop writes instead of the product's
  // kernel widening a bf16 copy.
  const bool native = cpu::gemm_dnnl_supported(cpu::GemmShape{1, 256, 64, 1024}, DType::bf16, DType::bf16);
  EXPECT_EQ(wide_stores, native ? 1 : 2) << exe->str();
  EXPECT_EQ(tanh_loops, 1) << exe->str();
  const std::vector<Array> args = {x, b, w};
  std::vector<Array> want = eval_jaxpr(*jaxpr, args), got = exe->run(args);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-2, 1e-2)) << "output " << i;
}

}  // namespace
}  // namespace pax

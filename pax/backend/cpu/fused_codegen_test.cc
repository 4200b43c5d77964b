// Generated code for runs of fused-loop instructions against the
// interpreter, bit for bit (NaN payloads aside): f32 arithmetic with NaN,
// infinities, signed zeros and subnormals (max / min, div, sqrt, integer_pow,
// neg / abs), every compiled unary operation over its range, comparisons of
// f32 and i32 into bool masks that are selected on and stored, conversions
// (float -> int32 against the convert kernel at NaN, infinities and the
// int32 range's edges), int32 division, remainder, shifts and powers against
// the kernels at zero divisors, INT32_MIN / -1 and counts outside [0, 32),
// splats, wide bf16 loops that round every result (and loops compiled whole,
// which are not wide and give the same bits), narrow bf16 loads and stores,
// partial vectors, runs split by an interpreted instruction, long programs,
// views read in place per segment, and the asynchronous build that publishes code while loops run.
#include "pax/backend/cpu/fused_codegen.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/fused_loop.h"
#include "pax/core/dtype.h"
#include "pax/testing/scoped_env.h"

namespace pax::cpu {
namespace {

struct Builder {
  FusedLoop p;
  int slot(FusedSlot::Kind kind, DType dtype, int arg = -1) {
    FusedSlot s;
    s.kind = kind;
    s.dtype = dtype;
    s.arg = arg;
    p.slots.push_back(s);
    return int(p.slots.size()) - 1;
  }
  int instr(FusedInstr::Kind kind, uint8_t op, DType dtype, DType out, std::vector<int> args, int64_t exponent = 0) {
    FusedInstr ins;
    ins.kind = kind;
    ins.op = op;
    ins.dtype = dtype;
    ins.out_dtype = out;
    ins.args = std::move(args);
    ins.exponent = exponent;
    ins.result = slot(FusedSlot::Kind::reg, out);
    p.instrs.push_back(ins);
    return ins.result;
  }
  int binary(BinaryOp op, int a, int b, DType t = DType::f32) {
    return instr(FusedInstr::Kind::binary, uint8_t(op), t, t, {a, b});
  }
  int unary(UnaryOp op, int a, DType t = DType::f32) { return instr(FusedInstr::Kind::unary, uint8_t(op), t, t, {a}); }
};

// Values that exercise every special case, repeated over the domain.
std::vector<float> specials(size_t n, int shift) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> base = {0.0f,    -0.0f,  1.0f,    -1.5f, 2.75f,    inf,  -inf,  nan,   1e-40f, -3e-39f,
                                   3.4e38f, 1e-20f, 0.3333f, -7.0f, 65504.0f, 0.5f, 1e30f, -2.0f, 3.0f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base[(i * 7 + size_t(shift)) % base.size()] * (1.0f + float(i % 5) * 0.125f);
  return v;
}

struct Output {
  size_t bytes;
  DType dtype;  // f32 and bf16 NaNs compare equal whatever their sign and payload
};

bool is_nan_at(const unsigned char* data, DType dtype, size_t i) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, data + i * 4, 4);
    return std::isnan(v);
  }
  if (dtype == DType::bf16) {
    uint16_t v;
    std::memcpy(&v, data + i * 2, 2);
    return std::isnan(bf16_to_float(v));
  }
  return false;
}

// Runs `p` compiled and interpreted and compares the outputs bit for bit,
// except that a NaN may differ in sign and payload: which operand's NaN an
// operation of two NaNs returns is up to the instruction order the C++
// compiler picked for the kernel. Returns whether any run was compiled.
// p with its runs compiled now (waiting for the compiler thread).
FusedLoop compiled(const FusedLoop& p) {
  auto shared = std::make_shared<const FusedLoop>(p);
  compile_fused_programs({shared});
  wait_for_compile_jobs();
  return *shared;  // the copy shares the published code
}

bool same_both_ways(const FusedLoop& program, std::span<const void* const> in, const std::vector<Output>& outs) {
  FusedLoop p = program.code.load() ? program : compiled(program);
  std::vector<std::vector<unsigned char>> a(outs.size()), b(outs.size());
  std::vector<void*> pa, pb;
  for (size_t k = 0; k < outs.size(); ++k) {
    a[k].assign(outs[k].bytes, 0xAB);
    b[k].assign(outs[k].bytes, 0xAB);
    pa.push_back(a[k].data());
    pb.push_back(b[k].data());
  }
  run_fused(host_kernel_context(), p, in, pa);
  const bool was_compiled = p.code.load() != nullptr;
  p.code.store(nullptr);
  run_fused(host_kernel_context(), p, in, pb);
  for (size_t k = 0; k < outs.size(); ++k) {
    const size_t w = itemsize(outs[k].dtype);
    for (size_t i = 0; i < outs[k].bytes / w; ++i) {
      if (is_nan_at(a[k].data(), outs[k].dtype, i) && is_nan_at(b[k].data(), outs[k].dtype, i)) continue;
      const bool same = std::memcmp(a[k].data() + i * w, b[k].data() + i * w, w) == 0;
      EXPECT_TRUE(same) << "output " << k << " element " << i;
      if (!same) return was_compiled;
    }
  }
  return was_compiled;
}

bool codegen_available() {
  Builder b;
  b.p.size = 4;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  const int sq = b.binary(BinaryOp::mul, x, x);
  b.p.stores.push_back({b.binary(BinaryOp::add, sq, sq), 0});  // not an accumulator chain
  b.p.num_inputs = b.p.num_outputs = 1;
  b.p.finalize();
  return compiled(b.p).code.load() != nullptr;
}

#define SKIP_WITHOUT_CODEGEN() \
  if (!codegen_available()) GTEST_SKIP() << "no C++ compiler (or PAX_COMPILE=off): nothing is compiled"

TEST(FusedCodegen, F32ArithmeticMatchesTheInterpreter) {
  SKIP_WITHOUT_CODEGEN();
  for (int64_t n : {1, 15, 16, 17, 1000, 1031, 5000}) {
    Builder b;
    b.p.size = n;
    const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
    const int y = b.slot(FusedSlot::Kind::input, DType::f32, 1);
    const int c = b.slot(FusedSlot::Kind::splat, DType::f32, 2);
    const int mx = b.binary(BinaryOp::max, x, y);
    const int mn = b.binary(BinaryOp::min, mx, c);
    const int q = b.binary(BinaryOp::div, b.binary(BinaryOp::mul, x, y), y);
    const int r = b.unary(UnaryOp::neg, b.unary(UnaryOp::sqrt, b.unary(UnaryOp::abs, q)));
    const int cube = b.instr(FusedInstr::Kind::integer_pow, 0, DType::f32, DType::f32, {r}, 3);
    const int inv =
        b.instr(FusedInstr::Kind::integer_pow, 0, DType::f32, DType::f32, {b.binary(BinaryOp::sub, x, c)}, -2);
    const int lt = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::lt), DType::f32, DType::bool_, {x, y});
    const int ne = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::ne), DType::f32, DType::bool_, {x, x});
    const int sel = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, DType::f32, {lt, cube, inv});
    const int sel2 = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, DType::f32, {ne, sel, mn});
    const int z = b.binary(BinaryOp::add, sel2, mn);
    b.p.stores = {{z, 0}, {mn, 1}, {lt, 2}, {ne, 3}};
    b.p.num_inputs = 3;
    b.p.num_outputs = 4;
    b.p.finalize();
    const std::vector<float> xv = specials(size_t(n), 0), yv = specials(size_t(n), 5);
    const float cv = 0.75f;
    const void* in[] = {xv.data(), yv.data(), &cv};
    EXPECT_TRUE(same_both_ways(b.p, in,
                               {{size_t(n) * 4, DType::f32},
                                {size_t(n) * 4, DType::f32},
                                {size_t(n), DType::bool_},
                                {size_t(n), DType::bool_}}))
        << n;
  }
}

// int32 arithmetic, bitwise operations, selects and a mask made int are
// compiled (one run holding every instruction) and wrap around as the
// interpreter and the kernels do: INT32_MAX + 1 is INT32_MIN.
TEST(FusedCodegen, Int32ArithmeticIsCompiled) {
  SKIP_WITHOUT_CODEGEN();
  for (int64_t n : {1, 15, 17, 1031}) {
    Builder b;
    b.p.size = n;
    const int x = b.slot(FusedSlot::Kind::input, DType::i32, 0);
    const int y = b.slot(FusedSlot::Kind::input, DType::i32, 1);
    const int one = b.slot(FusedSlot::Kind::splat, DType::i32, 2);
    const int sum = b.binary(BinaryOp::add, x, one, DType::i32);
    const int prod = b.binary(BinaryOp::mul, b.binary(BinaryOp::sub, sum, y, DType::i32), y, DType::i32);
    const int bits = b.binary(BinaryOp::xor_, b.binary(BinaryOp::and_, prod, x, DType::i32),
                              b.binary(BinaryOp::or_, y, one, DType::i32), DType::i32);
    const int lo = b.binary(BinaryOp::min, b.binary(BinaryOp::max, bits, y, DType::i32), x, DType::i32);
    const int flipped = b.unary(UnaryOp::not_, b.unary(UnaryOp::neg, lo, DType::i32), DType::i32);
    const int lt = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::lt), DType::i32, DType::bool_, {x, y});
    const int pick = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, DType::i32, {lt, flipped, sum});
    const int as_int = b.instr(FusedInstr::Kind::convert, 0, DType::bool_, DType::i32, {lt});
    b.p.stores = {{pick, 0}, {as_int, 1}, {sum, 2}};
    b.p.num_inputs = 3;
    b.p.num_outputs = 3;
    b.p.finalize();
    FusedLoop p = compiled(b.p);
    ASSERT_EQ(p.compiled_runs.size(), 1u);
    EXPECT_EQ(p.compiled_runs[0], std::make_pair(0, int(p.instrs.size())));
    std::vector<int32_t> xv(static_cast<size_t>(n)), yv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      xv[size_t(i)] = i % 5 == 0 ? std::numeric_limits<int32_t>::max() : int32_t(i * 7919 - 3000);
      yv[size_t(i)] = i % 3 == 0 ? std::numeric_limits<int32_t>::min() : int32_t(40000 - i * 104729);
    }
    const int32_t cv = 1;
    const void* in[] = {xv.data(), yv.data(), &cv};
    EXPECT_TRUE(
        same_both_ways(p, in, {{size_t(n) * 4, DType::i32}, {size_t(n) * 4, DType::i32}, {size_t(n) * 4, DType::i32}}))
        << n;
    // The sum by hand: wrapped around at INT32_MAX.
    std::vector<int32_t> got(static_cast<size_t>(n)), m1(got), m2(got);
    void* out[] = {m1.data(), m2.data(), got.data()};
    run_fused(host_kernel_context(), p, in, out);
    EXPECT_EQ(got[0], std::numeric_limits<int32_t>::min());
    if (n > 1) EXPECT_EQ(got[1], xv[1] + 1);
  }
}

// op over xv and over op(xv) - xv, in f32 and in wide bf16, compiled
// against interpreted; the programs of all ops are built as one source.
void expect_unary_matches(std::vector<UnaryOp> ops, const std::vector<float>& xv) {
  const int64_t n = int64_t(xv.size());
  std::vector<std::shared_ptr<const FusedLoop>> programs;
  std::vector<DType> dtypes;
  for (UnaryOp op : ops) {
    for (DType t : {DType::f32, DType::bf16}) {
      Builder b;
      b.p.size = n;
      const int x = b.slot(FusedSlot::Kind::input, t, 0);
      const int e = b.unary(op, x, t);
      const int s = b.binary(BinaryOp::sub, e, x, t);  // a second op: wide bf16 registers
      b.p.stores = {{b.unary(op, s, t), 0}, {e, 1}};
      b.p.num_inputs = 1;
      b.p.num_outputs = 2;
      b.p.finalize();
      programs.push_back(std::make_shared<const FusedLoop>(b.p));
      dtypes.push_back(t);
    }
  }
  compile_fused_programs(programs);
  wait_for_compile_jobs();
  std::vector<uint16_t> xh(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) xh[i] = float_to_bf16(xv[i]);
  for (size_t k = 0; k < programs.size(); ++k) {
    const DType t = dtypes[k];
    const void* in[] = {t == DType::f32 ? static_cast<const void*>(xv.data()) : xh.data()};
    const size_t w = itemsize(t);
    EXPECT_TRUE(same_both_ways(*programs[k], in, {{size_t(n) * w, t}, {size_t(n) * w, t}}))
        << "op " << int(ops[k / 2]) << " " << dtype_name(t);
  }
}

TEST(FusedCodegen, ExpOverItsWholeRange) {
  SKIP_WITHOUT_CODEGEN();
  // -110 to 95 in steps that hit many exponents and the subnormal results,
  // then the special values.
  std::vector<float> xv;
  for (float v = -110.0f; v < 95.0f; v += 0.0137f) xv.push_back(v);
  for (float v : specials(40, 0)) xv.push_back(v);
  expect_unary_matches({UnaryOp::exp}, xv);
}

TEST(FusedCodegen, TanhOverItsWholeRange) {
  SKIP_WITHOUT_CODEGEN();
  // Both clamps and the saturation at 18.7, the step of Expm1 at 2|x| =
  // ln2 / 2, tiny arguments of both signs, then the special values.
  std::vector<float> xv;
  for (float v = -25.0f; v < 25.0f; v += 0.00731f) xv.push_back(v);
  for (float v = 0.17f; v < 0.18f; v += 1e-6f) xv.push_back(v);
  for (float v = 1e-30f; v < 1.0f; v *= 1.7f) {
    xv.push_back(v);
    xv.push_back(-v);
  }
  for (float v : specials(40, 0)) xv.push_back(v);
  expect_unary_matches({UnaryOp::tanh}, xv);
}

TEST(FusedCodegen, IntegerComparisonsSelectAndBoolInputs) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t n = 777;
  Builder b;
  b.p.size = n;
  const int ids = b.slot(FusedSlot::Kind::input, DType::i32, 0);
  const int label = b.slot(FusedSlot::Kind::splat, DType::i32, 1);
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 2);
  const int keep = b.slot(FusedSlot::Kind::input, DType::bool_, 3);
  const int one = b.slot(FusedSlot::Kind::splat, DType::f32, 4);
  const int hit = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::eq), DType::i32, DType::bool_, {ids, label});
  const int ge = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::ge), DType::i32, DType::bool_, {ids, label});
  const int shifted = b.binary(BinaryOp::sub, x, one);
  const int a = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, DType::f32, {hit, x, shifted});
  const int m = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, DType::f32, {keep, one, a});
  b.p.stores = {{b.binary(BinaryOp::mul, m, x), 0}, {ge, 1}};
  b.p.num_inputs = 5;
  b.p.num_outputs = 2;
  b.p.finalize();
  std::vector<int32_t> idv(static_cast<size_t>(n));
  std::vector<unsigned char> keepv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    idv[size_t(i)] = int32_t(i % 50) - 20;
    keepv[size_t(i)] = i % 3 == 0;
  }
  const int32_t lab = 7;
  const std::vector<float> xv = specials(size_t(n), 2);
  const float onev = 1.0f;
  const void* in[] = {idv.data(), &lab, xv.data(), keepv.data(), &onev};
  EXPECT_TRUE(same_both_ways(b.p, in, {{size_t(n) * 4, DType::f32}, {size_t(n), DType::bool_}}));
}

TEST(FusedCodegen, WideBf16RoundsEveryResult) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t n = 2085;
  Builder b;
  b.p.size = n;
  const DType h = DType::bf16;
  const int x = b.slot(FusedSlot::Kind::input, h, 0);
  const int y = b.slot(FusedSlot::Kind::input, h, 1);
  const int s = b.binary(BinaryOp::add, x, y, h);
  const int t = b.binary(BinaryOp::mul, s, x, h);
  const int mx = b.binary(BinaryOp::max, t, y, h);
  const int f = b.instr(FusedInstr::Kind::convert, 0, h, DType::f32, {mx});
  const int g = b.binary(BinaryOp::div, f, b.instr(FusedInstr::Kind::convert, 0, h, DType::f32, {y}));
  const int back = b.instr(FusedInstr::Kind::convert, 0, DType::f32, h, {g});
  const int sq = b.instr(FusedInstr::Kind::integer_pow, 0, h, h, {back}, 2);
  const int lt = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::lt), h, DType::bool_, {x, y});
  const int sel = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, h, {lt, sq, t});
  // sin is interpreted: with it the loop holds bf16 wide, without it not.
  const int lg = b.unary(UnaryOp::sin, x, h);
  b.p.stores = {{sel, 0}, {g, 1}, {lg, 2}};
  b.p.num_inputs = 2;
  b.p.num_outputs = 3;
  FusedLoop narrow = b.p;
  narrow.instrs.pop_back();
  narrow.stores.pop_back();
  narrow.num_outputs = 2;
  b.p.finalize();
  narrow.finalize();
  ASSERT_TRUE(b.p.wide_bf16);
  ASSERT_FALSE(narrow.wide_bf16);
  ASSERT_EQ(narrow.compiled_runs.size(), 1u);
  ASSERT_EQ(narrow.compiled_runs[0].second, int(narrow.instrs.size()));
  std::vector<uint16_t> xv(static_cast<size_t>(n)), yv(static_cast<size_t>(n));
  const std::vector<float> xf = specials(size_t(n), 1), yf = specials(size_t(n), 4);
  for (size_t i = 0; i < size_t(n); ++i) {
    xv[i] = float_to_bf16(xf[i] * 1.0078125f);
    yv[i] = float_to_bf16(yf[i]);
  }
  const void* in[] = {xv.data(), yv.data()};
  const std::vector<Output> outs = {{size_t(n) * 2, DType::bf16}, {size_t(n) * 4, DType::f32}};
  EXPECT_TRUE(same_both_ways(b.p, in, {outs[0], outs[1], {size_t(n) * 2, DType::bf16}}));
  EXPECT_TRUE(same_both_ways(narrow, in, outs));
  // The wide and the narrow loop give the same bits.
  std::vector<unsigned char> wide_out[3], narrow_out[2];
  std::vector<void*> wp, np;
  for (size_t k = 0; k < 3; ++k) wp.push_back((wide_out[k] = std::vector<unsigned char>(size_t(n) * 4)).data());
  for (size_t k = 0; k < 2; ++k) np.push_back((narrow_out[k] = std::vector<unsigned char>(size_t(n) * 4)).data());
  run_fused(host_kernel_context(), compiled(b.p), in, wp);
  run_fused(host_kernel_context(), compiled(narrow), in, np);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < size_t(n); ++i) {
      const size_t w = itemsize(outs[k].dtype);
      if (is_nan_at(wide_out[k].data(), outs[k].dtype, i) && is_nan_at(narrow_out[k].data(), outs[k].dtype, i))
        continue;
      ASSERT_EQ(std::memcmp(wide_out[k].data() + i * w, narrow_out[k].data() + i * w, w), 0)
          << "output " << k << " at " << i;
    }
  }
}

// A loop with one bf16 operation keeps bf16 narrow in its registers: the
// compiled code widens bf16 inputs and splats as it loads them, rounds the
// bf16 results, and narrows what it stores.
TEST(FusedCodegen, NarrowBf16LoadsAndStores) {
  SKIP_WITHOUT_CODEGEN();
  const DType h = DType::bf16;
  for (int64_t n : {1, 15, 17, 1000, 1031, 2085}) {
    Builder b;
    b.p.size = n;
    const int x = b.slot(FusedSlot::Kind::input, h, 0);
    const int y = b.slot(FusedSlot::Kind::input, DType::f32, 1);
    const int c = b.slot(FusedSlot::Kind::splat, h, 2);
    const int wx = b.instr(FusedInstr::Kind::convert, 0, h, DType::f32, {x});
    const int m = b.binary(BinaryOp::mul, wx, y);
    const int back = b.instr(FusedInstr::Kind::convert, 0, DType::f32, h, {m});
    const int sum = b.binary(BinaryOp::add, back, c, h);
    const int gt = b.instr(FusedInstr::Kind::compare, uint8_t(CompareOp::gt), h, DType::bool_, {sum, x});
    const int sel = b.instr(FusedInstr::Kind::select_n, 0, DType::bool_, h, {gt, x, sum});
    const int wc = b.instr(FusedInstr::Kind::convert, 0, h, DType::f32, {c});
    b.p.stores = {{sel, 0}, {back, 1}, {b.binary(BinaryOp::sub, m, wc), 2}};
    b.p.num_inputs = 3;
    b.p.num_outputs = 3;
    b.p.finalize();
    ASSERT_FALSE(b.p.wide_bf16);
    std::vector<uint16_t> xv(static_cast<size_t>(n));
    const std::vector<float> xf = specials(size_t(n), 2), yf = specials(size_t(n), 6);
    for (size_t i = 0; i < size_t(n); ++i) xv[i] = float_to_bf16(xf[i] * 1.0078125f);
    const uint16_t cv = float_to_bf16(-1.375f);
    const void* in[] = {xv.data(), yf.data(), &cv};
    EXPECT_TRUE(same_both_ways(b.p, in, {{size_t(n) * 2, h}, {size_t(n) * 2, h}, {size_t(n) * 4, DType::f32}})) << n;
  }
}

TEST(FusedCodegen, LongProgramsCompileWhole) {
  SKIP_WITHOUT_CODEGEN();
  // 40 values all live until a final sum: the C++ compiler spills what does
  // not fit the vector registers.
  const int64_t n = 300;
  Builder b;
  b.p.size = n;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  std::vector<int> vals;
  int v = x;
  for (int i = 0; i < 40; ++i) vals.push_back(v = b.binary(i % 2 ? BinaryOp::mul : BinaryOp::add, v, x));
  int sum = vals[0];
  for (size_t i = 1; i < vals.size(); ++i) sum = b.binary(BinaryOp::add, sum, vals[vals.size() - i]);
  b.p.stores = {{sum, 0}};
  b.p.num_inputs = b.p.num_outputs = 1;
  b.p.finalize();
  ASSERT_EQ(b.p.compiled_runs.size(), 1u);
  EXPECT_EQ(b.p.compiled_runs[0], std::make_pair(0, int(b.p.instrs.size())));
  const std::vector<float> xv = specials(size_t(n), 3);
  const void* in[] = {xv.data()};
  EXPECT_TRUE(same_both_ways(b.p, in, {{size_t(n) * 4, DType::f32}}));
}

// Every unary operation the dialect compiles, over a range that reaches its
// edges, in f32 and bf16.
TEST(FusedCodegen, EveryCompiledUnaryOperation) {
  SKIP_WITHOUT_CODEGEN();
  std::vector<float> xv;
  for (float v = -120.0f; v < 120.0f; v += 0.0731f) xv.push_back(v);
  for (float v = -1.5f; v < 1.5f; v += 0.0013f) xv.push_back(v);
  for (float v : specials(60, 0)) xv.push_back(v);
  // Every operation of elementwise_ops.def that generated loops compute
  // (its f32 column `map`).
  std::vector<UnaryOp> compiled;
#define PAX_COMPILED_map(id) compiled.push_back(UnaryOp::id);
#define PAX_COMPILED_own(id)
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) PAX_COMPILED_##f32(id)
#include "pax/ir/elementwise_ops.def"
#undef PAX_COMPILED_map
#undef PAX_COMPILED_own
  EXPECT_EQ(compiled.size(), size_t(kNumUnaryFloatOps) - 2);  // all but sin and cos
  expect_unary_matches(compiled, xv);
}

// An instruction the dialect leaves to the interpreter (sin) cuts the
// program into two compiled runs; values cross between them through memory.
TEST(FusedCodegen, InterpretedInstructionsSplitRuns) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t n = 1500;
  Builder b;
  b.p.size = n;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  const int a = b.binary(BinaryOp::mul, x, x);
  const int c = b.unary(UnaryOp::exp, b.binary(BinaryOp::sub, a, x));
  const int s = b.unary(UnaryOp::sin, c);
  const int d = b.binary(BinaryOp::add, b.binary(BinaryOp::mul, s, a), c);
  b.p.stores = {{d, 0}};
  b.p.num_inputs = b.p.num_outputs = 1;
  b.p.finalize();
  ASSERT_EQ(b.p.compiled_runs.size(), 2u);
  EXPECT_EQ(b.p.compiled_runs[0], std::make_pair(0, 3));
  EXPECT_EQ(b.p.compiled_runs[1], std::make_pair(4, 6));
  std::vector<float> xv = specials(size_t(n), 1);
  for (size_t i = 0; i < xv.size(); i += 3) xv[i] = float(i) * 0.01f - 5.0f;
  const void* in[] = {xv.data()};
  EXPECT_TRUE(same_both_ways(b.p, in, {{size_t(n) * 4, DType::f32}}));
}

TEST(FusedCodegen, ConversionsAndIsFinite) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t n = 1037;
  Builder b;
  b.p.size = n;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  const int k = b.slot(FusedSlot::Kind::input, DType::i32, 1);
  const int fin = b.instr(FusedInstr::Kind::is_finite, 0, DType::f32, DType::bool_, {x});
  const int nz = b.instr(FusedInstr::Kind::convert, 0, DType::f32, DType::bool_, {x});
  const int fin_f = b.instr(FusedInstr::Kind::convert, 0, DType::bool_, DType::f32, {fin});
  const int kf = b.instr(FusedInstr::Kind::convert, 0, DType::i32, DType::f32, {k});
  const int kh = b.instr(FusedInstr::Kind::convert, 0, DType::i32, DType::bf16, {k});
  const int nz_h = b.instr(FusedInstr::Kind::convert, 0, DType::bool_, DType::bf16, {nz});
  const int sum = b.binary(BinaryOp::add, b.binary(BinaryOp::mul, fin_f, kf), x);
  b.p.stores = {{sum, 0}, {nz, 1}, {kh, 2}, {nz_h, 3}, {fin, 4}};
  b.p.num_inputs = 2;
  b.p.num_outputs = 5;
  b.p.finalize();
  ASSERT_EQ(b.p.compiled_runs.size(), 1u);
  const std::vector<float> xv = specials(size_t(n), 4);
  std::vector<int32_t> kv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) kv[size_t(i)] = int32_t(i * 2654435761u);  // large values round in bf16
  const void* in[] = {xv.data(), kv.data()};
  EXPECT_TRUE(same_both_ways(b.p, in,
                             {{size_t(n) * 4, DType::f32},
                              {size_t(n), DType::bool_},
                              {size_t(n) * 2, DType::bf16},
                              {size_t(n) * 2, DType::bf16},
                              {size_t(n), DType::bool_}}));
}

// With PAX_COMPILE=async (the default) a build returns at once, loops run
// interpreted meanwhile, and the code is published when the compiler thread
// has loaded it; both give the same bits.
TEST(FusedCodegen, AsynchronousBuildsArePublishedLater) {
  SKIP_WITHOUT_CODEGEN();
  testing::ScopedEnv mode("PAX_COMPILE", "async");
  const int64_t n = 5000;
  Builder b;
  b.p.size = n;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  const int t = b.unary(UnaryOp::tanh, b.binary(BinaryOp::mul, x, x));
  b.p.stores = {{b.binary(BinaryOp::sub, t, x), 0}};
  b.p.num_inputs = b.p.num_outputs = 1;
  b.p.finalize();
  auto shared = std::make_shared<const FusedLoop>(b.p);
  const std::vector<float> xv = specials(size_t(n), 2);
  const void* in[] = {xv.data()};
  std::vector<float> before(static_cast<size_t>(n)), after(static_cast<size_t>(n));
  void* out_before[] = {before.data()};
  void* out_after[] = {after.data()};
  compile_fused_programs({shared});
  run_fused(host_kernel_context(), *shared, in, out_before);  // interpreted, or compiled if the cache was quick
  wait_for_compile_jobs();
  ASSERT_NE(shared->code.load(), nullptr);
  run_fused(host_kernel_context(), *shared, in, out_after);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(before[size_t(i)]) && std::isnan(after[size_t(i)])) continue;
    ASSERT_EQ(std::memcmp(&before[size_t(i)], &after[size_t(i)], 4), 0) << i;
  }
}

// Views that are constant or contiguous along runs of the domain are read in
// place, one segment at a time, by code that computes the whole loop: rows
// of 100 (not a multiple of a vector, and blocks that start inside a row),
// a per-row value under a transposed outer layout (the cursor steps through
// two dimensions), a view that stays gathered, and a row reduction.
TEST(FusedCodegen, ViewsReadPerSegment) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t batch = 3, rows = 37, len = 100, n = batch * rows * len;
  auto view = [](Builder& b, int arg, std::vector<int64_t> strides) {
    const int v = b.slot(FusedSlot::Kind::view, DType::f32, arg);
    b.p.slots[size_t(v)].dims = {batch, rows, len};
    b.p.slots[size_t(v)].strides = std::move(strides);
    return v;
  };
  for (bool reduce : {false, true}) {
    Builder b;
    b.p.size = n;
    const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
    const int per_row = view(b, 1, {rows, 1, 0});              // f32[3, 37] along rows
    const int per_col = view(b, 2, {0, len, 1});               // f32[37, 100] for every batch
    const int per_batch = view(b, 3, {1, 0, 0});               // f32[3]
    const int per_row_t = view(b, 4, {1, batch, 0});           // f32[37, 3] along rows
    const int gathered = view(b, 5, {rows, 1, batch * rows});  // f32[100, 3, 37] transposed
    int z = b.binary(BinaryOp::mul, b.binary(BinaryOp::sub, x, per_row), per_col);
    z = b.binary(BinaryOp::mul, b.binary(BinaryOp::add, z, per_batch), per_row_t);
    z = b.binary(BinaryOp::add, z, gathered);
    z = b.binary(BinaryOp::mul, z, z);  // not an accumulator chain
    b.p.num_inputs = 6;
    if (reduce) {
      FusedReduce r;
      r.slot = z;
      r.outer = batch * rows;
      r.n = len;
      r.output = 0;
      b.p.reduce = r;
    } else {
      b.p.stores = {{z, 0}, {per_batch, 1}};  // a stored view stays gathered
    }
    b.p.num_outputs = reduce ? 1 : 2;
    b.p.finalize();
    EXPECT_EQ(b.p.segment, len);
    EXPECT_EQ(b.p.slots[size_t(per_row)].segment, FusedSlot::Segment::splat);
    EXPECT_EQ(b.p.slots[size_t(per_col)].segment, FusedSlot::Segment::contiguous);
    EXPECT_EQ(b.p.slots[size_t(per_batch)].segment, reduce ? FusedSlot::Segment::splat : FusedSlot::Segment::none);
    EXPECT_EQ(b.p.slots[size_t(per_row_t)].segment, FusedSlot::Segment::splat);
    EXPECT_EQ(b.p.slots[size_t(gathered)].segment, FusedSlot::Segment::none);
    const std::vector<float> xv = specials(size_t(n), 1), rv = specials(size_t(batch * rows), 3),
                             cv = specials(size_t(rows * len), 4), bv = {0.5f, -2.0f, 3.0f},
                             tv = specials(size_t(batch * rows), 6), gv = specials(size_t(n), 8);
    const void* in[] = {xv.data(), rv.data(), cv.data(), bv.data(), tv.data(), gv.data()};
    std::vector<Output> outs = {{size_t(reduce ? batch * rows : n) * 4, DType::f32}};
    if (!reduce) outs.push_back({size_t(n) * 4, DType::f32});
    EXPECT_TRUE(same_both_ways(b.p, in, outs)) << "reduce " << reduce;
  }
}

// ---------------------------------------------------------------------------
// int32 division, remainder, shifts, powers and float -> int32 conversions,
// compiled, against the eager kernels (elementwise.h) bit for bit.

constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();

// Dividends and divisors / shift counts whose pairs cover every special case:
// zero divisors, INT32_MIN / -1, negative operands, counts below 0 and from 32.
const std::vector<int32_t> kDividends = {0,      1,          -1,       7,      -7, 100,         -100, kMin32,
                                         kMax32, kMin32 + 1, 12345678, -98765, 3,  -2147483000, 65536};
const std::vector<int32_t> kDivisors = {0, -1, 1, 2, -2, 3, -3, 31, 32, 33, 100, -100, kMin32, kMax32, 7, -32, 0, 16};

// Floats whose conversion to int32 takes every path: NaN, infinities, the
// int32 range's edges and just outside it, halves toward zero, -0.0.
std::vector<float> conversion_specials() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  return {nan,           -nan,           inf,     -inf,     2147483648.0f, -2147483648.0f, -2147483648.0f - 1e3f,
          2147483520.0f, -2147483520.0f, 4e9f,    -4e9f,    -0.5f,         0.5f,           -0.0f,
          0.0f,          1.5f,           -1.5f,   2.99f,    -2.99f,        1e10f,          -1e10f,
          123456.7f,     1e-40f,         -1e-40f, 65535.9f, 16777217.0f,   -7.0f};
}

// The eager result of a binary int32 kernel, as bytes.
std::vector<int32_t> eager_binary(BinaryOp op, const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> y(a.size());
  binary(op, DType::i32, a.data(), b.data(), y.data(), a.size());
  return y;
}

template <class T>
::testing::AssertionResult same_bytes(const std::vector<T>& got, const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << +got[i] << ", want " << +want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// One run computes every instruction; results are stored and compared with
// the kernels' for every (dividend, divisor) pair, in vectors and in the
// partial vector at the end.
TEST(FusedCodegen, Int32DivisionRemainderShiftsAndPowersAreCompiled) {
  SKIP_WITHOUT_CODEGEN();
  const int64_t exponents[] = {3, 0, 1, 31, -1, -2, -3, (int64_t(1) << 32) + 3};
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(kDividends.size() * kDivisors.size() + 5)}) {
    std::vector<int32_t> xv(static_cast<size_t>(n)), yv(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      xv[i] = kDividends[i % kDividends.size()];
      yv[i] = kDivisors[(i / kDividends.size()) % kDivisors.size()];
    }
    if (n == 1) xv[0] = kMin32, yv[0] = -1;
    Builder b;
    b.p.size = n;
    const int x = b.slot(FusedSlot::Kind::input, DType::i32, 0);
    const int y = b.slot(FusedSlot::Kind::input, DType::i32, 1);
    const BinaryOp ops[] = {BinaryOp::div, BinaryOp::rem, BinaryOp::shift_left, BinaryOp::shift_right_logical,
                            BinaryOp::shift_right_arithmetic};
    std::vector<int> results;
    for (BinaryOp op : ops) results.push_back(b.binary(op, x, y, DType::i32));
    for (int64_t e : exponents) {
      results.push_back(b.instr(FusedInstr::Kind::integer_pow, 0, DType::i32, DType::i32, {y}, e));
    }
    const int nz = b.instr(FusedInstr::Kind::convert, 0, DType::i32, DType::bool_, {results[0]});  // q != 0
    b.p.num_inputs = 2;
    for (size_t k = 0; k < results.size(); ++k) b.p.stores.push_back({results[k], int(k)});
    b.p.stores.push_back({nz, int(results.size())});
    b.p.num_outputs = int(b.p.stores.size());
    b.p.finalize();
    FusedLoop p = compiled(b.p);
    ASSERT_EQ(p.compiled_runs.size(), 1u);
    EXPECT_EQ(p.compiled_runs[0], std::make_pair(0, int(p.instrs.size())));
    ASSERT_NE(p.code.load(), nullptr);

    std::vector<std::vector<int32_t>> got(results.size(), std::vector<int32_t>(size_t(n)));
    std::vector<uint8_t> got_nz(static_cast<size_t>(n));
    std::vector<void*> out;
    for (auto& g : got) out.push_back(g.data());
    out.push_back(got_nz.data());
    const void* in[] = {xv.data(), yv.data()};
    run_fused(host_kernel_context(), p, in, out);
    for (size_t k = 0; k < std::size(ops); ++k) {
      EXPECT_TRUE(same_bytes(got[k], eager_binary(ops[k], xv, yv))) << binary_op_name(ops[k]) << " n " << n;
    }
    for (size_t k = 0; k < std::size(exponents); ++k) {
      std::vector<int32_t> want(static_cast<size_t>(n));
      integer_pow(DType::i32, exponents[k], yv.data(), want.data(), size_t(n));
      EXPECT_TRUE(same_bytes(got[std::size(ops) + k], want)) << "integer_pow " << exponents[k] << " n " << n;
    }
    std::vector<uint8_t> want_nz(static_cast<size_t>(n));
    convert(DType::i32, got[0].data(), DType::bool_, want_nz.data(), size_t(n));
    EXPECT_TRUE(same_bytes(got_nz, want_nz)) << "n " << n;
    // By hand, against the semantics the kernels document.
    if (n == 1) {
      EXPECT_EQ(got[0][0], kMin32);  // INT32_MIN / -1
      EXPECT_EQ(got[1][0], 0);       // INT32_MIN % -1
    }
  }
}

// f32 and bf16 -> int32 conversions (truncated, saturated, NaN -> 0) and
// int32 -> bool, in one compiled run, against the convert kernel; then in a
// wide bf16 loop split by an interpreted sin, whose conversion reads a
// widened register.
TEST(FusedCodegen, FloatToInt32ConversionsAreCompiled) {
  SKIP_WITHOUT_CODEGEN();
  const std::vector<float> base = conversion_specials();
  for (int64_t n : {int64_t(1), int64_t(base.size()), int64_t(3 * base.size() + 7)}) {
    std::vector<float> fv(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) fv[i] = base[i % base.size()];
    std::vector<uint16_t> hv(fv.size());
    for (size_t i = 0; i < fv.size(); ++i) hv[i] = float_to_bf16(fv[i]);
    Builder b;
    b.p.size = n;
    const int f = b.slot(FusedSlot::Kind::input, DType::f32, 0);
    const int h = b.slot(FusedSlot::Kind::input, DType::bf16, 1);
    const int fi = b.instr(FusedInstr::Kind::convert, 0, DType::f32, DType::i32, {f});
    const int hi = b.instr(FusedInstr::Kind::convert, 0, DType::bf16, DType::i32, {h});
    const int nz = b.instr(FusedInstr::Kind::convert, 0, DType::i32, DType::bool_, {fi});
    const int sum = b.binary(BinaryOp::add, fi, hi, DType::i32);
    b.p.stores = {{fi, 0}, {hi, 1}, {nz, 2}, {sum, 3}};
    b.p.num_inputs = 2;
    b.p.num_outputs = 4;
    b.p.finalize();
    FusedLoop p = compiled(b.p);
    ASSERT_EQ(p.compiled_runs.size(), 1u);
    EXPECT_EQ(p.compiled_runs[0], std::make_pair(0, int(p.instrs.size())));
    ASSERT_NE(p.code.load(), nullptr);
    std::vector<int32_t> got_f(static_cast<size_t>(n)), got_h(got_f), got_sum(got_f), want_f(got_f), want_h(got_f);
    std::vector<uint8_t> got_nz(static_cast<size_t>(n)), want_nz(got_nz);
    const void* in[] = {fv.data(), hv.data()};
    void* out[] = {got_f.data(), got_h.data(), got_nz.data(), got_sum.data()};
    run_fused(host_kernel_context(), p, in, out);
    convert(DType::f32, fv.data(), DType::i32, want_f.data(), size_t(n));
    convert(DType::bf16, hv.data(), DType::i32, want_h.data(), size_t(n));
    convert(DType::i32, want_f.data(), DType::bool_, want_nz.data(), size_t(n));
    EXPECT_TRUE(same_bytes(got_f, want_f)) << n;
    EXPECT_TRUE(same_bytes(got_h, want_h)) << n;
    EXPECT_TRUE(same_bytes(got_nz, want_nz)) << n;
    EXPECT_TRUE(same_bytes(got_sum, eager_binary(BinaryOp::add, want_f, want_h))) << n;
    if (n == int64_t(base.size())) {  // by hand: NaN, +inf, -inf, 2^31, -2^31, below -2^31, ..., -0.5, 0.5
      const std::vector<int32_t> head = {0,          0,           kMax32, kMin32, kMax32, kMin32, kMin32,
                                         2147483520, -2147483520, kMax32, kMin32, 0,      0,      0};
      for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(got_f[i], head[i]) << "element " << i;
    }
  }
  // Wide bf16: two bf16 operations and an interpreted one between the runs.
  const int64_t n = int64_t(3 * base.size() + 7);
  std::vector<uint16_t> hv(static_cast<size_t>(n));
  for (size_t i = 0; i < hv.size(); ++i) hv[i] = float_to_bf16(base[i % base.size()] * 0.75f);
  Builder b;
  b.p.size = n;
  const int h = b.slot(FusedSlot::Kind::input, DType::bf16, 0);
  const int sq = b.binary(BinaryOp::mul, h, h, DType::bf16);
  const int s = b.unary(UnaryOp::sin, b.binary(BinaryOp::add, sq, h, DType::bf16), DType::bf16);
  const int si =
      b.instr(FusedInstr::Kind::convert, 0, DType::bf16, DType::i32, {b.binary(BinaryOp::mul, s, h, DType::bf16)});
  const int hi = b.instr(FusedInstr::Kind::convert, 0, DType::bf16, DType::i32, {h});
  b.p.stores = {{b.binary(BinaryOp::sub, si, hi, DType::i32), 0}};
  b.p.num_inputs = b.p.num_outputs = 1;
  b.p.finalize();
  EXPECT_TRUE(b.p.wide_bf16);
  ASSERT_EQ(b.p.compiled_runs.size(), 2u);
  EXPECT_EQ(b.p.compiled_runs[1], std::make_pair(3, int(b.p.instrs.size())));
  const void* in[] = {hv.data()};
  EXPECT_TRUE(same_both_ways(b.p, in, {{size_t(n) * 4, DType::i32}}));
}

}  // namespace
}  // namespace pax::cpu

// The fused loop executor on hand-built programs: a chain against a reference
// loop, broadcast views, in-place output, stores written in place by their
// instructions, register reuse, and the checks of
// finalize() / run_fused().
#include "pax/backend/cpu/fused_loop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "pax/backend/cpu/fused_codegen.h"
#include "pax/testing/testing.h"

namespace pax::cpu {
namespace {

FusedSlot slot(FusedSlot::Kind kind, int arg = -1, DType dtype = DType::f32) {
  FusedSlot s;
  s.kind = kind;
  s.arg = arg;
  s.dtype = dtype;
  return s;
}

int add_binary(FusedLoop& p, BinaryOp op, int a, int b) {
  p.slots.push_back(slot(FusedSlot::Kind::reg));
  FusedInstr ins;
  ins.kind = FusedInstr::Kind::binary;
  ins.op = uint8_t(op);
  ins.args = {a, b};
  ins.result = int(p.slots.size()) - 1;
  p.instrs.push_back(ins);
  return ins.result;
}

// y = ((x * c) + row) - x over a (rows, cols) domain; row is broadcast over rows.
FusedLoop chain(int64_t rows, int64_t cols) {
  FusedLoop p;
  p.size = rows * cols;
  p.slots.push_back(slot(FusedSlot::Kind::input, 0));  // x
  p.slots.push_back(slot(FusedSlot::Kind::splat, 1));  // c
  FusedSlot row = slot(FusedSlot::Kind::view, 2);
  row.dims = {rows, cols};
  row.strides = {0, 1};
  p.slots.push_back(row);
  int t = add_binary(p, BinaryOp::mul, 0, 1);
  t = add_binary(p, BinaryOp::add, t, 2);
  t = add_binary(p, BinaryOp::sub, t, 0);
  p.stores.push_back({t, 0});
  p.num_inputs = 3;
  p.num_outputs = 1;
  p.finalize();
  return p;
}

TEST(FusedLoop, ChainWithBroadcastMatchesReference) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 700}, {257, 1031}, {4096, 1024}}) {
    FusedLoop p = chain(rows, cols);
    std::vector<float> x(static_cast<size_t>(rows * cols)), r(static_cast<size_t>(cols)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.25f - 3.0f;
    for (size_t j = 0; j < r.size(); ++j) r[j] = float(j % 13) - 6.0f;
    const float c = 1.75f;
    const void* in[] = {x.data(), &c, r.data()};
    void* out[] = {y.data()};
    run_fused(host_kernel_context(), p, in, out);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float want = (x[size_t(i)] * c + r[size_t(i % cols)]) - x[size_t(i)];
      ASSERT_EQ(y[size_t(i)], want) << "element " << i << " of " << rows << "x" << cols;
    }
  }
}

TEST(FusedLoop, OutputMayOverwriteItsContiguousInput) {
  FusedLoop p = chain(33, 1000);
  std::vector<float> x(33 * 1000), r(1000, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 1e-3f;
  const std::vector<float> x0 = x;
  const float c = 3.0f;
  const void* in[] = {x.data(), &c, r.data()};
  void* out[] = {x.data()};
  run_fused(host_kernel_context(), p, in, out);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], (x0[i] * c + 0.5f) - x0[i]) << i;
}

// a = x * x and b = a + x are both stored, then their sum over rows of
// `cols` (reduce: the row reduction ends the loop).
FusedLoop two_stores(int64_t rows, int64_t cols, bool reduce) {
  FusedLoop p;
  p.size = rows * cols;
  p.slots.push_back(slot(FusedSlot::Kind::input, 0));
  const int a = add_binary(p, BinaryOp::mul, 0, 0);
  const int b = add_binary(p, BinaryOp::add, a, 0);
  p.stores = {{a, 0}, {b, 1}};
  if (reduce) p.reduce = FusedReduce{ReduceOp::sum, add_binary(p, BinaryOp::add, a, b), rows, cols, 1, DType::f32, 2};
  p.num_inputs = 1;
  p.num_outputs = reduce ? 3 : 2;
  p.finalize();
  return p;
}

TEST(FusedLoop, StoresAreWrittenInPlaceUnlessAnInputSharesTheirMemory) {
  // Interpreted as well as compiled: compiled code happens to keep x in a
  // vector register for b, the interpreter reads x's block again after a.
  for (auto [reduce, compiled] : {std::pair{false, true}, {true, true}, {false, false}, {true, false}}) {
    // Rows of 300: row-reduction tasks start inside blocks, whose stores are
    // then copied by their owner.
    const int64_t rows = 97, cols = 300, n = rows * cols;
    auto program = std::make_shared<const FusedLoop>(two_stores(rows, cols, reduce));
    if (compiled) {
      compile_fused_programs({program});
      wait_for_compile_jobs();
    }
    const FusedLoop& p = *program;
    EXPECT_EQ(p.stores[0].write, FusedStore::Write::apart);  // not the last instruction's result
    std::vector<float> x(static_cast<size_t>(n)), a(x.size()), b(x.size()), sums(static_cast<size_t>(rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 89) * 0.125f - 5.0f;
    const std::vector<float> x0 = x;
    auto check = [&](const std::vector<float>& got_a, const char* what) {
      for (size_t i = 0; i < x.size(); ++i) {
        const float sq = x0[i] * x0[i];
        ASSERT_EQ(got_a[i], sq) << what << " a at " << i;
        ASSERT_EQ(b[i], sq + x0[i]) << what << " b at " << i;
      }
      for (int64_t r = 0; r < rows && reduce; ++r) {
        float want = 0;
        for (int64_t c = 0; c < cols; ++c)
          want += 2 * x0[size_t(r * cols + c)] * x0[size_t(r * cols + c)] + x0[size_t(r * cols + c)];
        ASSERT_NEAR(sums[size_t(r)], want, 1e-4 * std::abs(want) + 1e-3) << what << " row " << r;
      }
    };
    const void* in[] = {x.data()};
    void* out[] = {a.data(), b.data(), sums.data()};
    run_fused(host_kernel_context(), p, in, std::span<void* const>(out, size_t(p.num_outputs)));
    check(a, "apart");
    // a overwrites x: b still reads the x of before.
    void* shared[] = {x.data(), b.data(), sums.data()};
    run_fused(host_kernel_context(), p, in, std::span<void* const>(shared, size_t(p.num_outputs)));
    check(x, "in place");
  }
}

TEST(FusedLoop, RegistersAreReused) {
  FusedLoop p;
  p.size = 10;
  p.slots.push_back(slot(FusedSlot::Kind::input, 0));
  int t = 0;
  for (int i = 0; i < 20; ++i) t = add_binary(p, BinaryOp::add, t, 0);
  p.stores.push_back({t, 0});
  p.num_inputs = 1;
  p.num_outputs = 1;
  p.finalize();
  EXPECT_EQ(p.num_regs, 2);  // each result lives until the next instruction
  std::vector<float> x(10, 1.0f), y(10);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  run_fused(host_kernel_context(), p, in, out);
  for (float v : y) EXPECT_EQ(v, 21.0f);
}

TEST(FusedLoop, RejectsMalformedPrograms) {
  FusedLoop empty;
  EXPECT_PAX_ERROR(empty.finalize(), "fused loop: no domain or no instruction");
  FusedLoop bad = chain(2, 3);
  bad.instrs[0].result = 0;  // an input slot
  EXPECT_PAX_ERROR(bad.finalize(), "writes a slot that is not a register");
  FusedLoop reduce = chain(2, 3);
  reduce.reduce = FusedReduce{ReduceOp::sum, 0, 1, 6, 1, DType::f32, 1};
  EXPECT_PAX_ERROR(reduce.finalize(), "the reduced value must be an instruction result");
  FusedLoop p = chain(2, 3);
  std::vector<float> x(6), y(6);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  EXPECT_PAX_ERROR(run_fused(host_kernel_context(), p, in, out), "takes 3 inputs and 1 outputs, got 1 and 1");
}

TEST(FusedLoop, FusableReductions) {
  EXPECT_TRUE(fusable_reduction(ReduceOp::sum, DType::f32, 4, 100, 1));
  EXPECT_TRUE(fusable_reduction(ReduceOp::max, DType::bool_, 1, 100, 8));
  EXPECT_FALSE(fusable_reduction(ReduceOp::sum, DType::bool_, 4, 100, 1));
  EXPECT_FALSE(fusable_reduction(ReduceOp::prod, DType::f32, 4, 100, 1));
  EXPECT_FALSE(fusable_reduction(ReduceOp::sum, DType::f32, 4, 100, 8));  // middle axes
  EXPECT_FALSE(fusable_reduction(ReduceOp::sum, DType::f32, 4, 1, 1));
  EXPECT_FALSE(fusable_reduction(ReduceOp::sum, DType::f32, 1, 100, 1 << 20));  // partial rows too large
}

}  // namespace
}  // namespace pax::cpu

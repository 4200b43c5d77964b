// The loop renderer's walk with a scalar C-like dialect, as a GPU language's
// table would be: which instructions it renders follows from which templates
// the table fills (float -> int32 and int32 -> bool conversions, int32
// division, remainder, shifts and integer_pow among them), and a run's body
// loads operands once, fills the templates and stores what is read after it.
#include "pax/compile/loop_render.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pax {
namespace {

LoopDialect c_dialect() {
  LoopDialect d{};
  d.binary[size_t(BinaryOp::add)] = "({0} + {1})";
  d.float_to_int = "f2i({0})";
  d.int_to_mask = "({0} != 0)";
  d.binary_int[size_t(BinaryOp::div)] = "div_i32({0}, {1})";
  d.binary_int[size_t(BinaryOp::rem)] = "rem_i32({0}, {1})";
  d.binary_int[size_t(BinaryOp::shift_left)] = "shl_i32({0}, {1})";
  d.integer_pow_int = "ipow_i32({0}, {1})";
  d.let_float = "float {0} = {1};";
  d.let_int = "int {0} = {1};";
  d.let_mask = "bool {0} = {1};";
  for (SlotFormat f : {SlotFormat::f32, SlotFormat::i32, SlotFormat::boolean}) {
    d.load[size_t(f)] = "p{0}[i]";
    d.splat[size_t(f)] = "p{0}[0]";
    d.store[size_t(f)] = "p{1}[i] = {0};";
  }
  return d;
}

struct Program {
  LoopProgram p;
  std::vector<SlotFormat> formats;
  int slot(FusedSlot::Kind kind, DType dtype, int arg = -1) {
    FusedSlot s;
    s.kind = kind;
    s.dtype = dtype;
    s.arg = arg;
    p.slots.push_back(s);
    formats.push_back(dtype == DType::f32   ? SlotFormat::f32
                      : dtype == DType::i32 ? SlotFormat::i32
                                            : SlotFormat::boolean);
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
};

TEST(LoopRender, IntegerTemplatesOfAScalarDialect) {
  Program b;
  const int x = b.slot(FusedSlot::Kind::input, DType::f32, 0);
  const int k = b.slot(FusedSlot::Kind::input, DType::i32, 1);
  const int xi = b.instr(FusedInstr::Kind::convert, 0, DType::f32, DType::i32, {x});
  const int q = b.instr(FusedInstr::Kind::binary, uint8_t(BinaryOp::div), DType::i32, DType::i32, {xi, k});
  const int r = b.instr(FusedInstr::Kind::binary, uint8_t(BinaryOp::rem), DType::i32, DType::i32, {q, k});
  const int s = b.instr(FusedInstr::Kind::binary, uint8_t(BinaryOp::shift_left), DType::i32, DType::i32, {r, k});
  const int p = b.instr(FusedInstr::Kind::integer_pow, 0, DType::i32, DType::i32, {s}, -3);
  const int nz = b.instr(FusedInstr::Kind::convert, 0, DType::i32, DType::bool_, {p});
  b.p.stores = {{nz, 0}, {q, 1}};
  const LoopDialect d = c_dialect();
  for (const FusedInstr& ins : b.p.instrs) EXPECT_TRUE(renderable(b.p, ins, b.formats, d));
  const RenderedRun run = render_run(b.p, 0, int(b.p.instrs.size()), b.formats, d);
  const std::vector<std::string> want = {"float v0 = p0[i];",
                                         "int v2 = f2i(v0);",
                                         "int v1 = p1[i];",
                                         "int v3 = div_i32(v2, v1);",
                                         "p3[i] = v3;",
                                         "int v4 = rem_i32(v3, v1);",
                                         "int v5 = shl_i32(v4, v1);",
                                         "int v6 = ipow_i32(v5, -3);",
                                         "bool v7 = (v6 != 0);",
                                         "p7[i] = v7;"};
  EXPECT_EQ(run.body, want);
  EXPECT_EQ(run.stored, (std::vector<int>{q, nz}));

  // An operation whose template the table leaves empty stays interpreted.
  LoopDialect partial = d;
  partial.float_to_int = {};
  partial.int_to_mask = {};
  partial.integer_pow_int = {};
  partial.binary_int[size_t(BinaryOp::div)] = {};
  EXPECT_FALSE(renderable(b.p, b.p.instrs[0], b.formats, partial));  // f32 -> i32
  EXPECT_FALSE(renderable(b.p, b.p.instrs[1], b.formats, partial));  // div
  EXPECT_TRUE(renderable(b.p, b.p.instrs[2], b.formats, partial));   // rem
  EXPECT_FALSE(renderable(b.p, b.p.instrs[4], b.formats, partial));  // integer_pow
  EXPECT_FALSE(renderable(b.p, b.p.instrs[5], b.formats, partial));  // i32 -> bool
  // Shifts right are not in this table.
  b.instr(FusedInstr::Kind::binary, uint8_t(BinaryOp::shift_right_arithmetic), DType::i32, DType::i32, {s, k});
  EXPECT_FALSE(renderable(b.p, b.p.instrs.back(), b.formats, d));
}

}  // namespace
}  // namespace pax

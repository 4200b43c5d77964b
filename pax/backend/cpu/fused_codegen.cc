// The Highway C++ dialect of the loop renderer, the translation unit of an
// executable's fused loops, and publishing its compiled runs (see
// fused_codegen.h).
#include "pax/backend/cpu/fused_codegen.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>

#include <hwy/targets.h>

#include "pax/backend/cpu/isa.h"
#include "pax/compile/loop_render.h"
#include "pax/core/error.h"

namespace pax::cpu {

extern const char kFusedCodegenHeaders[];  // elementwise_ops-inl.h and fused_codegen_prelude-inl.h (embedded)

namespace {

constexpr int kMinRun = 2;  // a lone instruction gains nothing from compiling

// The table from operation to Highway expression: the functors the kernels
// apply (elementwise_ops-inl.h), on f32 vectors `d`.
const LoopDialect& hwy_dialect() {
  static const LoopDialect dialect = [] {
    LoopDialect d{};
    // Every operation of elementwise_ops.def whose kernel maps its functor
    // (sin / cos check the range of a whole window first: interpreted).
#define PAX_DIALECT_map(id, functor) d.unary[size_t(UnaryOp::id)] = #functor "()(d, {0})";
#define PAX_DIALECT_own(id, functor)
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) PAX_DIALECT_##f32(id, functor)
#define PAX_BINARY_FLOAT_OP(id, functor) d.binary[size_t(BinaryOp::id)] = #functor "()(d, {0}, {1})";
#include "pax/ir/elementwise_ops.def"
#undef PAX_DIALECT_map
#undef PAX_DIALECT_own
    // As C++ compares: unordered operands are unequal and nothing else.
    d.compare_float = {"hn::Eq({0}, {1})", "hn::Not(hn::Eq({0}, {1}))", "hn::Lt({0}, {1})",
                       "hn::Le({0}, {1})", "hn::Gt({0}, {1})",          "hn::Ge({0}, {1})"};
    d.compare_int = {"hn::RebindMask(d, hn::Eq({0}, {1}))", "hn::RebindMask(d, hn::Not(hn::Eq({0}, {1})))",
                     "hn::RebindMask(d, hn::Lt({0}, {1}))", "hn::RebindMask(d, hn::Not(hn::Gt({0}, {1})))",
                     "hn::RebindMask(d, hn::Gt({0}, {1}))", "hn::RebindMask(d, hn::Not(hn::Lt({0}, {1})))"};
    d.round_bf16 = "RoundBf16(d, {0})";
    d.is_finite = "hn::IsFinite({0})";
    d.integer_pow = "IntegerPowVec(d, {0}, int64_t({1}))";
    d.select = "hn::IfThenElse({0}, {2}, {1})";
    d.mask_to_float = "hn::IfThenElseZero({0}, hn::Set(d, 1.0f))";
    d.float_to_mask = "hn::Not(hn::Eq({0}, hn::Zero(d)))";
    d.int_to_float = "hn::ConvertTo(d, {0})";
    // int32 arithmetic wraps around, as the kernels' does; division,
    // remainder and shifts follow the kernels' (XLA's) rules for zero
    // divisors, INT32_MIN / -1 and counts outside [0, 32) (the prelude's
    // helpers). pow of two int32 operands stays with the interpreter.
    d.unary_int[size_t(UnaryOp::neg)] = "hn::Neg({0})";
    d.unary_int[size_t(UnaryOp::not_)] = "hn::Not({0})";
    d.binary_int[size_t(BinaryOp::add)] = "hn::Add({0}, {1})";
    d.binary_int[size_t(BinaryOp::sub)] = "hn::Sub({0}, {1})";
    d.binary_int[size_t(BinaryOp::mul)] = "hn::Mul({0}, {1})";
    d.binary_int[size_t(BinaryOp::max)] = "hn::Max({0}, {1})";
    d.binary_int[size_t(BinaryOp::min)] = "hn::Min({0}, {1})";
    d.binary_int[size_t(BinaryOp::and_)] = "hn::And({0}, {1})";
    d.binary_int[size_t(BinaryOp::or_)] = "hn::Or({0}, {1})";
    d.binary_int[size_t(BinaryOp::xor_)] = "hn::Xor({0}, {1})";
    d.binary_int[size_t(BinaryOp::div)] = "DivI32(d, {0}, {1})";
    d.binary_int[size_t(BinaryOp::rem)] = "RemI32(d, {0}, {1})";
    d.binary_int[size_t(BinaryOp::shift_left)] = "ShiftLeftI32(d, {0}, {1})";
    d.binary_int[size_t(BinaryOp::shift_right_logical)] = "ShiftRightLogicalI32(d, {0}, {1})";
    d.binary_int[size_t(BinaryOp::shift_right_arithmetic)] = "ShiftRightArithmeticI32(d, {0}, {1})";
    d.integer_pow_int = "IntegerPowI32(d, {0}, int64_t({1}))";
    d.float_to_int = "F32ToI32(d, {0})";
    d.int_to_mask = "I32ToMask(d, {0})";
    d.select_int = "SelectI32(d, {0}, {1}, {2})";
    d.mask_to_int = "MaskToI32(d, {0})";
    d.let_float = d.let_int = d.let_mask = "const auto {0} = {1};";
    auto mem = [&](SlotFormat f, std::string_view load, std::string_view splat, std::string_view store) {
      d.load[size_t(f)] = load;
      d.splat[size_t(f)] = splat;
      d.store[size_t(f)] = store;
    };
    mem(SlotFormat::f32, "LoadF32(d, p[{0}], i)", "SplatF32(d, s[{0}])", "StoreF32(d, {0}, p[{1}], i);");
    mem(SlotFormat::bf16, "LoadBf16(d, p[{0}], i)", "SplatBf16(d, s[{0}])", "StoreBf16(d, {0}, p[{1}], i);");
    mem(SlotFormat::i32, "LoadI32(d, p[{0}], i)", "SplatI32(d, s[{0}])", "StoreI32(d, {0}, p[{1}], i);");
    mem(SlotFormat::boolean, "LoadBool(d, p[{0}], i)", "SplatBool(d, s[{0}])", "StoreBool(d, {0}, p[{1}], i);");
    return d;
  }();
  return dialect;
}

SlotFormat format_of(DType dtype, size_t reg_width) {
  switch (dtype) {
    case DType::f32: return SlotFormat::f32;
    case DType::bf16: return reg_width == sizeof(float) ? SlotFormat::f32 : SlotFormat::bf16;
    case DType::i32: return SlotFormat::i32;
    case DType::bool_: return SlotFormat::boolean;
    default: return SlotFormat::none;
  }
}

// Each slot's memory format in the registers and inputs the runs see.
std::vector<SlotFormat> formats(const FusedLoop& p, bool narrow) {
  std::vector<SlotFormat> f;
  for (const FusedSlot& s : p.slots) f.push_back(format_of(s.dtype, narrow ? itemsize(s.dtype) : p.reg_width(s)));
  return f;
}

size_t format_width(SlotFormat f) {
  switch (f) {
    case SlotFormat::f32:
    case SlotFormat::i32: return 4;
    case SlotFormat::bf16: return 2;
    case SlotFormat::boolean: return 1;
    case SlotFormat::none: break;
  }
  return 0;
}

bool codegen_enabled() {
  static const bool enabled = native_compiler_available();
  return enabled;
}

void render_program(std::string& out, const FusedLoop& p, size_t k) {
  const std::vector<SlotFormat> f = formats(p, false);
  for (size_t r = 0; r < p.compiled_runs.size(); ++r) {
    const auto [begin, end] = p.compiled_runs[r];
    const RenderedRun run = render_run(p, begin, end, f, hwy_dialect());
    out += fmt::format("\n// loop {}, instructions [{}, {})\nstatic void run_{}_{}(void* const* s, int64_t m) {{\n", k,
                       begin, end, k, r);
    out += "  const hn::ScalableTag<float> d;\n";
    for (const std::string& line : run.splats) out += "  " + line + "\n";
    out += "  const auto body = [&](void* const* p, size_t i) __attribute__((always_inline)) {\n";
    for (const std::string& line : run.body) out += "    " + line + "\n";
    out += "  };\n";
    // The partial vector: the slots the body touches staged in local buffers.
    const size_t staged = run.loaded.size() + run.stored.size();
    out += "  const auto tail = [&](size_t i, size_t r) {\n";
    out += fmt::format("    HWY_ALIGN uint8_t stage[{}][HWY_MAX_BYTES] = {{}};\n", std::max<size_t>(staged, 1));
    out += fmt::format("    void* t[{}] = {{}};\n", p.slots.size());
    size_t b = 0;
    for (int slot : run.loaded) {
      out += fmt::format("    t[{0}] = stage[{1}];\n    StageIn(stage[{1}], s[{0}], i, r, {2});\n", slot, b++,
                         format_width(f[size_t(slot)]));
    }
    const size_t first_stored = b;
    for (int slot : run.stored) out += fmt::format("    t[{}] = stage[{}];\n", slot, b++);
    out += "    body(t, 0);\n";
    b = first_stored;
    for (int slot : run.stored) {
      out += fmt::format("    StageOut(s[{}], stage[{}], i, r, {});\n", slot, b++, format_width(f[size_t(slot)]));
    }
    out += "  };\n  ForEachVector(d, s, m, body, tail);\n}\n";
  }
}

}  // namespace

bool codegen_compiles_every_instruction(const FusedLoop& p) {
  if (int(p.instrs.size()) < kMinRun || !codegen_enabled()) return false;
  const std::vector<SlotFormat> f = formats(p, true);
  for (const FusedInstr& ins : p.instrs) {
    if (!renderable(p, ins, f, hwy_dialect())) return false;
  }
  return true;
}

std::vector<std::pair<int, int>> codegen_runs(const FusedLoop& p) {
  std::vector<std::pair<int, int>> runs;
  if (!codegen_enabled()) return runs;
  const std::vector<SlotFormat> f = formats(p, false);
  const int n = int(p.instrs.size());
  for (int i = 0; i < n;) {
    int end = i;
    while (end < n && renderable(p, p.instrs[size_t(end)], f, hwy_dialect())) ++end;
    if (end - i >= kMinRun) runs.emplace_back(i, end);
    i = std::max(end, i + 1);
  }
  return runs;
}

std::string render_fused_source(std::span<const FusedLoop* const> programs) {
  std::string out = "// paxcc fused loops, generated (pax/backend/cpu/fused_codegen.h)\n";
  out += kFusedCodegenHeaders;
  out += "\nHWY_BEFORE_NAMESPACE();\nnamespace pax::cpu {\nnamespace HWY_NAMESPACE {\n";
  for (size_t k = 0; k < programs.size(); ++k) render_program(out, *programs[k], k);
  out += "\n}  // namespace HWY_NAMESPACE\n}  // namespace pax::cpu\nHWY_AFTER_NAMESPACE();\n\nextern \"C\" {\n";
  out += "long long pax_codegen_target() { return HWY_STATIC_TARGET; }\n";
  for (size_t k = 0; k < programs.size(); ++k) {
    for (size_t r = 0; r < programs[k]->compiled_runs.size(); ++r) {
      out += fmt::format(
          "void pax_run_{0}_{1}(void* const* s, int64_t m) {{ pax::cpu::HWY_NAMESPACE::run_{0}_{1}(s, m); }}\n", k, r);
    }
  }
  out += "}  // extern \"C\"\n";
  return out;
}

void compile_fused_programs(std::vector<std::shared_ptr<const FusedLoop>> programs) {
  std::erase_if(programs, [](const std::shared_ptr<const FusedLoop>& p) {
    return !p || p->compiled_runs.empty() || p->code.load(std::memory_order_acquire) != nullptr;
  });
  if (programs.empty() || !codegen_enabled()) return;
  run_compile_job([programs = std::move(programs)] {
    std::vector<const FusedLoop*> raw;
    for (const auto& p : programs) raw.push_back(p.get());
    std::vector<std::string> flags = codegen_isa_flags();
#ifdef PAX_HWY_INCLUDE_DIR
    flags.push_back("-I" PAX_HWY_INCLUDE_DIR);
#endif
    std::shared_ptr<NativeLibrary> lib = build_native(render_fused_source(raw), flags);
    if (!lib) return;
    auto target = reinterpret_cast<long long (*)()>(lib->symbol("pax_codegen_target"));
    static std::atomic<bool> told{false};
    if (!target || target() != hwy_target()) {
      if (told.exchange(true)) return;
      std::fprintf(stderr,
                   "paxcc: generated code was built for Highway target %s, the kernels run %s: fused loops "
                   "run interpreted\n",
                   target ? hwy::TargetName(target()) : "?", hwy_target_name().c_str());
      return;
    }
    for (size_t k = 0; k < programs.size(); ++k) {
      const FusedLoop& p = *programs[k];
      auto code = std::make_shared<FusedCode>();
      code->library = lib;
      for (size_t r = 0; r < p.compiled_runs.size(); ++r) {
        auto fn = reinterpret_cast<FusedRunFn>(lib->symbol(fmt::format("pax_run_{}_{}", k, r)));
        PAX_CHECK(fn, "fused loops: the built library lacks pax_run_", k, "_", r);
        code->runs.push_back(fn);
      }
      if (p.code.load(std::memory_order_acquire)) continue;
      p.code_owner = code;
      p.code.store(code.get(), std::memory_order_release);
    }
  });
}

}  // namespace pax::cpu

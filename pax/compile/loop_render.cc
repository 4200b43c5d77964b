// The walk over a run of fused-loop instructions that fills a dialect's
// templates (see loop_render.h).
#include "pax/compile/loop_render.h"

#include <algorithm>

#include "pax/core/error.h"

namespace pax {
namespace {

enum class Kind { none, float_, int_, mask };

Kind kind_of(DType t) {
  switch (t) {
    case DType::f32:
    case DType::bf16: return Kind::float_;
    case DType::i32: return Kind::int_;
    case DType::bool_: return Kind::mask;
    default: return Kind::none;
  }
}

// The format a slot's memory must have to hold a value of its kind.
bool format_fits(Kind k, SlotFormat f) {
  switch (k) {
    case Kind::float_: return f == SlotFormat::f32 || f == SlotFormat::bf16;
    case Kind::int_: return f == SlotFormat::i32;
    case Kind::mask: return f == SlotFormat::boolean;
    case Kind::none: return false;
  }
  return false;
}

// Whether the instruction rounds its result to bf16 precision, as the bf16
// kernels do (widen, compute in f32, round): arithmetic and conversions with
// a bf16 result, except a bf16 -> bf16 conversion (a copy).
bool rounds(const FusedInstr& ins) {
  if (ins.out_dtype != DType::bf16) return false;
  if (ins.kind == FusedInstr::Kind::convert) return ins.dtype != DType::bf16;
  return ins.kind == FusedInstr::Kind::unary || ins.kind == FusedInstr::Kind::binary ||
         ins.kind == FusedInstr::Kind::integer_pow;
}

// The expression template of the instruction (before any rounding), or an
// empty view when the dialect has none for it.
std::string_view expression(const LoopProgram& p, const FusedInstr& ins, const LoopDialect& d) {
  auto kind = [&](int slot) { return kind_of(p.slots[size_t(slot)].dtype); };
  const Kind in = kind(ins.args[0]), out = kind_of(ins.out_dtype);
  switch (ins.kind) {
    case FusedInstr::Kind::unary:
      if (in != out) return {};
      return in == Kind::float_ ? d.unary[ins.op] : in == Kind::int_ ? d.unary_int[ins.op] : std::string_view();
    case FusedInstr::Kind::binary:
      if (in != out || kind(ins.args[1]) != in) return {};
      return in == Kind::float_ ? d.binary[ins.op] : in == Kind::int_ ? d.binary_int[ins.op] : std::string_view();
    case FusedInstr::Kind::compare:
      if (out != Kind::mask || kind(ins.args[1]) != in) return {};
      return in == Kind::float_ ? d.compare_float[ins.op] : in == Kind::int_ ? d.compare_int[ins.op] : "";
    case FusedInstr::Kind::is_finite: return in == Kind::float_ && out == Kind::mask ? d.is_finite : "";
    case FusedInstr::Kind::integer_pow:  // exponents that print as plain literals
      if (in != out || ins.exponent <= -(int64_t(1) << 40) || ins.exponent >= (int64_t(1) << 40)) return {};
      return in == Kind::float_ ? d.integer_pow : in == Kind::int_ ? d.integer_pow_int : std::string_view();
    case FusedInstr::Kind::convert:
      if (out == Kind::float_) {
        return in == Kind::float_ ? std::string_view("{0}")
               : in == Kind::mask ? d.mask_to_float
               : in == Kind::int_ ? d.int_to_float
                                  : "";
      }
      if (out == Kind::int_) {
        return in == Kind::int_     ? std::string_view("{0}")
               : in == Kind::mask   ? d.mask_to_int
               : in == Kind::float_ ? d.float_to_int
                                    : "";
      }
      if (out != Kind::mask) return {};
      return in == Kind::float_ ? d.float_to_mask : in == Kind::int_ ? d.int_to_mask : "";
    case FusedInstr::Kind::select_n:
      if (ins.args.size() != 3 || in != Kind::mask || kind(ins.args[1]) != out || kind(ins.args[2]) != out) return {};
      return out == Kind::float_ ? d.select : out == Kind::int_ ? d.select_int : "";
  }
  return {};
}

// The template with {0}, {1}, ... replaced by the arguments.
std::string fill(std::string_view tmpl, const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '{' && i + 2 < tmpl.size() && tmpl[i + 2] == '}' && tmpl[i + 1] >= '0' && tmpl[i + 1] <= '9') {
      const size_t k = size_t(tmpl[i + 1] - '0');
      PAX_CHECK(k < args.size(), "loop renderer: template '", tmpl, "' names operand ", k, " of ", args.size());
      out += args[k];
      i += 2;
    } else {
      out += tmpl[i];
    }
  }
  return out;
}

std::string var(int slot) { return "v" + std::to_string(slot); }

}  // namespace

bool renderable(const LoopProgram& p, const FusedInstr& ins, std::span<const SlotFormat> formats,
                const LoopDialect& dialect) {
  for (int a : ins.args) {
    const FusedSlot& s = p.slots[size_t(a)];
    if (!format_fits(kind_of(s.dtype), formats[size_t(a)])) return false;
    const SlotFormat f = formats[size_t(a)];
    if ((read_as_splat(s) ? dialect.splat : dialect.load)[size_t(f)].empty()) return false;
    if (s.kind == FusedSlot::Kind::splat && s.clamp_hi >= 0) return false;  // clamped int32 selectors
  }
  const Kind out = kind_of(ins.out_dtype);
  if (out == Kind::none) return false;
  if (!format_fits(out, formats[size_t(ins.result)]) || dialect.store[size_t(formats[size_t(ins.result)])].empty()) {
    return false;
  }
  if (rounds(ins) && dialect.round_bf16.empty()) return false;
  return !expression(p, ins, dialect).empty();
}

RenderedRun render_run(const LoopProgram& p, int begin, int end, std::span<const SlotFormat> formats,
                       const LoopDialect& d) {
  PAX_CHECK(begin >= 0 && begin < end && size_t(end) <= p.instrs.size(), "render_run: bad run [", begin, ", ", end,
            ") of ", p.instrs.size(), " instructions");
  // Slots read after the run: by later instructions, stores, the reduction.
  std::vector<bool> after(p.slots.size(), false);
  for (size_t i = size_t(end); i < p.instrs.size(); ++i) {
    for (int a : p.instrs[i].args) after[size_t(a)] = true;
  }
  for (const FusedStore& st : p.stores) after[size_t(st.slot)] = true;
  if (p.reduce) after[size_t(p.reduce->slot)] = true;

  RenderedRun run;
  std::vector<bool> have(p.slots.size(), false);
  auto let = [&](Kind k) { return k == Kind::float_ ? d.let_float : k == Kind::int_ ? d.let_int : d.let_mask; };
  for (int i = begin; i < end; ++i) {
    const FusedInstr& ins = p.instrs[size_t(i)];
    PAX_CHECK(renderable(p, ins, formats, d), "render_run: instruction ", i, " cannot be rendered");
    std::vector<std::string> operands;
    for (int a : ins.args) {
      const FusedSlot& s = p.slots[size_t(a)];
      if (!have[size_t(a)]) {
        have[size_t(a)] = true;
        const size_t f = size_t(formats[size_t(a)]);
        const bool splat = read_as_splat(s);
        const std::string value = fill(splat ? d.splat[f] : d.load[f], {std::to_string(a)});
        (splat ? run.splats : run.body).push_back(fill(let(kind_of(s.dtype)), {var(a), value}));
        if (!splat) run.loaded.push_back(a);
      }
      operands.push_back(var(a));
    }
    if (ins.kind == FusedInstr::Kind::integer_pow) operands.push_back(std::to_string(ins.exponent));
    std::string value = fill(expression(p, ins, d), operands);
    if (rounds(ins)) value = fill(d.round_bf16, {value});
    run.body.push_back(fill(let(kind_of(ins.out_dtype)), {var(ins.result), value}));
    have[size_t(ins.result)] = true;
    if (after[size_t(ins.result)]) {
      run.body.push_back(
          fill(d.store[size_t(formats[size_t(ins.result)])], {var(ins.result), std::to_string(ins.result)}));
      run.stored.push_back(ins.result);
    }
  }
  return run;
}

}  // namespace pax

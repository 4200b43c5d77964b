// Rendering fused loops and row sweeps as CUDA C kernels (see
// cuda_kernels_source.h).
#include "pax/backend/cuda/cuda_kernels_source.h"

#include <algorithm>
#include <optional>

#include "pax/backend/cuda/cuda_dialect.h"
#include "pax/compile/loop_render.h"
#include "pax/core/error.h"
#include "pax/ir/prims.h"

namespace pax::cuda {
namespace {

constexpr int kElementwiseThreads = 256;
constexpr int64_t kMaxElementwiseBlocks = int64_t(1) << 20;  // the grid-stride loop covers the rest
constexpr int kWarpRowsPerBlock = 8;                         // rows of a block when a warp reduces each

std::string num(int64_t v) { return std::to_string(v); }

SlotFormat format_of(DType t) {
  switch (t) {
    case DType::f32: return SlotFormat::f32;
    case DType::bf16: return SlotFormat::bf16;
    case DType::i32: return SlotFormat::i32;
    case DType::bool_: return SlotFormat::boolean;
    default: return SlotFormat::none;
  }
}

// The C type of one element in memory.
const char* mem_type(SlotFormat f) {
  switch (f) {
    case SlotFormat::f32: return "float";
    case SlotFormat::bf16: return "unsigned short";
    case SlotFormat::i32: return "int";
    case SlotFormat::boolean: return "unsigned char";
    case SlotFormat::none: break;
  }
  PAX_FAIL("CUDA kernels: a slot without a memory format");
}

// The suffix of the prelude's functions for a format (pax_ld_f32, pax_mem_bf16).
const char* suffix(SlotFormat f) {
  switch (f) {
    case SlotFormat::f32: return "f32";
    case SlotFormat::bf16: return "bf16";
    case SlotFormat::i32: return "i32";
    case SlotFormat::boolean: return "bool";
    case SlotFormat::none: break;
  }
  PAX_FAIL("CUDA kernels: a slot without a memory format");
}

int width(SlotFormat f) {
  switch (f) {
    case SlotFormat::f32:
    case SlotFormat::i32: return 4;
    case SlotFormat::bf16: return 2;
    case SlotFormat::boolean: return 1;
    case SlotFormat::none: break;
  }
  return 0;
}

// How a reduction accumulates: in f32 for f32 and bf16 values, in int32
// (wrapping) for int32 ones.
struct ReduceCode {
  std::string acc_type, op, identity;
  SlotFormat out_format = SlotFormat::none;
};

std::optional<ReduceCode> reduce_code(ReduceOp op, DType dtype, DType out_dtype) {
  if (op != ReduceOp::sum && op != ReduceOp::max && op != ReduceOp::min) return std::nullopt;
  ReduceCode r;
  const std::string name = op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "min";
  if (dtype == DType::f32 || dtype == DType::bf16) {
    if (out_dtype != dtype && out_dtype != DType::f32) return std::nullopt;
    r.acc_type = "float";
    r.op = "pax_" + name + "_f32";
    r.identity = op == ReduceOp::sum   ? "0.0f"
                 : op == ReduceOp::max ? "__uint_as_float(0xff800000u)"
                                       : "__uint_as_float(0x7f800000u)";
  } else if (dtype == DType::i32) {
    if (out_dtype != DType::i32) return std::nullopt;
    r.acc_type = "int";
    r.op = "pax_" + name + "_i32";
    r.identity = op == ReduceOp::sum ? "0" : op == ReduceOp::max ? "(-2147483647 - 1)" : "2147483647";
  } else {
    return std::nullopt;
  }
  r.out_format = format_of(out_dtype);
  return r;
}

// The accumulator in the output's memory format, rounded once for bf16.
std::string finish(const ReduceCode& r, const std::string& acc) {
  if (r.out_format == SlotFormat::bf16) return "pax_mem_bf16(pax_round_bf16(" + acc + "))";
  return std::string("pax_mem_") + suffix(r.out_format) + "(" + acc + ")";
}

// The loop as the kernels read it: views are never read per segment (that is
// the CPU's), and their dimensions are merged where they can be.
LoopProgram plain(const LoopProgram& p) {
  LoopProgram q = p;
  q.segment = 0;
  for (FusedSlot& s : q.slots) {
    s.segment = FusedSlot::Segment::none;
    if (s.kind == FusedSlot::Kind::view && !s.dims.empty() && s.dims.size() == s.strides.size()) {
      coalesce_view(s.dims, s.strides);
    }
  }
  return q;
}

std::vector<SlotFormat> formats_of(const LoopProgram& p) {
  std::vector<SlotFormat> f;
  for (const FusedSlot& s : p.slots) f.push_back(format_of(s.dtype));
  return f;
}

std::string describe(const FusedInstr& ins) {
  std::string what;
  switch (ins.kind) {
    case FusedInstr::Kind::unary: what = unary_op_name(UnaryOp(ins.op)); break;
    case FusedInstr::Kind::binary: what = binary_op_name(BinaryOp(ins.op)); break;
    case FusedInstr::Kind::compare: what = "compare " + num(ins.op); break;
    case FusedInstr::Kind::is_finite: what = "is_finite"; break;
    case FusedInstr::Kind::integer_pow: what = "integer_pow " + num(ins.exponent); break;
    case FusedInstr::Kind::convert: what = "convert to " + std::string(dtype_name(ins.out_dtype)); break;
    case FusedInstr::Kind::select_n: what = "select_n of " + num(int64_t(ins.args.size()) - 1) + " cases"; break;
  }
  return what + " of " + dtype_name(ins.dtype);
}

// The slots whose values a loop's stores and reduction read.
std::vector<int> needed_slots(const LoopProgram& p) {
  std::vector<int> out;
  for (const FusedStore& st : p.stores) out.push_back(st.slot);
  if (p.reduce) out.push_back(p.reduce->slot);
  return out;
}

std::string loop_problem(const LoopProgram& q) {
  const LoopProgram p = plain(q);
  if (p.size <= 0) return "the loop has no elements";
  const std::vector<SlotFormat> formats = formats_of(p);
  std::vector<DType> arg_dtype(size_t(std::max(p.num_inputs, 0)), DType::f32);
  std::vector<bool> arg_seen(arg_dtype.size(), false);
  for (size_t s = 0; s < p.slots.size(); ++s) {
    const FusedSlot& slot = p.slots[s];
    if (slot.kind == FusedSlot::Kind::reg) continue;
    if (slot.arg < 0 || slot.arg >= p.num_inputs) {
      return "slot " + num(int64_t(s)) + " reads input " + num(slot.arg) + " of " + num(p.num_inputs);
    }
    if (arg_seen[size_t(slot.arg)] && arg_dtype[size_t(slot.arg)] != slot.dtype) {
      return "input " + num(slot.arg) + " is read as two dtypes";
    }
    arg_seen[size_t(slot.arg)] = true;
    arg_dtype[size_t(slot.arg)] = slot.dtype;
    if (slot.kind == FusedSlot::Kind::view) {
      if (slot.dims.empty() || slot.dims.size() != slot.strides.size() || slot.dims.size() > kMaxFusedViewRank) {
        return "view slot " + num(int64_t(s)) + " has " + num(int64_t(slot.dims.size())) + " dimensions and " +
               num(int64_t(slot.strides.size())) + " strides (1 to " + num(int64_t(kMaxFusedViewRank)) + ")";
      }
      int64_t n = 1;
      for (int64_t d : slot.dims) n *= d;
      if (n != p.size) return "view slot " + num(int64_t(s)) + " covers " + num(n) + " of " + num(p.size) + " elements";
    }
  }
  auto unheld = [&](int s) -> std::string {
    if (s < 0 || size_t(s) >= p.slots.size()) return "slot " + num(s) + " does not exist";
    const FusedSlot& slot = p.slots[size_t(s)];
    if (formats[size_t(s)] == SlotFormat::none) {
      return "slot " + num(s) + " holds " + dtype_name(slot.dtype) +
             " values (the kernels hold f32, bf16, int32 and bool values)";
    }
    if (slot.kind == FusedSlot::Kind::splat && slot.clamp_hi >= 0) {
      return "slot " + num(s) + " is a clamped select_n selector";
    }
    return "";
  };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const FusedInstr& ins = p.instrs[i];
    for (int a : ins.args) {
      if (std::string why = unheld(a); !why.empty()) return "instruction " + num(int64_t(i)) + ": " + why;
    }
    if (std::string why = unheld(ins.result); !why.empty()) return "instruction " + num(int64_t(i)) + ": " + why;
    if (!renderable(p, ins, formats, cuda_dialect())) {
      return "instruction " + num(int64_t(i)) + " (" + describe(ins) + ") has no CUDA C form";
    }
  }
  for (const FusedStore& st : p.stores) {
    if (std::string why = unheld(st.slot); !why.empty()) return "a store: " + why;
    if (st.output < 0 || st.output >= p.num_outputs) return "a store writes output " + num(st.output);
  }
  if (p.reduce) {
    const FusedReduce& r = *p.reduce;
    if (std::string why = unheld(r.slot); !why.empty()) return "the reduction: " + why;
    const DType dtype = p.slots[size_t(r.slot)].dtype;
    if (!cuda_reduction_renders(r.op, dtype, r.out_dtype)) {
      return "a reduction of " + std::string(dtype_name(dtype)) + " values into " + dtype_name(r.out_dtype) +
             " (the kernels sum, max and min f32, bf16 and int32 values)";
    }
    if (r.outer < 1 || r.n < 1 || r.inner < 1 || r.outer * r.n * r.inner != p.size || (r.outer != 1 && r.inner != 1)) {
      return "a reduction of (" + num(r.outer) + ", " + num(r.n) + ", " + num(r.inner) + ") over " + num(p.size) +
             " elements (leading or trailing axes only)";
    }
    if (r.output < 0 || r.output >= p.num_outputs) return "the reduction writes output " + num(r.output);
  }
  std::vector<bool> written(size_t(std::max(p.num_outputs, 0)), false);
  for (const FusedStore& st : p.stores) written[size_t(st.output)] = true;
  if (p.reduce) written[size_t(p.reduce->output)] = true;
  for (size_t o = 0; o < written.size(); ++o) {
    if (!written[o]) return "output " + num(int64_t(o)) + " is never written";
  }
  if (written.empty()) return "the loop writes nothing";
  return "";
}

// One loop's code inside a kernel: its pointers are named with `prefix`
// (parameters <prefix>a<k> / <prefix>b<k>, typed pointers <prefix>in<k> /
// <prefix>out<k>, view offsets <prefix>view<slot>()).
class LoopCode {
 public:
  LoopCode(const LoopProgram& program, std::string prefix) : p_(plain(program)), prefix_(std::move(prefix)) {
    const std::string problem = loop_problem(p_);
    PAX_CHECK(problem.empty(), "CUDA kernels: cannot render this loop: ", problem);
    formats_ = formats_of(p_);
    std::vector<bool> declared(p_.slots.size(), false);
    if (!p_.instrs.empty()) {
      run_ = render_run(p_, 0, int(p_.instrs.size()), formats_, cuda_dialect());
      for (const FusedInstr& ins : p_.instrs) {
        for (int a : ins.args) declared[size_t(a)] = true;
        declared[size_t(ins.result)] = true;
      }
    }
    loaded_ = run_.loaded;
    for (int s : needed_slots(p_)) {
      if (declared[size_t(s)]) continue;
      declared[size_t(s)] = true;
      if (p_.slots[size_t(s)].kind == FusedSlot::Kind::splat) {
        extra_splats_.push_back(s);
      } else {
        extra_loads_.push_back(s);
        loaded_.push_back(s);
      }
    }
    arg_format_.assign(size_t(p_.num_inputs), SlotFormat::none);
    for (const FusedSlot& s : p_.slots) {
      if (s.kind != FusedSlot::Kind::reg) arg_format_[size_t(s.arg)] = format_of(s.dtype);
    }
    out_format_.assign(size_t(p_.num_outputs), SlotFormat::none);
    for (const FusedStore& st : p_.stores) out_format_[size_t(st.output)] = formats_[size_t(st.slot)];
    if (p_.reduce) {
      reduce_ = *reduce_code(p_.reduce->op, p_.slots[size_t(p_.reduce->slot)].dtype, p_.reduce->out_dtype);
      out_format_[size_t(p_.reduce->output)] = reduce_.out_format;
    }
  }

  const LoopProgram& program() const { return p_; }
  const ReduceCode& reduce() const { return reduce_; }
  std::string out(int output) const { return prefix_ + "out" + num(output); }
  std::string in(int arg) const { return prefix_ + "in" + num(arg); }

  void params(std::vector<std::string>& out) const {
    for (int a = 0; a < p_.num_inputs; ++a) out.push_back("const void* " + prefix_ + "a" + num(a));
    for (int o = 0; o < p_.num_outputs; ++o) out.push_back("void* " + prefix_ + "b" + num(o));
  }

  // The offsets of the views, as functions of the element's index.
  std::string helpers() const {
    std::string out;
    for (size_t s = 0; s < p_.slots.size(); ++s) {
      const FusedSlot& v = p_.slots[s];
      if (v.kind != FusedSlot::Kind::view || !is_loaded(int(s))) continue;
      // 32-bit arithmetic where every index and offset fits.
      int64_t extent = 1;
      for (size_t d = 0; d < v.dims.size(); ++d) extent += (v.dims[d] - 1) * std::abs(v.strides[d]);
      const bool narrow = p_.size < (int64_t(1) << 31) && extent < (int64_t(1) << 31);
      const std::string u = narrow ? "unsigned" : "unsigned long long";
      out += "__device__ __forceinline__ long long " + prefix_ + "view" + num(int64_t(s)) + "(long long i) {\n";
      out += "  " + u + " r = (" + u + ")i, off = 0;\n";
      int outer = -1, lowest = -1;  // the outermost dimension, and the outermost one that moves
      for (size_t d = 0; d < v.dims.size(); ++d) {
        if (v.dims[d] == 1) continue;
        if (outer < 0) outer = int(d);
        if (v.strides[d] != 0 && lowest < 0) lowest = int(d);
      }
      for (int d = int(v.dims.size()) - 1; d >= 0 && lowest >= 0; --d) {
        const int64_t dim = v.dims[size_t(d)], stride = v.strides[size_t(d)];
        if (dim == 1) continue;
        const std::string st = "(" + u + ")" + num(stride) + (narrow ? "u" : "ull");
        if (d == outer) {
          if (stride != 0) out += "  off += r * " + st + ";\n";
          break;
        }
        if (stride != 0) out += "  off += (r % " + num(dim) + (narrow ? "u" : "ull") + ") * " + st + ";\n";
        if (d == lowest) break;
        out += "  r /= " + num(dim) + (narrow ? "u" : "ull") + ";\n";
      }
      out += "  return (long long)off;\n}\n";
    }
    return out;
  }

  // The loop's typed pointers and its splats, read once per thread.
  std::string prologue(const std::string& indent) const {
    std::string out;
    for (int a = 0; a < p_.num_inputs; ++a) {
      if (arg_format_[size_t(a)] == SlotFormat::none) continue;
      const std::string t = mem_type(arg_format_[size_t(a)]);
      out += indent + "const " + t + "* const " + in(a) + " = static_cast<const " + t + "*>(" + prefix_ + "a" + num(a) +
             ");\n";
    }
    for (int o = 0; o < p_.num_outputs; ++o) {
      if (out_format_[size_t(o)] == SlotFormat::none) continue;
      const std::string t = mem_type(out_format_[size_t(o)]);
      out += indent + t + "* const " + this->out(o) + " = static_cast<" + t + "*>(" + prefix_ + "b" + num(o) + ");\n";
    }
    for (size_t s = 0; s < p_.slots.size(); ++s) {
      const FusedSlot& slot = p_.slots[s];
      if (slot.kind != FusedSlot::Kind::splat) continue;
      out += indent + "const " + mem_type(formats_[s]) + "* const p" + num(int64_t(s)) + " = " + in(slot.arg) + ";\n";
    }
    for (const std::string& line : run_.splats) out += indent + line + "\n";
    for (int s : extra_splats_) out += indent + let(s, true) + "\n";
    return out;
  }

  // Slots read contiguously at the element's index: a vector path stages them.
  std::vector<int> contiguous_inputs() const {
    std::vector<int> out;
    for (int s : loaded_) {
      if (p_.slots[size_t(s)].kind == FusedSlot::Kind::input) out.push_back(s);
    }
    return out;
  }

  // Bytes of an element of output o.
  int out_width(int o) const { return width(out_format_[size_t(o)]); }
  int slot_width(int s) const { return width(formats_[size_t(s)]); }
  std::string slot_type(int s) const { return mem_type(formats_[size_t(s)]); }
  std::string out_type(int o) const { return mem_type(out_format_[size_t(o)]); }

  // The statements of element `index` in a scope of their own, `tail` last
  // in it. vector: contiguous inputs come from the staged arrays s<slot> at
  // `lane` and stores go to the arrays o<output>.
  std::string element(const std::string& index, const std::string& indent, bool vector, const std::string& lane,
                      const std::string& tail) const {
    std::string out = indent + "{\n";
    const std::string in2 = indent + "  ";
    for (int s : loaded_) {
      const FusedSlot& slot = p_.slots[size_t(s)];
      const std::string t = mem_type(formats_[size_t(s)]), n = num(s);
      if (slot.kind == FusedSlot::Kind::view) {
        out += in2 + "const " + t + "* const p" + n + " = " + in(slot.arg) + ";\n";
        out += in2 + "const long long i" + n + " = " + prefix_ + "view" + n + "(" + index + ");\n";
      } else if (vector) {
        out += in2 + "const " + t + "* const p" + n + " = s" + n + ";\n";
        out += in2 + "const long long i" + n + " = " + lane + ";\n";
      } else {
        out += in2 + "const " + t + "* const p" + n + " = " + in(slot.arg) + ";\n";
        out += in2 + "const long long i" + n + " = " + index + ";\n";
      }
    }
    for (const std::string& line : run_.body) out += in2 + line + "\n";
    for (int s : extra_loads_) out += in2 + let(s, false) + "\n";
    for (const FusedStore& st : p_.stores) {
      const std::string value = std::string("pax_mem_") + suffix(formats_[size_t(st.slot)]) + "(v" + num(st.slot) + ")";
      if (vector) {
        out += in2 + "o" + num(st.output) + "[" + lane + "] = " + value + ";\n";
      } else {
        out += in2 + this->out(st.output) + "[" + index + "] = " + value + ";\n";
      }
    }
    if (!tail.empty()) out += in2 + tail + "\n";
    out += indent + "}\n";
    return out;
  }

  // The reduced value of the element (inside element()'s scope).
  std::string reduced_value() const { return "v" + num(p_.reduce->slot); }

 private:
  bool is_loaded(int s) const { return std::find(loaded_.begin(), loaded_.end(), s) != loaded_.end(); }

  // The declaration of slot s's variable from its memory (a splat's first
  // element, or the element at i<s>).
  std::string let(int s, bool splat) const {
    const LoopDialect& d = cuda_dialect();
    const DType t = p_.slots[size_t(s)].dtype;
    const std::string_view l = t == DType::i32 ? d.let_int : t == DType::bool_ ? d.let_mask : d.let_float;
    const size_t f = size_t(formats_[size_t(s)]);
    std::string value(splat ? d.splat[f] : d.load[f]);
    std::string decl(l);
    auto replace_all = [](std::string& text, const std::string& from, const std::string& to) {
      for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
      }
    };
    replace_all(value, "{0}", num(s));
    const size_t name_at = decl.find("{0}");
    decl.replace(name_at, 3, "v" + num(s));
    decl.replace(decl.find("{1}"), 3, value);
    return decl;
  }

  LoopProgram p_;
  std::string prefix_;
  std::vector<SlotFormat> formats_;
  RenderedRun run_;
  std::vector<int> loaded_, extra_loads_, extra_splats_;
  std::vector<SlotFormat> arg_format_, out_format_;
  ReduceCode reduce_;
};

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string header(const std::string& what) {
  std::string out = "// paxcc generated CUDA kernel (pax/backend/cuda/cuda_kernels_source.h): " + what + "\n";
  out += cuda_dialect_prelude();
  return out;
}

std::string entry(const std::string& name, int block, const std::vector<std::string>& params) {
  return "extern \"C\" __global__ void __launch_bounds__(" + num(block) + ") " + name + "(" + join(params, ", ") +
         ") {\n";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

CudaKernelSource elementwise_kernel(const LoopCode& code, const std::string& name) {
  const LoopProgram& p = code.program();
  // Elements per chunk: 16 bytes of the narrowest contiguous slot (8 at most).
  int narrowest = 4;
  const std::vector<int> staged = code.contiguous_inputs();
  for (int s : staged) narrowest = std::min(narrowest, code.slot_width(s));
  for (int o = 0; o < p.num_outputs; ++o) narrowest = std::min(narrowest, code.out_width(o));
  const int v = std::min(8, 16 / narrowest);
  std::vector<std::string> params;
  code.params(params);
  params.push_back("long long size");
  CudaKernelSource k;
  k.name = name;
  k.block_threads = kElementwiseThreads;
  k.grid_blocks = std::clamp<int64_t>(ceil_div(p.size, int64_t(kElementwiseThreads) * v), 1, kMaxElementwiseBlocks);
  k.num_params = int(params.size());
  k.size = p.size;
  std::string& s = k.source;
  s = header("an elementwise loop of " + num(p.size) + " elements");
  s += code.helpers();
  s += entry(name, k.block_threads, params);
  s += code.prologue("  ");
  s += "  const long long step = (long long)gridDim.x * blockDim.x;\n";
  s += "  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
  s += "  long long done = 0;\n";
  // The vector path, when every staged pointer is aligned for it.
  std::vector<std::string> aligned;
  for (int sl : staged) {
    const int bytes = std::min(16, v * code.slot_width(sl));
    aligned.push_back("(reinterpret_cast<unsigned long long>(" + code.in(p.slots[size_t(sl)].arg) + ") % " +
                      num(bytes) + " == 0)");
  }
  for (int o = 0; o < p.num_outputs; ++o) {
    const int bytes = std::min(16, v * code.out_width(o));
    aligned.push_back("(reinterpret_cast<unsigned long long>(" + code.out(o) + ") % " + num(bytes) + " == 0)");
  }
  s += "  if (" + join(aligned, " && ") + ") {\n";
  s += "    const long long chunks = size / " + num(v) + ";\n";
  s += "    for (long long c = first; c < chunks; c += step) {\n";
  s += "      const long long base = c * " + num(v) + ";\n";
  for (int sl : staged) {
    s += "      __align__(16) " + code.slot_type(sl) + " s" + num(sl) + "[" + num(v) + "];\n";
    s += "      pax_vload(s" + num(sl) + ", " + code.in(p.slots[size_t(sl)].arg) + " + base);\n";
  }
  for (int o = 0; o < p.num_outputs; ++o) {
    s += "      __align__(16) " + code.out_type(o) + " o" + num(o) + "[" + num(v) + "];\n";
  }
  s += "#pragma unroll\n";
  s += "      for (int k = 0; k < " + num(v) + "; ++k) {\n";
  s += "        const long long i = base + k;\n";
  s += code.element("i", "        ", true, "k", "");
  s += "      }\n";
  for (int o = 0; o < p.num_outputs; ++o) s += "      pax_vstore(" + code.out(o) + " + base, o" + num(o) + ");\n";
  s += "    }\n";
  s += "    done = chunks * " + num(v) + ";\n";
  s += "  }\n";
  s += "  for (long long i = done + first; i < size; i += step) {\n";
  s += code.element("i", "    ", false, "", "");
  s += "  }\n}\n";
  return k;
}

// Rows of n elements: the group of threads that reduces each.
struct RowGroup {
  int threads;  // T: 32 (a warp) or a whole block
  int rows;     // rows per block
  int block() const { return threads * rows; }
};

RowGroup row_group(int64_t n) {
  const int t = cuda_row_group_threads(n);
  return {t, t == 32 ? kWarpRowsPerBlock : 1};
}

// The start of a kernel body that works on rows: `t` (the thread in its
// row's group) and `row`; warps past the last row leave.
std::string row_start(const RowGroup& g, int64_t rows) {
  std::string s = "  const int t = threadIdx.x % " + num(g.threads) + ";\n";
  s += "  const long long row = (long long)blockIdx.x * " + num(g.rows) + " + threadIdx.x / " + num(g.threads) + ";\n";
  if (g.rows > 1) s += "  if (row >= " + num(rows) + "LL) return;\n";
  return s;
}

// A whole-row pass of a loop over row `row` of `len` elements, its
// reduction (if any) written by thread 0 of the group.
std::string row_pass(const LoopCode& code, const RowGroup& g, int64_t len, const std::string& indent) {
  const LoopProgram& p = code.program();
  std::string s;
  if (p.reduce) {
    const ReduceCode& r = code.reduce();
    s += indent + r.acc_type + " acc = " + r.identity + ";\n";
  }
  s += indent + "for (long long j = t; j < " + num(len) + "LL; j += " + num(g.threads) + ") {\n";
  s += indent + "  const long long i = row * " + num(len) + "LL + j;\n";
  const std::string tail = p.reduce ? "acc = " + code.reduce().op + "()(acc, " + code.reduced_value() + ");" : "";
  s += code.element("i", indent + "  ", false, "", tail);
  s += indent + "}\n";
  if (p.reduce) {
    const ReduceCode& r = code.reduce();
    s += indent + "acc = pax_group_reduce<" + num(g.threads) + ">(acc, " + r.op + "(), " + r.identity + ");\n";
    s += indent + "if (t == 0) " + code.out(p.reduce->output) + "[row] = " + finish(r, "acc") + ";\n";
  }
  return s;
}

CudaKernelSource row_reduction_kernel(const LoopCode& code, const std::string& name) {
  const LoopProgram& p = code.program();
  const FusedReduce& r = *p.reduce;
  const RowGroup g = row_group(r.n);
  std::vector<std::string> params;
  code.params(params);
  params.push_back("long long size");
  CudaKernelSource k;
  k.name = name;
  k.block_threads = g.block();
  k.grid_blocks = ceil_div(r.outer, g.rows);
  k.num_params = int(params.size());
  k.size = p.size;
  std::string& s = k.source;
  s = header("a loop reducing " + num(r.outer) + " rows of " + num(r.n) + " elements");
  s += code.helpers();
  s += entry(name, k.block_threads, params);
  s += code.prologue("  ");
  s += row_start(g, r.outer);
  s += row_pass(code, g, r.n, "  ");
  s += "}\n";
  return k;
}

// Row groups of a column reduction: up to 32 where there are few columns to
// spread the work over, 8 where there are many, never more than the rows.
int column_groups(int64_t n, int64_t inner) {
  const int most = inner < 4096 ? 32 : 8;
  int g = 1;
  while (g * 2 <= most && g * 2 <= n) g *= 2;
  return g;
}

CudaKernelSource column_reduction_kernel(const LoopCode& code, const std::string& name) {
  const LoopProgram& p = code.program();
  const FusedReduce& r = *p.reduce;
  const ReduceCode& rc = code.reduce();
  const int groups = column_groups(r.n, r.inner);
  std::vector<std::string> params;
  code.params(params);
  params.push_back("long long size");
  CudaKernelSource k;
  k.name = name;
  k.block_threads = 32 * groups;
  k.grid_blocks = ceil_div(r.inner, 32);
  k.num_params = int(params.size());
  k.size = p.size;
  std::string& s = k.source;
  s = header("a loop reducing " + num(r.n) + " rows into " + num(r.inner) + " columns");
  s += code.helpers();
  s += entry(name, k.block_threads, params);
  s += code.prologue("  ");
  s += "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n";
  s += "  const long long col = (long long)blockIdx.x * 32 + tx;\n";
  s += "  " + rc.acc_type + " acc = " + rc.identity + ";\n";
  s += "  if (col < " + num(r.inner) + "LL) {\n";
  s += "    for (long long j = ty; j < " + num(r.n) + "LL; j += " + num(groups) + ") {\n";
  s += "      const long long i = j * " + num(r.inner) + "LL + col;\n";
  s += code.element("i", "      ", false, "", "acc = " + rc.op + "()(acc, " + code.reduced_value() + ");");
  s += "    }\n  }\n";
  s += "  __shared__ " + rc.acc_type + " partial[" + num(groups) + "][32];\n";
  s += "  partial[ty][tx] = acc;\n";
  s += "  __syncthreads();\n";
  s += "  if (ty == 0 && col < " + num(r.inner) + "LL) {\n";
  s += "    " + rc.acc_type + " a = partial[0][tx];\n";
  s += "    for (int g = 1; g < " + num(groups) + "; ++g) a = " + rc.op + "()(a, partial[g][tx]);\n";
  s += "    " + code.out(r.output) + "[col] = " + finish(rc, "a") + ";\n";
  s += "  }\n}\n";
  return k;
}

}  // namespace

int cuda_row_group_threads(int64_t n) { return n <= 1024 ? 32 : n <= 16384 ? 256 : 1024; }

bool cuda_reduction_renders(ReduceOp op, DType dtype, DType out_dtype) {
  return reduce_code(op, dtype, out_dtype).has_value();
}

std::string cuda_loop_problem(const LoopProgram& p) { return loop_problem(p); }

CudaKernelSource cuda_loop_kernel(const LoopProgram& p, const std::string& name) {
  const LoopCode code(p, "");
  if (!code.program().reduce) return elementwise_kernel(code, name);
  return code.program().reduce->inner == 1 ? row_reduction_kernel(code, name) : column_reduction_kernel(code, name);
}

std::string cuda_sweep_problem(std::span<const CudaSweepLoop> loops, int64_t rows, int64_t row_len) {
  if (loops.empty()) return "the sweep has no loops";
  if (rows < 1 || row_len < 1) return "the sweep covers " + num(rows) + " rows of " + num(row_len) + " elements";
  for (size_t k = 0; k < loops.size(); ++k) {
    const CudaSweepLoop& l = loops[k];
    const std::string at = "loop " + num(int64_t(k)) + ": ";
    if (!l.program) {
      if (!cuda_reduction_renders(l.op, l.dtype, l.out_dtype)) {
        return at + "a reduction of " + dtype_name(l.dtype) + " values into " + dtype_name(l.out_dtype);
      }
      continue;
    }
    const LoopProgram& p = *l.program;
    if (std::string why = loop_problem(p); !why.empty()) return at + why;
    const bool whole = p.size == rows * row_len;
    if (!whole && p.size != rows) {
      return at + "it covers " + num(p.size) + " elements, not " + num(rows) + " rows of " + num(row_len);
    }
    if (p.reduce && !(whole && p.reduce->outer == rows && p.reduce->n == row_len && p.reduce->inner == 1)) {
      return at + "its reduction is not one of the sweep's rows";
    }
  }
  return "";
}

CudaKernelSource cuda_sweep_kernel(std::span<const CudaSweepLoop> loops, int64_t rows, int64_t row_len,
                                   const std::string& name) {
  const std::string problem = cuda_sweep_problem(loops, rows, row_len);
  PAX_CHECK(problem.empty(), "CUDA kernels: cannot render this row sweep: ", problem);
  const RowGroup g = row_group(row_len);
  std::vector<std::optional<LoopCode>> codes;
  std::vector<std::string> params;
  std::string helpers;
  for (size_t k = 0; k < loops.size(); ++k) {
    const std::string prefix = "k" + num(int64_t(k)) + "_";
    if (loops[k].program) {
      codes.emplace_back(std::in_place, *loops[k].program, prefix);
      codes.back()->params(params);
      helpers += codes.back()->helpers();
    } else {
      codes.emplace_back();
      params.push_back("const void* " + prefix + "a0");
      params.push_back("void* " + prefix + "b0");
    }
  }
  params.push_back("long long size");
  CudaKernelSource kernel;
  kernel.name = name;
  kernel.block_threads = g.block();
  kernel.grid_blocks = ceil_div(rows, g.rows);
  kernel.num_params = int(params.size());
  kernel.size = rows * row_len;
  std::string& s = kernel.source;
  s = header("a row sweep of " + num(int64_t(loops.size())) + " loops over " + num(rows) + " rows of " + num(row_len) +
             " elements");
  s += helpers;
  s += entry(name, kernel.block_threads, params);
  s += row_start(g, rows);
  // Each loop ends its row before the next reads it: a barrier of the group.
  const std::string barrier = g.threads == 32 ? "  __syncwarp();\n" : "  __syncthreads();\n";
  for (size_t k = 0; k < loops.size(); ++k) {
    const std::string prefix = "k" + num(int64_t(k)) + "_";
    if (k > 0) s += barrier;
    s += "  {  // loop " + num(int64_t(k)) + "\n";
    if (!codes[k]) {
      const CudaSweepLoop& l = loops[k];
      const ReduceCode r = *reduce_code(l.op, l.dtype, l.out_dtype);
      const SlotFormat f = format_of(l.dtype);
      const std::string t = mem_type(f), ot = mem_type(r.out_format);
      s += "    const " + t + "* const x = static_cast<const " + t + "*>(" + prefix + "a0);\n";
      s += "    " + ot + "* const y = static_cast<" + ot + "*>(" + prefix + "b0);\n";
      s += "    " + r.acc_type + " acc = " + r.identity + ";\n";
      s += "    for (long long j = t; j < " + num(row_len) + "LL; j += " + num(g.threads) + ") {\n";
      s += "      acc = " + r.op + "()(acc, pax_ld_" + suffix(f) + "(x, row * " + num(row_len) + "LL + j));\n";
      s += "    }\n";
      s += "    acc = pax_group_reduce<" + num(g.threads) + ">(acc, " + r.op + "(), " + r.identity + ");\n";
      s += "    if (t == 0) y[row] = " + finish(r, "acc") + ";\n";
    } else {
      const LoopCode& code = *codes[k];
      s += code.prologue("    ");
      if (code.program().size == rows * row_len) {
        s += row_pass(code, g, row_len, "    ");
      } else {
        s += "    if (t == 0) {\n";
        s += "      const long long i = row;\n";
        s += code.element("i", "      ", false, "", "");
        s += "    }\n";
      }
    }
    s += "  }\n";
  }
  s += "}\n";
  return kernel;
}

std::vector<CudaSweepLoop> cuda_sweep_loops(const Jaxpr& jaxpr, const StepSchedule& schedule, const RowSweep& sweep) {
  std::vector<CudaSweepLoop> loops;
  PAX_CHECK(sweep.first <= sweep.last && sweep.last < schedule.steps.size(), "cuda_sweep_loops: steps [", sweep.first,
            ", ", sweep.last, "] of ", schedule.steps.size());
  for (size_t k = sweep.first; k <= sweep.last; ++k) {
    const Step& step = schedule.steps[k];
    switch (step.kind) {
      case Step::Kind::alias: break;  // a reshape: the same bytes
      case Step::Kind::fused: loops.push_back({schedule.groups[step.index].program.get()}); break;
      case Step::Kind::kernel: {
        const Eqn& e = jaxpr.eqns[step.index];
        const AVal& x = jaxpr.aval(e.inputs[0]);
        const std::optional<ReduceShape> r = reduce_shape(e, x);
        PAX_CHECK(r, "cuda_sweep_loops: step ", k, " (", prim_name(e.prim), ") is not a reduction of rows");
        loops.push_back({nullptr, r->op, x.dtype, jaxpr.aval(e.outputs[0]).dtype});
        break;
      }
      case Step::Kind::impl: PAX_FAIL("cuda_sweep_loops: step ", k, " of a row sweep runs on Arrays");
    }
  }
  return loops;
}

}  // namespace pax::cuda

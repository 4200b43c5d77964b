// The CPU backend's function table, and what it answers the compiler.
#include "pax/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/cpu_info.h"
#include "pax/backend/cpu/fused_loop.h"
#include "pax/backend/cpu/gemm_dnnl.h"
#include "pax/backend/cpu/isa.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/backend/cpu/reduce.h"
#include "pax/compile/loop_program.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

int cpu_device_count() { return 1; }

std::string cpu_describe(int /*index*/) {
  const CpuInfo& cpu = cpu_info();
  return cpu.model_name + " (" + isa_summary() + "), " + std::to_string(cpu.physical_cores) + " cores, " +
         std::to_string(omp_get_max_threads()) + " threads";
}
std::shared_ptr<Buffer> cpu_allocate(size_t nbytes, int /*index*/) { return Buffer::allocate(nbytes); }
void cpu_to_host(const Buffer& src, size_t offset, void* dst, size_t nbytes) {
  if (nbytes) copy_bytes(dst, static_cast<const char*>(src.data()) + offset, nbytes);
}
void cpu_from_host(const std::shared_ptr<Buffer>& dst, size_t offset, const void* src, size_t nbytes) {
  if (nbytes) copy_bytes(static_cast<char*>(dst->data()) + offset, src, nbytes);
}
void cpu_copy(const std::shared_ptr<Buffer>& dst, size_t dst_offset, const std::shared_ptr<Buffer>& src,
              size_t src_offset, size_t nbytes) {
  if (nbytes)
    copy_bytes(static_cast<char*>(dst->data()) + dst_offset, static_cast<const char*>(src->data()) + src_offset,
               nbytes);
}
uint64_t cpu_record_event(int) { return 0; }
void cpu_wait_event(int, uint64_t) {}
void cpu_synchronize(int) {}
int cpu_num_threads() { return omp_get_max_threads(); }
void cpu_set_num_threads(int n) {
  PAX_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

// Whether oneDNN has a kernel of its own for this 16-bit dot_general, asked
// as the kernel asks it (kernels of dot_general): where it has none,
// widen_products moves the kernel's widening into the program. Every other
// equation runs as typed.
bool cpu_supports_op(const Jaxpr& j, const Eqn& e) {
  if (e.prim != Prim::dot_general) return true;
  const AVal &lhs = j.aval(e.inputs[0]), &rhs = j.aval(e.inputs[1]), &out = j.aval(e.outputs[0]);
  auto product = [](const AVal& a, const Ints& axes) {
    int64_t n = 1;
    for (int64_t axis : axes) n *= a.shape[axis];
    return n;
  };
  const Ints &lc = e.params.ints("lhs_contracting_dims"), &lb = e.params.ints("lhs_batch_dims");
  const Ints &rc = e.params.ints("rhs_contracting_dims"), &rb = e.params.ints("rhs_batch_dims");
  GemmShape g;
  g.batch = product(lhs, lb);
  g.k = product(lhs, lc);
  g.m = lhs.shape.numel() / std::max<int64_t>(1, g.batch * g.k);
  g.n = rhs.shape.numel() / std::max<int64_t>(1, product(rhs, rb) * product(rhs, rc));
  if (g.batch * g.m * g.n * g.k == 0) return true;  // nothing to multiply
  return gemm_dnnl_supported(g, lhs.dtype, out.dtype == DType::f32 ? DType::f32 : lhs.dtype);
}

// A float product oneDNN computes natively (f32 or bf16 results; no f64 or
// integer ones, which run the blocked loop) takes a bias inside its matmul.
bool cpu_product_bias(const Jaxpr& j, const Eqn& dot) {
  const DType in = j.aval(dot.inputs[0]).dtype, out = j.aval(dot.outputs[0]).dtype;
  const bool float_in = in == DType::f32 || in == DType::bf16 || in == DType::f16;
  return float_in && (out == DType::f32 || out == DType::bf16) && cpu_supports_op(j, dot);
}

// An f32 product oneDNN computes natively multiplies its result by a
// same-shaped f32 operand inside its matmul (a binary post-op). Only f32: a
// bf16 result would be rounded once where the separate multiply rounds twice.
bool cpu_product_multiplier(const Jaxpr& j, const Eqn& dot) {
  return j.aval(dot.outputs[0]).dtype == DType::f32 && cpu_product_bias(j, dot);
}

// A float product oneDNN computes natively takes a ReLU: the kernel applies
// it to the product's result after the bias (kernels_dot.cc; not oneDNN's
// post-op, which turns NaNs into zeros).
bool cpu_product_relu(const Jaxpr& j, const Eqn& dot) { return cpu_product_bias(j, dot); }

// sin and cos range-check windows of 512 elements from the block's start, so
// a tile of rows that starts elsewhere could round differently.
bool cpu_tileable_loop(const LoopProgram& p) {
  for (const FusedInstr& ins : p.instrs) {
    if (ins.kind == FusedInstr::Kind::unary && (UnaryOp(ins.op) == UnaryOp::sin || UnaryOp(ins.op) == UnaryOp::cos)) {
      return false;
    }
  }
  return true;
}

// Rows short enough for one reduce_rows call, accumulated in the reduced
// value's own dtype (so each row's result is written as it is reduced).
bool cpu_row_reduction_in_sweep(ReduceOp op, DType dtype, DType out_dtype, int64_t n) {
  return fusable_reduction(op, dtype, 2, n, 1) && n <= kReduceRowBlock && accumulator_dtype(dtype) == out_dtype;
}

}  // namespace

const LoweringTarget& cpu_lowering_target() {
  static const LoweringTarget target{
      .supports_op = cpu_supports_op,
      .fusable_reduction = fusable_reduction,
      .tileable_loop = cpu_tileable_loop,
      .row_reduction_in_sweep = cpu_row_reduction_in_sweep,
      .product_bias = cpu_product_bias,
      .product_multiplier = cpu_product_multiplier,
      .product_relu = cpu_product_relu,
  };
  return target;
}

const Backend& cpu_backend() {
  static const Backend backend{
      .name = "cpu",
      .kind = DeviceKind::cpu,
      .describe = cpu_describe,
      .absence_reason = nullptr,
      .peak_flops = nullptr,
      .memory = DeviceMemory{.device_count = cpu_device_count,
                             .host_accessible = true,
                             .allocate = cpu_allocate,
                             .to_host = cpu_to_host,
                             .from_host = cpu_from_host,
                             .copy = cpu_copy},
      .record_event = cpu_record_event,
      .wait_event = cpu_wait_event,
      .synchronize = cpu_synchronize,
      .num_threads = cpu_num_threads,
      .set_num_threads = cpu_set_num_threads,
      .kernel = cpu_kernel,
      .launch = nullptr,  // kernels run on the calling thread, at once
      .run_while = nullptr,
      .run_cond = nullptr,
      .supports_op = cpu_supports_op,
      .compile = compile_for_cpu,
  };
  return backend;
}

namespace {
// Loading the library registers the CPU's table (see register_backend); a
// static link must keep this object (whole archive).
[[maybe_unused]] const bool kRegistered = (register_backend(cpu_backend()), true);
}  // namespace

}  // namespace pax::cpu

// The elementwise primitives on a CUDA device: each call is a one-equation
// program whose fused loop the CUDA C renderer writes (cuda_kernels_source.h)
// and NVRTC compiles for the device's architecture, so that eager execution
// computes exactly what the same operation computes inside a fused loop.
// Kernels are compiled once per source and device (and cached on disk), and
// looked up by their source afterwards. Operands of dtypes the renderer has
// no loops for (f64, f16, i64, u8, u32) are computed by the CPU's kernel on
// host copies, with a notice: correct, not fast.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cpu/kernel_cache_file.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/cuda_lowering_target.h"
#include "pax/backend/cuda/nvrtc_compiler.h"
#include "pax/compile/fusion.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

// A compiled kernel of one device.
struct LoadedKernel {
  std::unique_ptr<CudaKernelLibrary> library;
  cudaKernel_t fn = nullptr;
};

// The loaded kernel of `k` on `device`, compiled (or read from the disk
// cache) on first use.
const LoadedKernel& loaded(const CudaKernelSource& k, int device) {
  static std::mutex mu;
  static std::map<std::pair<int, std::string>, std::unique_ptr<LoadedKernel>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<LoadedKernel>& slot = cache[{device, k.source}];
  if (!slot) {
    auto made = std::make_unique<LoadedKernel>();
    made->library = std::make_unique<CudaKernelLibrary>(*compile_cubin(k.source, device_info(device).arch));
    made->fn = made->library->kernel(k.name);
    slot = std::move(made);
  }
  return *slot;
}

// The fused loop of `prim` applied to operands like `in`, giving `out`, or
// nullptr where the lowering makes none for these dtypes.
std::shared_ptr<const LoopProgram> one_equation_loop(Prim prim, const Params& params, std::span<const TensorView> in,
                                                     std::span<const TensorView> out) {
  Jaxpr j;
  Eqn e{prim, {}, {}, params};
  for (const TensorView& v : in) {
    e.inputs.push_back(j.new_var(AVal{*v.shape, v.dtype}));
    j.invars.push_back(e.inputs.back());
  }
  for (const TensorView& v : out) {
    e.outputs.push_back(j.new_var(AVal{*v.shape, v.dtype}));
    j.outvars.push_back(e.outputs.back());
  }
  j.eqns.push_back(std::move(e));
  const StepSchedule s = schedule(j, /*fuse=*/true, cuda_lowering_target());
  if (s.groups.size() != 1 || !s.groups[0].program) return nullptr;
  const FusionGroup& g = s.groups[0];
  // The loop reads its inputs and writes its outputs in the equation's order.
  for (size_t i = 0; i < g.inputs.size(); ++i)
    PAX_CHECK(g.inputs[i] == j.invars[i], prim_name(prim), " on cuda: the loop reads its operands out of order");
  PAX_CHECK(g.outputs.size() == out.size() && g.outputs[0] == j.outvars[0], prim_name(prim),
            " on cuda: the loop writes another value than the result");
  return g.program;
}

// The kernel's source, or nullopt with the reason the renderer gives.
std::optional<CudaKernelSource> try_kernel_source(Prim prim, const Params& params, std::span<const TensorView> in,
                                                  std::span<const TensorView> out, std::string& why) {
  const std::shared_ptr<const LoopProgram> loop = one_equation_loop(prim, params, in, out);
  why = loop ? cuda_loop_problem(*loop) : "fused loops do not compute " + std::string(dtype_short_name(in[0].dtype));
  if (!why.empty()) return std::nullopt;
  return cuda_loop_kernel(*loop, std::string("pax_") + prim_name(prim));
}

}  // namespace

CudaKernelSource elementwise_kernel_source(Prim prim, const Params& params, std::span<const TensorView> in,
                                           std::span<const TensorView> out) {
  std::string why;
  std::optional<CudaKernelSource> k = try_kernel_source(prim, params, in, out, why);
  if (!k) PAX_FAIL(prim_name(prim), " on cuda: no CUDA kernel for these operands (", why, ")");
  return std::move(*k);
}

namespace {

void run_elementwise(Prim prim, const KernelContext& ctx, const Params& params, std::span<const TensorView> in,
                     std::span<const TensorView> out) {
  if (out[0].numel() == 0) return;
  std::string why;
  const std::optional<CudaKernelSource> source = try_kernel_source(prim, params, in, out, why);
  if (!source) {
    const std::string dtypes = std::string(dtype_short_name(in[0].dtype)) + " -> " + dtype_short_name(out[0].dtype);
    cpu::notice_once("cuda-host-" + std::string(prim_name(prim)) + dtypes,
                     std::string(prim_name(prim)) + " of " + dtypes + " on cuda runs on the host (" + why + ")");
    return run_on_host(prim, ctx, params, in, out);
  }
  const CudaKernelSource& k = *source;
  std::vector<void*> pointers;
  for (const TensorView& v : in) pointers.push_back(v.data);
  for (const TensorView& v : out) pointers.push_back(v.data);
  launch_kernel(loaded(k, ctx.device.index).fn, k, pointers, static_cast<cudaStream_t>(ctx.stream));
}

template <Prim P>
void elementwise_kernel(const KernelContext& ctx, const Params& params, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  run_elementwise(P, ctx, params, in, out);
}

// Every primitive computed by an elementwise operation (prims.def's kernel
// column), whatever its dtypes: those the renderer cannot write are refused
// by name when called. select_n has a kernel of its own (any number of
// cases, an int32 selector: kernels_indexing.cu).
bool register_elementwise() {
  // clang-format off
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) \
  if (prim_kernel(Prim::id).kind != ElementwiseKernel::Kind::none && Prim::id != Prim::select_n) \
    register_cuda_kernels({{Prim::id, elementwise_kernel<Prim::id>}});
  // clang-format on
#include "pax/ir/prims.def"
#undef PAX_PRIM
  return true;
}

[[maybe_unused]] const bool kRegistered = register_elementwise();

}  // namespace
}  // namespace pax::cuda

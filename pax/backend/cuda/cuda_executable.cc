// The CUDA executable: the backend-neutral lowering (fused groups, row
// sweeps, kernels) run on the device's stream. Fused groups and row sweeps
// run as generated kernels (cuda_kernels_source.h), compiled by NVRTC in the
// background while the program starts; until one is ready, and for groups
// the renderer cannot write, their equations run one kernel each. Other
// steps run the device's kernel of their primitive, aliases share bytes,
// and impl steps run their rule on the device.
//
// Every value gets a buffer of the caching allocator, returned after its
// last reader is queued (the stream orders the reuse), so nothing waits for
// the device until the host reads a result.
#include "pax/backend/cuda/cuda_executable.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "pax/backend/backend.h"
#include "pax/backend/cuda/cuda_backend.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/cuda_lowering_target.h"
#include "pax/backend/cuda/nvrtc_compiler.h"
#include "pax/compile/lower.h"
#include "pax/core/device_put.h"
#include "pax/core/error.h"
#include "pax/interp/interpreter.h"

namespace pax::cuda {
namespace {

// A generated kernel: its source, and its CUBIN once NVRTC has built it.
struct Generated {
  CudaKernelSource source;
  CubinFuture cubin;
  mutable std::once_flag load_once;
  mutable std::unique_ptr<CudaKernelLibrary> library;
  mutable cudaKernel_t fn = nullptr;

  // The kernel when it is built (loaded on first use), else nullptr.
  cudaKernel_t ready() const {
    if (!cubin.valid() || !cubin.ready()) return nullptr;
    std::call_once(load_once, [this] {
      library = std::make_unique<CudaKernelLibrary>(*cubin.get());
      fn = library->kernel(source.name);
    });
    return fn;
  }
};

class CudaExecutable : public Executable {
 public:
  CudaExecutable(JaxprPtr jaxpr, const CompileOptions& options, Device device)
      : lp_(lower(jaxpr, options, cuda_lowering_target())), device_(device) {
    const int arch = device_info(device.index).arch;
    for (const FusionGroup& g : lp_.schedule.groups) {
      std::unique_ptr<Generated> gen;
      if (g.program && cuda_renders(*g.program)) {
        gen = std::make_unique<Generated>();
        gen->source = cuda_loop_kernel(*g.program);
        gen->cubin = compile_cubin_async(gen->source.source, arch);
      }
      group_kernels_.push_back(std::move(gen));
    }
    for (const RowSweep& sw : lp_.schedule.sweeps) {
      const std::vector<CudaSweepLoop> loops = cuda_sweep_loops(lp_.jaxpr, lp_.schedule, sw);
      std::unique_ptr<Generated> gen;
      if (cuda_sweep_problem(loops, sw.rows, sw.row_len).empty()) {
        gen = std::make_unique<Generated>();
        gen->source = cuda_sweep_kernel(loops, sw.rows, sw.row_len);
        gen->cubin = compile_cubin_async(gen->source.source, arch);
      }
      sweep_kernels_.push_back(std::move(gen));
    }
    // The constants live on the device from now on.
    for (const Array& c : lp_.jaxpr.consts) consts_.push_back(device_put(c, device_));
    // The last step reading each value: its buffer is given back after it.
    last_use_.assign(lp_.jaxpr.avals.size(), -1);
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k)
      for (Var v : lp_.schedule.inputs(lp_.jaxpr, lp_.schedule.steps[k])) last_use_[size_t(v)] = int(k);
    for (Var v : lp_.jaxpr.outvars) last_use_[size_t(v)] = int(lp_.schedule.steps.size());
  }

  std::vector<Array> run(std::vector<Array> args) const override {
    const Jaxpr& src = *lp_.source;
    PAX_CHECK(args.size() == src.invars.size(), "executable: takes ", src.invars.size(), " arguments, got ",
              args.size());
    bool committed = false;
    for (size_t i = lp_.skip; i < args.size(); ++i) {
      const AVal& want = src.aval(src.invars[i]);
      PAX_CHECK(args[i].defined() && args[i].shape() == want.shape && args[i].dtype() == want.dtype,
                "executable: argument ", i, " is ", args[i].defined() ? args[i].aval().str() : "undefined",
                " but the program expects ", want.str());
      PAX_CHECK(args[i].is_concrete(), "executable: argument ", i, " is a tracer of ", args[i].tracer()->owner(),
                "; executables run on concrete arrays");
      committed = committed || args[i].committed();
    }
    std::vector<Array> own(args.begin() + std::ptrdiff_t(lp_.skip), args.end());
    bring_arguments(own, device_, "executable");
    const DefaultDeviceScope on_device(device_);
    const Jaxpr& j = lp_.jaxpr;
    std::vector<Array> values(j.avals.size());
    for (size_t i = 0; i < j.invars.size(); ++i) values[size_t(j.invars[i])] = std::move(own[i]);
    for (size_t i = 0; i < j.constvars.size(); ++i) values[size_t(j.constvars[i])] = consts_[i];

    const std::vector<int> sweep_of = lp_.schedule.sweep_of_steps();
    // Per sweep: whether its kernel ran at its first step (decided there, so
    // that a kernel finishing its build mid-sweep does not skip steps).
    std::vector<bool> swept(lp_.schedule.sweeps.size(), false);
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k) {
      const int sw = sweep_of[k];
      if (sw >= 0) {
        const RowSweep& sweep = lp_.schedule.sweeps[size_t(sw)];
        const Generated* gen = sweep_kernels_[size_t(sw)].get();
        if (k == sweep.first && gen) {
          if (cudaKernel_t fn = gen->ready()) {
            run_sweep(sweep, fn, *gen, values);
            swept[size_t(sw)] = true;
          }
        }
        if (swept[size_t(sw)]) {
          release(values, k);
          continue;
        }
      }
      run_step(lp_.schedule.steps[k], values);
      release(values, k);
    }
    std::vector<Array> out;
    for (Var v : j.outvars) {
      Array a = values[size_t(v)];
      if (committed && !a.committed()) a = Array(a.aval(), a.buffer(), true);
      out.push_back(std::move(a));
    }
    return out;
  }

  Device device() const override { return device_; }
  std::string str() const override { return lp_.schedule.str(lp_.jaxpr) + "\n" + lp_.plan.str(); }
  const Jaxpr& optimized_jaxpr() const override { return lp_.jaxpr; }
  CostAnalysis cost() const override { return lp_.cost; }
  const MemoryStats& memory() const override { return lp_.plan.stats; }

 private:
  Array fresh(Var v) const {
    const AVal& a = lp_.jaxpr.aval(v);
    return Array(a, Buffer::allocate_on(device_, size_t(a.shape.numel()) * itemsize(a.dtype)), false);
  }

  void release(std::vector<Array>& values, size_t step) const {
    for (Var v : lp_.schedule.inputs(lp_.jaxpr, lp_.schedule.steps[step]))
      if (last_use_[size_t(v)] == int(step)) values[size_t(v)] = Array();
  }

  // One equation through the device's eager path (its kernel or its rule).
  void run_eqn(const Eqn& e, std::vector<Array>& values) const {
    std::vector<Array> in;
    for (Var v : e.inputs) in.push_back(values[size_t(v)]);
    std::vector<Array> out = eager_apply(e.prim, in, e.params);
    for (size_t i = 0; i < e.outputs.size(); ++i) values[size_t(e.outputs[i])] = std::move(out[i]);
  }

  void run_step(const Step& st, std::vector<Array>& values) const {
    const Jaxpr& j = lp_.jaxpr;
    if (st.kind != Step::Kind::fused) {
      const Eqn& e = j.eqns[st.index];
      if (st.kind == Step::Kind::alias) {
        const Array& x = values[size_t(e.inputs[0])];
        values[size_t(e.outputs[0])] = Array(j.aval(e.outputs[0]), x.buffer(), x.committed());
        return;
      }
      run_eqn(e, values);
      return;
    }
    const FusionGroup& g = lp_.schedule.groups[st.index];
    const Generated* gen = group_kernels_[st.index].get();
    cudaKernel_t fn = gen ? gen->ready() : nullptr;
    if (!fn) {
      // Not built yet, or not renderable: the group's equations one by one.
      for (size_t e : g.eqns) run_eqn(j.eqns[e], values);
      return;
    }
    std::vector<void*> pointers;
    for (Var v : g.inputs) pointers.push_back(values[size_t(v)].buffer()->data());
    for (Var v : g.outputs) {
      values[size_t(v)] = fresh(v);
      pointers.push_back(values[size_t(v)].buffer()->data());
    }
    launch_kernel(fn, gen->source, pointers, stream());
  }

  void run_sweep(const RowSweep& sw, cudaKernel_t fn, const Generated& gen, std::vector<Array>& values) const {
    const Jaxpr& j = lp_.jaxpr;
    std::vector<void*> pointers;
    for (size_t k = sw.first; k <= sw.last; ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (st.kind == Step::Kind::alias) {
        run_step(st, values);
        continue;
      }
      for (Var v : lp_.schedule.inputs(j, st)) pointers.push_back(values[size_t(v)].buffer()->data());
      for (Var v : lp_.schedule.outputs(j, st)) {
        values[size_t(v)] = fresh(v);
        pointers.push_back(values[size_t(v)].buffer()->data());
      }
    }
    launch_kernel(fn, gen.source, pointers, stream());
  }

  cudaStream_t stream() const { return device_state(device_.index).stream; }

  LoweredProgram lp_;
  Device device_;
  std::vector<std::unique_ptr<Generated>> group_kernels_, sweep_kernels_;
  std::vector<Array> consts_;
  std::vector<int> last_use_;
};

}  // namespace

std::shared_ptr<Executable> compile_for_cuda(JaxprPtr jaxpr, const CompileOptions& options, Device device) {
  return std::make_shared<CudaExecutable>(std::move(jaxpr), options, device);
}

}  // namespace pax::cuda

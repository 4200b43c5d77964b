// The CUDA executable: the backend-neutral lowering (fused groups, row
// sweeps, kernels) run on the device's stream. Fused groups and row sweeps
// run as generated kernels (cuda_kernels_source.h), compiled by NVRTC in the
// background while the program starts; until one is ready, and for groups
// the renderer cannot write, their equations run one kernel each. Other
// steps run the device's kernel of their primitive, aliases share bytes,
// and impl steps run their rule on the device.
//
// Memory follows the lowering's plan (memory_plan.h): intermediates live in
// one arena that the executable keeps from call to call (its addresses are
// stable; a call made while another thread's call holds it gets an arena of
// its own), outputs and values the rules see as Arrays get buffers of the
// caching allocator, and an output may take a donated argument's buffer
// when the caller held its only handle. Kernel steps write into their
// planned memory, a product whose transpose was folded into it with the
// strides the lowering gave it. Everything is queued on the device's one
// stream, so nothing waits for the device until the host reads a result
// (except while a trace is recorded: each step is then timed on the stream
// by CUDA events, stream_spans.h).
#include "pax/backend/cuda/cuda_executable.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "pax/backend/backend.h"
#include "pax/backend/cuda/cuda_backend.h"
#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/cuda_lowering_target.h"
#include "pax/backend/cuda/nvrtc_compiler.h"
#include "pax/backend/cuda/stream_spans.h"
#include "pax/compile/lower.h"
#include "pax/compile/step_labels.h"
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
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k) {
      const Step& st = lp_.schedule.steps[k];
      kernels_.push_back(st.kind == Step::Kind::kernel ? cuda_kernel(lp_.jaxpr.eqns[st.index].prim) : nullptr);
    }
    labels_ = label_steps(lp_.jaxpr, lp_.schedule);
    donates_.assign(lp_.plan.storages.size(), false);
    for (const Storage& st : lp_.plan.storages) {
      if (st.donor < 0) continue;
      const int arg = lp_.plan.storage_of[size_t(lp_.jaxpr.invars[size_t(st.donor)])];
      if (arg >= 0) donates_[size_t(arg)] = true;
    }
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
    std::vector<Array> own(std::make_move_iterator(args.begin() + std::ptrdiff_t(lp_.skip)),
                           std::make_move_iterator(args.end()));
    args.clear();  // the call holds the only references it keeps
    bring_arguments(own, device_, "executable");
    const DefaultDeviceScope on_device(device_);
    const DeviceGuard current(device_.index);  // kernels launched here go to its stream
    const Jaxpr& j = lp_.jaxpr;
    Frame f;
    f.values.resize(j.avals.size());
    f.donated.assign(lp_.plan.storages.size(), false);
    for (size_t i = 0; i < j.invars.size(); ++i) {
      const int id = lp_.plan.storage_of[size_t(j.invars[i])];
      if (id >= 0) f.donated[size_t(id)] = donates_[size_t(id)] && own[i].owns_buffer_exclusively();
      f.values[size_t(j.invars[i])] = std::move(own[i]);
    }
    for (size_t i = 0; i < j.constvars.size(); ++i) f.values[size_t(j.constvars[i])] = consts_[i];
    const ArenaLease arena(*this);
    f.arena = arena.data();
    std::vector<Array>& values = f.values;

    const std::vector<int> sweep_of = lp_.schedule.sweep_of_steps();
    // Per sweep: whether its kernel ran at its first step (decided there, so
    // that a kernel finishing its build mid-sweep does not skip steps).
    std::vector<bool> swept(lp_.schedule.sweeps.size(), false);
    StreamSpans spans(device_.index, stream());  // while a trace is recorded: each step's time on the stream
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k) {
      const int sw = sweep_of[k];
      if (sw >= 0) {
        const RowSweep& sweep = lp_.schedule.sweeps[size_t(sw)];
        const Generated* gen = sweep_kernels_[size_t(sw)].get();
        if (k == sweep.first && gen) {
          if (cudaKernel_t fn = gen->ready()) {
            spans.begin();
            run_sweep(sweep, fn, *gen, f);
            spans.end("sweep", labels_.sweeps[size_t(sw)]);
            swept[size_t(sw)] = true;
          }
        }
        if (swept[size_t(sw)]) {
          end_donations(f, k);
          release(f, k);
          continue;
        }
      }
      const bool traced = spans.active() && lp_.schedule.steps[k].kind != Step::Kind::alias;
      if (traced) spans.begin();
      run_step(k, f);
      if (traced) spans.end(labels_.categories[k], labels_.steps[k]);
      end_donations(f, k);
      release(f, k);
    }
    spans.finish();
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
  // The values of one call, per variable, and the arguments whose buffer an
  // output may still take (per storage).
  struct Frame {
    std::vector<Array> values;
    std::vector<bool> donated;
    char* arena = nullptr;
  };

  // The executable's arena for one call: its own when no other call holds
  // it, otherwise one for this call alone.
  class ArenaLease {
   public:
    explicit ArenaLease(const CudaExecutable& e) : e_(e) {
      const size_t nbytes = e.lp_.plan.stats.arena_bytes;
      if (nbytes == 0) return;
      const AllocationPurpose purpose("a compiled program's intermediates (its arena)");
      std::lock_guard<std::mutex> lock(e.arena_mu_);
      if (!e.arena_busy_) {
        if (!e.arena_) e.arena_ = Buffer::allocate_on(e.device_, nbytes);
        e.arena_busy_ = true;
        shared_ = true;
        data_ = static_cast<char*>(e.arena_->data());
      } else {
        own_ = Buffer::allocate_on(e.device_, nbytes);
        data_ = static_cast<char*>(own_->data());
      }
    }
    ~ArenaLease() {
      if (!shared_) return;
      std::lock_guard<std::mutex> lock(e_.arena_mu_);
      e_.arena_busy_ = false;  // the next call's work queues after this one's
    }
    ArenaLease(const ArenaLease&) = delete;
    ArenaLease& operator=(const ArenaLease&) = delete;
    char* data() const { return data_; }

   private:
    const CudaExecutable& e_;
    bool shared_ = false;
    std::shared_ptr<Buffer> own_;
    char* data_ = nullptr;
  };

  Array fresh(Var v) const {
    const AVal& a = lp_.jaxpr.aval(v);
    return Array(a, Buffer::allocate_on(device_, size_t(a.shape.numel()) * itemsize(a.dtype)), false);
  }

  // The memory the plan gives `v`, written by the step that defines it: an
  // arena slice, a donated argument's buffer, or a buffer of its own.
  Array materialize(Frame& f, Var v) const {
    const int id = lp_.plan.storage_of[size_t(v)];
    if (id < 0) return fresh(v);
    const Storage& st = lp_.plan.storages[size_t(id)];
    const AVal& a = lp_.jaxpr.aval(v);
    if (st.kind == Storage::Kind::arena && f.arena) {
      // A view of the arena: the arena outlives the call's values, and
      // releasing the view gives nothing back.
      auto view = Buffer::wrap(f.arena + st.offset, size_t(a.shape.numel()) * itemsize(a.dtype), st.nbytes, device_,
                               [](void*, size_t, Device) {});
      return Array(a, std::move(view), false);
    }
    if (st.donor >= 0) {
      const Var arg = lp_.jaxpr.invars[size_t(st.donor)];
      const int arg_id = lp_.plan.storage_of[size_t(arg)];
      if (arg_id >= 0 && f.donated[size_t(arg_id)]) {
        f.donated[size_t(arg_id)] = false;
        const Array& x = f.values[size_t(arg)];
        if (x.defined() && only_the_argument_holds(f, x.buffer(), arg_id)) return Array(a, x.buffer(), false);
      }
    }
    return fresh(v);
  }

  // Whether the only handles to a donated argument's buffer are values of
  // its own storage (the argument and its reshapes, dead or read in place
  // by the plan) or of none (a group's intermediates run one by one): a
  // value of any other storage (a rule's result that returns its input)
  // still needs the bytes.
  bool only_the_argument_holds(const Frame& f, const std::shared_ptr<Buffer>& buffer, int arg_id) const {
    long handles = 0;
    for (size_t v = 0; v < f.values.size(); ++v) {
      if (!f.values[v].defined() || f.values[v].buffer() != buffer) continue;
      const int id = lp_.plan.storage_of[v];
      if (id != arg_id && id >= 0) return false;
      ++handles;
    }
    return buffer.use_count() <= handles;
  }

  // Drops the values whose last reader is step `k`; an argument an output
  // may still take is kept for it (its reshapes are not).
  void release(Frame& f, size_t k) const {
    for (Var v : lp_.schedule.inputs(lp_.jaxpr, lp_.schedule.steps[k])) {
      if (last_use_[size_t(v)] != int(k)) continue;
      const int id = lp_.plan.storage_of[size_t(v)];
      if (id >= 0 && f.donated[size_t(id)] && lp_.plan.storages[size_t(id)].var == v) continue;
      f.values[size_t(v)] = Array();
    }
  }

  // After step `k`: a donation its outputs were planned to take is over,
  // whichever way the step ran.
  void end_donations(Frame& f, size_t k) const {
    for (Var v : lp_.schedule.outputs(lp_.jaxpr, lp_.schedule.steps[k])) {
      const int id = lp_.plan.storage_of[size_t(v)];
      if (id < 0 || lp_.plan.storages[size_t(id)].donor < 0) continue;
      const int arg = lp_.plan.storage_of[size_t(lp_.jaxpr.invars[size_t(lp_.plan.storages[size_t(id)].donor)])];
      if (arg >= 0) f.donated[size_t(arg)] = false;
    }
  }

  // One equation through the device's eager path (its kernel or its rule).
  void run_eqn(const Eqn& e, std::vector<Array>& values) const {
    std::vector<Array> in;
    for (Var v : e.inputs) in.push_back(values[size_t(v)]);
    std::vector<Array> out = eager_apply(e.prim, in, e.params);
    for (size_t i = 0; i < e.outputs.size(); ++i) values[size_t(e.outputs[i])] = std::move(out[i]);
  }

  // A kernel step into its planned memory (a folded transpose's product with
  // the strides the lowering gave it).
  void run_kernel(size_t k, Frame& f) const {
    const Eqn& e = lp_.jaxpr.eqns[lp_.schedule.steps[k].index];
    std::vector<TensorView> in, out;
    for (Var v : e.inputs) {
      const Array& x = f.values[size_t(v)];
      in.push_back(TensorView{x.buffer()->data(), &lp_.jaxpr.aval(v).shape, x.dtype()});
    }
    for (Var v : e.outputs) {
      f.values[size_t(v)] = materialize(f, v);
      const AVal& a = lp_.jaxpr.aval(v);
      out.push_back(TensorView{f.values[size_t(v)].buffer()->data(), &a.shape, a.dtype});
    }
    if (!lp_.out_strides[k].empty()) out[0].strides = &lp_.out_strides[k];
    kernels_[k](device_state(device_.index).kernel_context, e.params, in, out);
  }

  void run_step(size_t k, Frame& f) const {
    const Step& st = lp_.schedule.steps[k];
    const Jaxpr& j = lp_.jaxpr;
    std::vector<Array>& values = f.values;
    if (st.kind != Step::Kind::fused) {
      const Eqn& e = j.eqns[st.index];
      if (st.kind == Step::Kind::alias) {
        const Array& x = values[size_t(e.inputs[0])];
        values[size_t(e.outputs[0])] = Array(j.aval(e.outputs[0]), x.buffer(), x.committed());
        return;
      }
      if (kernels_[k]) return run_kernel(k, f);
      PAX_CHECK(lp_.out_strides[k].empty(), "cuda executable: no kernel writes ", prim_name(e.prim), " with strides");
      run_eqn(e, values);
      return;
    }
    const FusionGroup& g = lp_.schedule.groups[st.index];
    const Generated* gen = group_kernels_[st.index].get();
    cudaKernel_t fn = gen ? gen->ready() : nullptr;
    if (!fn) {
      // Not built yet, or not renderable: the group's equations one by one
      // (their results in buffers of their own); its intermediates go after.
      for (size_t e : g.eqns) run_eqn(j.eqns[e], values);
      for (size_t e : g.eqns)
        for (Var v : j.eqns[e].outputs)
          if (std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end()) values[size_t(v)] = Array();
      return;
    }
    std::vector<void*> pointers;
    for (Var v : g.inputs) pointers.push_back(values[size_t(v)].buffer()->data());
    for (Var v : g.outputs) {
      values[size_t(v)] = materialize(f, v);
      pointers.push_back(values[size_t(v)].buffer()->data());
    }
    launch_kernel(fn, gen->source, pointers, stream());
  }

  // A row sweep as one kernel. Values the CPU's plan keeps in a sweep's
  // tile buffers (sweep_local) take buffers of their own here: the kernel
  // writes every step's result.
  void run_sweep(const RowSweep& sw, cudaKernel_t fn, const Generated& gen, Frame& f) const {
    const Jaxpr& j = lp_.jaxpr;
    std::vector<void*> pointers;
    for (size_t k = sw.first; k <= sw.last; ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (st.kind == Step::Kind::alias) {
        run_step(k, f);
        continue;
      }
      for (Var v : lp_.schedule.inputs(j, st)) pointers.push_back(f.values[size_t(v)].buffer()->data());
      for (Var v : lp_.schedule.outputs(j, st)) {
        const int id = lp_.plan.storage_of[size_t(v)];
        const bool local = id >= 0 && lp_.plan.storages[size_t(id)].kind == Storage::Kind::sweep_local;
        f.values[size_t(v)] = local ? fresh(v) : materialize(f, v);
        pointers.push_back(f.values[size_t(v)].buffer()->data());
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
  std::vector<KernelFn> kernels_;  // per step: the device's kernel of a kernel step
  std::vector<bool> donates_;      // per storage: an argument some output may take
  StepLabels labels_;              // the steps' and sweeps' names in traces
  mutable std::mutex arena_mu_;
  mutable std::shared_ptr<Buffer> arena_;  // kept from call to call
  mutable bool arena_busy_ = false;
};

}  // namespace

std::shared_ptr<Executable> compile_for_cuda(JaxprPtr jaxpr, const CompileOptions& options, Device device) {
  return std::make_shared<CudaExecutable>(std::move(jaxpr), options, device);
}

}  // namespace pax::cuda

// The CPU backend's executable: runs a lowered program (pax/compile/lower.h)
// over one arena per call, its fused loops prepared for the CPU
// (fused_loop.h) and its kernels from the CPU's table (with PAX_PROFILE=1 in
// the environment, timing every step; see step_profile.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cpu/cpu_backend.h"
#include "pax/backend/cpu/fused_codegen.h"
#include "pax/backend/cpu/fused_loop.h"
#include "pax/backend/cpu/step_profile.h"
#include "pax/compile/lower.h"
#include "pax/compile/step_labels.h"
#include "pax/core/env_switch.h"
#include "pax/core/error.h"
#include "pax/core/trace.h"
#include "pax/interp/collective_thread.h"
#include "pax/interp/interpreter.h"
#include "pax/interp/process_axis.h"
#include "pax/prims/registry.h"

namespace pax::cpu {

namespace {

class CpuExecutable : public Executable {
 public:
  CpuExecutable(LoweredProgram lowered, const Backend& backend, Device device, const KernelContext& context)
      : backend_(backend),
        device_(device),
        context_(context),
        source_(std::move(lowered.source)),
        skip_(lowered.skip),
        jaxpr_(std::move(lowered.jaxpr)),
        schedule_(std::move(lowered.schedule)),
        plan_(std::move(lowered.plan)),
        cost_(lowered.cost),
        out_strides_(std::move(lowered.out_strides)) {
    sweep_at_ = schedule_.sweep_of_steps();
    // Each fused loop prepared for the CPU; their machine code is built on
    // the compiler thread (or now, with PAX_COMPILE=sync), and they run
    // interpreted until it is published.
    for (const FusionGroup& g : schedule_.groups) {
      auto program = std::make_shared<cpu::FusedLoop>(*g.program);
      program->finalize();
      fused_.push_back(std::move(program));
    }
    cpu::compile_fused_programs(fused_);
    donor_.assign(jaxpr_.invars.size(), false);
    for (const Storage& st : plan_.storages) {
      if (st.donor >= 0) donor_[size_t(st.donor)] = true;
    }
    plan_sweep_locals();
    kernels_.assign(schedule_.steps.size(), nullptr);
    for (size_t s = 0; s < schedule_.steps.size(); ++s) {
      const Step& step = schedule_.steps[s];
      if (step.kind != Step::Kind::kernel) continue;
      const Prim p = jaxpr_.eqns[step.index].prim;
      kernels_[s] = cpu::cpu_kernel(p);
      PAX_CHECK(kernels_[s], prim_name(p), ": primitive has no kernel on the cpu backend");
    }
    out_avals_ = source_->out_avals();
    started_.assign(schedule_.steps.size(), false);
    std::vector<int64_t> position(jaxpr_.eqns.size(), -1);
    for (size_t e = 0, k = 0; e < jaxpr_.eqns.size(); ++e)
      if (moves_data(jaxpr_.eqns[e].prim)) position[e] = int64_t(k++);
    position_.assign(schedule_.steps.size(), -1);
    for (size_t s = 0; s < schedule_.steps.size(); ++s) {
      const Step& step = schedule_.steps[s];
      started_[s] = step.kind == Step::Kind::impl && moves_data(jaxpr_.eqns[step.index].prim);
      if (started_[s]) position_[s] = position[step.index];
    }
    // Labels for PAX_PROFILE and traces (which a run may start at any step).
    StepLabels labels = label_steps(jaxpr_, schedule_);
    labels_ = std::move(labels.steps);
    categories_ = std::move(labels.categories);
    for (size_t i = 0; i < schedule_.sweeps.size(); ++i) {  // a sweep's steps run as one, at its first
      labels_[schedule_.sweeps[i].first] = std::move(labels.sweeps[i]);
      categories_[schedule_.sweeps[i].first] = "sweep";
    }
    if (env_switch("PAX_DUMP_SCHEDULE", false)) std::fprintf(stderr, "PAX_DUMP_SCHEDULE:\n%s\n", str().c_str());
  }

  std::vector<Array> run(std::vector<Array> args) const override;
  Device device() const override { return device_; }

  std::string str() const override {
    size_t folded = 0;
    for (const std::vector<int64_t>& st : out_strides_) folded += !st.empty();
    auto notes = [this](size_t g) {
      return std::string(fused_[g]->chain_first >= 0 ? ", chain" : "") + (fused_[g]->wide_bf16 ? ", wide_bf16" : "");
    };
    return schedule_.str(jaxpr_, notes) + "\nmemory: " + plan_.str() +
           (folded ? "\nproducts written transposed: " + std::to_string(folded) : "");
  }
  const Jaxpr& optimized_jaxpr() const override { return jaxpr_; }
  CostAnalysis cost() const override { return cost_; }
  const MemoryStats& memory() const override { return plan_.stats; }

 private:
  // The buffers of one call.
  struct Frame {
    std::vector<void*> base;                    // per storage
    std::vector<std::shared_ptr<Buffer>> held;  // arguments, buffers, outputs
    std::vector<bool> donated;                  // arguments whose buffer an output may take
    std::shared_ptr<Buffer> arena;
    // Collectives started and not yet waited for: per step, and per storage
    // the step whose pending result it will hold (-1: none).
    std::vector<PendingCollectivePtr> pending;
    std::vector<int> pending_step;
  };

  void check_args(const std::vector<Array>& args) const;
  void* ptr(const Frame& f, Var v) const { return f.base[size_t(plan_.storage_of[size_t(v)])]; }
  // Gives a step's output its memory: its arena slice, a donated argument's
  // buffer, or a new buffer.
  void materialize(Frame& f, Var v) const;
  void run_kernel(Frame& f, size_t s) const;
  void run_impl(Frame& f, size_t s) const;
  // A collective step: started on the communication thread; its results are
  // waited for (finish) before the first step that reads them.
  void start_collective_step(Frame& f, size_t s) const;
  void finish(Frame& f, size_t s) const;
  void finish_inputs(Frame& f, size_t s) const;
  void run_fused_step(Frame& f, size_t s) const;
  void run_sweep(Frame& f, size_t sweep) const;
  void plan_sweep_locals();
  const std::shared_ptr<Buffer>& buffer_of(const Frame& f, Var v) const;
  std::shared_ptr<Buffer> allocate(size_t nbytes) const { return backend_.memory.allocate(nbytes, device_.index); }

  const Backend& backend_;  // whose memory its buffers are (the CPU's or the sim device's)
  Device device_;
  // What its kernels and fused loops run with: the scratch they ask for
  // comes from the device the program runs on.
  KernelContext context_;
  JaxprPtr source_;
  size_t skip_ = 0;  // leading arguments bound as constants
  Jaxpr jaxpr_;
  StepSchedule schedule_;
  MemoryPlan plan_;
  CostAnalysis cost_;
  // Per step: the strides its output is written with (a product whose
  // transpose was folded into it), or empty.
  std::vector<std::vector<int64_t>> out_strides_;
  std::vector<std::shared_ptr<const cpu::FusedLoop>> fused_;  // per fusion group, prepared
  std::vector<bool> donor_;                                   // per program input: some output may take its buffer
  std::vector<KernelFn> kernels_;
  std::vector<bool> started_;            // per step: a collective started asynchronously
  std::vector<int64_t> position_;        // per started step: its place among the program's collectives
  std::vector<AVal> out_avals_;          // of the source program's outputs
  std::vector<std::string> labels_;      // per step: operation and shapes (PAX_PROFILE, traces)
  std::vector<const char*> categories_;  // per step, in traces
  std::vector<int> sweep_at_;            // per step: the row sweep it belongs to, or -1
  // Per row sweep: its loops and row reductions, and where they read and
  // write its sweep-local values (cpu::SweepLoop).
  struct SweepPlan {
    std::vector<size_t> loops;                                // steps: fused loops and row reductions
    std::vector<ReduceShape> reductions;                      // per loop: a row reduction step's operation
    std::vector<std::vector<int>> input_local, output_local;  // per loop
    std::vector<size_t> local_widths;
  };
  std::vector<SweepPlan> sweep_plans_;
};

void CpuExecutable::plan_sweep_locals() {
  for (const RowSweep& sw : schedule_.sweeps) {
    SweepPlan sp;
    std::vector<int> local_of(plan_.storages.size(), -1);
    auto local = [&](Var v) {
      const int id = plan_.storage_of[size_t(v)];
      if (plan_.storages[size_t(id)].kind != Storage::Kind::sweep_local) return -1;
      if (local_of[size_t(id)] < 0) {
        local_of[size_t(id)] = int(sp.local_widths.size());
        sp.local_widths.push_back(itemsize(jaxpr_.aval(v).dtype));
      }
      return local_of[size_t(id)];
    };
    for (size_t s = sw.first; s <= sw.last; ++s) {
      const Step& step = schedule_.steps[s];
      if (step.kind == Step::Kind::alias) continue;  // reshapes
      sp.loops.push_back(s);
      if (step.kind == Step::Kind::kernel) {
        const Eqn& e = jaxpr_.eqns[step.index];
        sp.reductions.push_back(*reduce_shape(e, jaxpr_.aval(e.inputs[0])));
      } else {
        sp.reductions.emplace_back();
      }
      sp.output_local.emplace_back();
      for (Var v : schedule_.outputs(jaxpr_, step)) sp.output_local.back().push_back(local(v));
      sp.input_local.emplace_back();
      for (Var v : schedule_.inputs(jaxpr_, step)) sp.input_local.back().push_back(local(v));
      // A local lives in a tile buffer that only contiguous reads of the
      // tile's rows may index (the sweep finder admits no other reads of
      // whole rows); anything else would read outside it.
      if (step.kind != Step::Kind::fused) continue;
      const FusionGroup& g = schedule_.groups[step.index];
      for (const FusedSlot& slot : fused_[step.index]->slots) {
        PAX_CHECK(slot.kind == FusedSlot::Kind::reg || slot.kind == FusedSlot::Kind::input ||
                      sp.input_local.back()[size_t(slot.arg)] < 0,
                  "row sweep: a loop reads the sweep-local value ", var_name(g.inputs[size_t(slot.arg)]),
                  " other than contiguously");
      }
    }
    sweep_plans_.push_back(std::move(sp));
  }
}

void CpuExecutable::check_args(const std::vector<Array>& args) const {
  const Jaxpr& j = *source_;
  PAX_CHECK(args.size() == j.invars.size(), "executable: takes ", j.invars.size(), " arguments, got ", args.size());
  for (size_t i = skip_; i < args.size(); ++i) {
    const AVal& want = j.aval(j.invars[i]);
    PAX_CHECK(args[i].defined() && args[i].shape() == want.shape && args[i].dtype() == want.dtype,
              "executable: argument ", i, " is ", args[i].defined() ? args[i].aval().str() : "undefined",
              " but the program expects ", want.str());
    PAX_CHECK(args[i].is_concrete(), "executable: argument ", i, " is a tracer of ", args[i].tracer()->owner(),
              "; executables run on concrete arrays");
  }
}

void CpuExecutable::materialize(Frame& f, Var v) const {
  const int id = plan_.storage_of[size_t(v)];
  const Storage& st = plan_.storages[size_t(id)];
  if (st.kind == Storage::Kind::arena || st.kind == Storage::Kind::sweep_local) return;
  if (st.donor >= 0) {
    const int arg = plan_.storage_of[size_t(jaxpr_.invars[size_t(st.donor)])];
    // A collective still running may read the argument (it holds a handle):
    // it finishes first.
    if (f.donated[size_t(arg)] && f.held[size_t(arg)].use_count() > 1) {
      for (size_t s = 0; s < f.pending.size(); ++s)
        if (f.pending[s]) finish(f, s);
      if (f.held[size_t(arg)].use_count() > 1) f.donated[size_t(arg)] = false;
    }
    if (f.donated[size_t(arg)]) {
      f.donated[size_t(arg)] = false;
      f.held[size_t(id)] = std::move(f.held[size_t(arg)]);
      f.base[size_t(id)] = f.base[size_t(arg)];
      return;
    }
  }
  f.held[size_t(id)] = allocate(st.nbytes);
  f.base[size_t(id)] = f.held[size_t(id)]->data();
}

void CpuExecutable::run_kernel(Frame& f, size_t s) const {
  const Eqn& e = jaxpr_.eqns[schedule_.steps[s].index];
  std::vector<TensorView> in(e.inputs.size()), out(e.outputs.size());
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const AVal& a = jaxpr_.aval(e.inputs[i]);
    in[i] = TensorView{ptr(f, e.inputs[i]), &a.shape, a.dtype};
  }
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    materialize(f, e.outputs[i]);
    const AVal& a = jaxpr_.aval(e.outputs[i]);
    out[i] = TensorView{ptr(f, e.outputs[i]), &a.shape, a.dtype};
  }
  if (!out_strides_[s].empty()) out[0].strides = &out_strides_[s];
  kernels_[s](context_, e.params, in, out);
}

const std::shared_ptr<Buffer>& CpuExecutable::buffer_of(const Frame& f, Var v) const {
  const int id = plan_.storage_of[size_t(v)];
  const Storage& st = plan_.storages[size_t(id)];
  return st.kind == Storage::Kind::constant ? jaxpr_.consts[size_t(st.index)].buffer() : f.held[size_t(id)];
}

void CpuExecutable::run_impl(Frame& f, size_t s) const {
  const Eqn& e = jaxpr_.eqns[schedule_.steps[s].index];
  std::vector<Array> in;
  for (Var v : e.inputs) in.emplace_back(jaxpr_.aval(v), buffer_of(f, v));
  std::vector<Array> out = eager_apply(e.prim, in, e.params);
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    const int id = plan_.storage_of[size_t(e.outputs[i])];
    f.held[size_t(id)] = out[i].buffer();
    f.base[size_t(id)] = f.held[size_t(id)]->data();
  }
}

void CpuExecutable::start_collective_step(Frame& f, size_t s) const {
  const Eqn& e = jaxpr_.eqns[schedule_.steps[s].index];
  std::vector<Array> in;
  for (Var v : e.inputs) in.emplace_back(jaxpr_.aval(v), buffer_of(f, v));
  // The axis is looked up (and a group for it made) here, in program order,
  // never on the communication thread.
  if (e.params.has("axis_name")) (void)find_process_axis(e.params.s("axis_name"));
  f.pending[s] = start_collective([prim = e.prim, params = e.params, in = std::move(in), at = position_[s],
                                   label = trace::active() ? labels_[s] : std::string()]() mutable {
    if (!label.empty()) trace::set_thread_name("communication");
    const trace::Span span("collective", label);
    CollectivePosition position(at);
    std::vector<Array> out = eager_apply(prim, in, params);
    in.clear();  // released before the handle says it has finished
    return out;
  });
  for (Var v : e.outputs) f.pending_step[size_t(plan_.storage_of[size_t(v)])] = int(s);
}

void CpuExecutable::finish(Frame& f, size_t s) const {
  const Eqn& e = jaxpr_.eqns[schedule_.steps[s].index];
  const trace::Span waited("collective", trace::active() ? "wait for " + labels_[s] : std::string());
  const std::vector<Array> out = std::exchange(f.pending[s], nullptr)->wait();
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    const int id = plan_.storage_of[size_t(e.outputs[i])];
    f.pending_step[size_t(id)] = -1;
    f.held[size_t(id)] = out[i].buffer();
    f.base[size_t(id)] = f.held[size_t(id)]->data();
  }
}

void CpuExecutable::finish_inputs(Frame& f, size_t s) const {
  const int sweep = sweep_at_[s];
  const size_t first = sweep >= 0 ? schedule_.sweeps[size_t(sweep)].first : s;
  const size_t last = sweep >= 0 ? schedule_.sweeps[size_t(sweep)].last : s;
  for (size_t k = first; k <= last; ++k) {
    for (Var v : schedule_.inputs(jaxpr_, schedule_.steps[k])) {
      const int id = plan_.storage_of[size_t(v)];
      if (id >= 0 && f.pending_step[size_t(id)] >= 0) finish(f, size_t(f.pending_step[size_t(id)]));
    }
  }
}

void CpuExecutable::run_fused_step(Frame& f, size_t s) const {
  const FusionGroup& g = schedule_.groups[schedule_.steps[s].index];
  std::vector<const void*> in(g.inputs.size());
  std::vector<void*> out(g.outputs.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) in[i] = ptr(f, g.inputs[i]);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    materialize(f, g.outputs[i]);
    out[i] = ptr(f, g.outputs[i]);
  }
  cpu::run_fused(context_, *fused_[schedule_.steps[s].index], in, out);
}

void CpuExecutable::run_sweep(Frame& f, size_t sweep) const {
  const SweepPlan& sp = sweep_plans_[sweep];
  const size_t n = sp.loops.size();
  std::vector<std::vector<const void*>> in(n);
  std::vector<std::vector<void*>> out(n);
  std::vector<cpu::SweepLoop> loops;
  for (size_t k = 0; k < n; ++k) {
    const Step& step = schedule_.steps[sp.loops[k]];
    const std::vector<Var> outputs = schedule_.outputs(jaxpr_, step);
    for (Var v : outputs) {
      materialize(f, v);
      out[k].push_back(ptr(f, v));  // null for sweep-local values
    }
    for (Var v : schedule_.inputs(jaxpr_, step)) in[k].push_back(ptr(f, v));
    cpu::SweepLoop loop{nullptr, ReduceOp::sum, DType::f32, in[k], out[k], sp.input_local[k], sp.output_local[k]};
    if (step.kind == Step::Kind::fused) {
      loop.program = fused_[step.index].get();
    } else {
      loop.reduce_op = sp.reductions[k].op;
      loop.reduce_dtype = jaxpr_.aval(jaxpr_.eqns[step.index].inputs[0]).dtype;
    }
    loops.push_back(loop);
  }
  const RowSweep& sw = schedule_.sweeps[sweep];
  cpu::run_row_sweep(context_, loops, sw.rows, sw.row_len, sp.local_widths);
}

std::vector<Array> CpuExecutable::run(std::vector<Array> args) const {
  check_args(args);
  bring_arguments(args, device_, "executable");
  bool committed = false;
  for (const Array& a : args) committed = committed || a.committed();
  const size_t n = plan_.storages.size();
  Frame f{std::vector<void*>(n, nullptr),
          std::vector<std::shared_ptr<Buffer>>(n),
          std::vector<bool>(n, false),
          {},
          std::vector<PendingCollectivePtr>(schedule_.steps.size()),
          std::vector<int>(n, -1)};
  if (plan_.stats.arena_bytes > 0) {
    const AllocationPurpose purpose("a compiled program's intermediates (its arena)");
    f.arena = allocate(plan_.stats.arena_bytes);
  }
  for (size_t id = 0; id < n; ++id) {
    const Storage& st = plan_.storages[id];
    if (st.kind == Storage::Kind::arena) {
      f.base[id] = f.arena ? static_cast<char*>(f.arena->data()) + st.offset : nullptr;
    } else if (st.kind == Storage::Kind::constant) {
      f.base[id] = jaxpr_.consts[size_t(st.index)].buffer()->data();
    }
  }
  for (size_t i = 0; i < jaxpr_.invars.size(); ++i) {
    Array& x = args[skip_ + i];
    const size_t id = size_t(plan_.storage_of[size_t(jaxpr_.invars[i])]);
    f.donated[id] = donor_[i] && x.owns_buffer_exclusively();
    f.held[id] = x.buffer();
    f.base[id] = x.buffer()->data();
  }
  args.clear();  // the frame holds the only references this call keeps
  // A failure leaves no collective of this call running: they finish (their
  // own failures secondary) before the error goes up.
  struct WaitForStarted {
    Frame& f;
    ~WaitForStarted() {
      for (PendingCollectivePtr& p : f.pending) {
        if (!p) continue;
        try {
          p->wait();
        } catch (...) {
        }
      }
    }
  } wait_for_started{f};
  // PAX_PROFILE's table and traces time the same spans.
  StepProfile* profile = StepProfile::get();
  const bool tracing = trace::active();
  for (size_t s = 0; s < schedule_.steps.size(); ++s) {
    const double start = profile || tracing ? trace::now_us() : 0.0;
    const int sweep = sweep_at_[s];
    // A reshape of a collective's result shares its bytes: its readers wait.
    if (sweep < 0 ? schedule_.steps[s].kind != Step::Kind::alias : schedule_.sweeps[size_t(sweep)].first == s)
      finish_inputs(f, s);
    if (sweep >= 0) {
      // The sweep's steps run together at its first; its later steps only release.
      if (schedule_.sweeps[size_t(sweep)].first == s) run_sweep(f, size_t(sweep));
    } else if (started_[s]) {
      start_collective_step(f, s);
    } else {
      switch (schedule_.steps[s].kind) {
        case Step::Kind::kernel: run_kernel(f, s); break;
        case Step::Kind::impl: run_impl(f, s); break;
        case Step::Kind::fused: run_fused_step(f, s); break;
        case Step::Kind::alias: break;
      }
    }
    if ((profile || tracing) && schedule_.steps[s].kind != Step::Kind::alias &&
        (sweep < 0 || schedule_.sweeps[size_t(sweep)].first == s)) {
      if (profile) profile->add(labels_[s], (trace::now_us() - start) * 1e-6);
      if (tracing) trace::complete(started_[s] ? "collective" : categories_[s], labels_[s], start);
    }
    for (int id : plan_.release_after[s]) {
      if (f.donated[size_t(id)]) continue;  // kept for the output that takes it
      if (f.pending_step[size_t(id)] >= 0) finish(f, size_t(f.pending_step[size_t(id)]));
      f.held[size_t(id)].reset();
    }
  }
  // Every collective is waited for before the call returns, in start order.
  for (size_t s = 0; s < schedule_.steps.size(); ++s)
    if (f.pending[s]) finish(f, s);
  std::vector<Array> out;
  out.reserve(jaxpr_.outvars.size());
  for (size_t k = 0; k < jaxpr_.outvars.size(); ++k)
    out.emplace_back(out_avals_[k], buffer_of(f, jaxpr_.outvars[k]), committed);
  return out;
}

}  // namespace

std::shared_ptr<Executable> compile_cpu_program(JaxprPtr jaxpr, const CompileOptions& options, const Backend& memory,
                                                Device device, const KernelContext& context) {
  // The program's own operations (folded constants) are made where it runs.
  const DefaultDeviceScope on_device(device);
  return std::make_shared<CpuExecutable>(lower(std::move(jaxpr), options, cpu_lowering_target()), memory, device,
                                         context);
}

std::shared_ptr<Executable> compile_for_cpu(JaxprPtr jaxpr, const CompileOptions& options, Device device) {
  return compile_cpu_program(std::move(jaxpr), options, cpu_backend(), device, host_kernel_context());
}

}  // namespace pax::cpu

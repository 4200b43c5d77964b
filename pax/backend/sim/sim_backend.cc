// The sim backend's table: memory and copies queued on the stream, kernels
// launched there, executables (the CPU's, over sim memory) run there as one
// task whose results are placeholders filled when it runs, and while loops
// whose predicate the stream reads.
#include "pax/backend/sim/sim_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "pax/backend/cpu/cpu_backend.h"
#include "pax/backend/sim/sim_memory.h"
#include "pax/backend/sim/sim_stream.h"
#include "pax/core/error.h"
#include "pax/ir/jaxpr.h"

namespace pax::sim {
namespace {

int sim_device_count() { return 1; }

std::string sim_describe(int /*index*/) {
  return "a test device: host memory the host may not touch, kernels on a stream thread (PAX_SIM_MEMORY_MB)";
}

char* bytes_of(const Buffer& b, const char* what) {
  // A placeholder left empty: the work that was to fill it failed earlier.
  PAX_CHECK(b.data() != nullptr || b.nbytes() == 0, what, ": a buffer of ", b.nbytes(), " bytes on ", b.device(),
            " was never computed (the work that computes it failed)");
  return static_cast<char*>(const_cast<void*>(b.data()));
}

void sim_to_host(const Buffer& src, size_t offset, void* dst, size_t nbytes) {
  const int index = src.device().index;
  if (on_stream()) {
    if (nbytes) std::memcpy(dst, bytes_of(src, "copy to the host") + offset, nbytes);
    return;
  }
  // The host waits for the copy, so `dst` outlives it; `src` is held by the
  // caller until then.
  if (nbytes) {
    enqueue(index,
            [&src, offset, dst, nbytes] { std::memcpy(dst, bytes_of(src, "copy to the host") + offset, nbytes); });
  }
  synchronize(index);
}

void sim_from_host(const std::shared_ptr<Buffer>& dst, size_t offset, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  if (on_stream()) {
    std::memcpy(bytes_of(*dst, "copy from the host") + offset, src, nbytes);
    return;
  }
  // Staged, so that the caller may reuse `src` at once.
  auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                             static_cast<const unsigned char*>(src) + nbytes);
  enqueue(dst->device().index, [dst, offset, staged] {
    std::memcpy(bytes_of(*dst, "copy from the host") + offset, staged->data(), staged->size());
  });
}

void sim_copy(const std::shared_ptr<Buffer>& dst, size_t dst_offset, const std::shared_ptr<Buffer>& src,
              size_t src_offset, size_t nbytes) {
  if (nbytes == 0) return;
  enqueue(dst->device().index, [dst, dst_offset, src, src_offset, nbytes] {
    std::memmove(bytes_of(*dst, "device copy") + dst_offset, bytes_of(*src, "device copy") + src_offset, nbytes);
  });
}

uint64_t sim_record_event(int index) { return record(index); }
void sim_wait_event(int index, uint64_t event) { wait(index, event); }
void sim_synchronize(int index) { synchronize(index); }

// The CPU's kernels run on the stream thread, with the CPU's host scratch
// (the host may not read sim memory, but the stream's own work may use host
// memory).
const KernelContext& kernel_context() {
  static const KernelContext context{Device{DeviceKind::sim, 0}, nullptr, nullptr, host_kernel_context().scratch};
  return context;
}

void sim_launch(int index, KernelFn kernel, const Params& params, std::vector<Array> inputs,
                std::vector<Array> outputs) {
  enqueue(index, [kernel, params, inputs = std::move(inputs), outputs = std::move(outputs)] {
    std::vector<TensorView> in(inputs.size()), out(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      in[i] = TensorView{bytes_of(*inputs[i].buffer(), "kernel"), &inputs[i].shape(), inputs[i].dtype()};
    for (size_t i = 0; i < outputs.size(); ++i)
      out[i] = TensorView{bytes_of(*outputs[i].buffer(), "kernel"), &outputs[i].shape(), outputs[i].dtype()};
    kernel(kernel_context(), params, in, out);
  });
}

// Gives each placeholder the memory of the matching result: taken over
// where nothing else holds the result's buffer, copied otherwise (an
// argument or a constant returned as it is, one buffer behind two results).
void fill_placeholders(const std::vector<std::shared_ptr<Buffer>>& placeholders, std::vector<Array> results) {
  for (size_t k = 0; k < placeholders.size(); ++k) {
    std::shared_ptr<Buffer> produced = results[k].buffer();
    results[k] = Array();
    if (produced.use_count() == 1 && produced->device() == placeholders[k]->device()) {
      placeholders[k]->take_memory_of(*produced);
      continue;
    }
    std::shared_ptr<Buffer> fresh = allocate(produced->nbytes(), placeholders[k]->device().index);
    if (produced->nbytes()) std::memcpy(bytes_of(*fresh, "result"), bytes_of(*produced, "result"), produced->nbytes());
    placeholders[k]->take_memory_of(*fresh);
  }
}

// Results of work queued on the stream: placeholders of `avals` on `device`.
std::vector<Array> placeholder_results(const std::vector<AVal>& avals, Device device, bool committed,
                                       std::vector<std::shared_ptr<Buffer>>& placeholders) {
  std::vector<Array> out;
  for (const AVal& a : avals) {
    placeholders.push_back(Buffer::placeholder(size_t(a.shape.numel()) * itemsize(a.dtype), device));
    out.emplace_back(a, placeholders.back(), committed);
  }
  return out;
}

bool any_committed(const std::vector<Array>& xs) {
  for (const Array& a : xs)
    if (a.committed()) return true;
  return false;
}

// An executable of the sim device: the CPU's executable over sim memory,
// run on the stream as one task.
class SimExecutable : public Executable {
 public:
  SimExecutable(std::shared_ptr<Executable> inner, std::vector<AVal> in_avals, std::vector<AVal> out_avals,
                Device device)
      : inner_(std::move(inner)), in_avals_(std::move(in_avals)), out_avals_(std::move(out_avals)), device_(device) {}

  std::vector<Array> run(std::vector<Array> args) const override {
    if (on_stream()) return inner_->run(std::move(args));
    // What the executable would refuse is refused here, before queueing.
    PAX_CHECK(args.size() == in_avals_.size(), "executable: takes ", in_avals_.size(), " arguments, got ", args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      PAX_CHECK(args[i].defined() && args[i].shape() == in_avals_[i].shape && args[i].dtype() == in_avals_[i].dtype,
                "executable: argument ", i, " is ", args[i].defined() ? args[i].aval().str() : "undefined",
                " but the program expects ", in_avals_[i].str());
      PAX_CHECK(args[i].is_concrete(), "executable: argument ", i, " is a tracer of ", args[i].tracer()->owner(),
                "; executables run on concrete arrays");
    }
    bring_arguments(args, device_, "executable");
    std::vector<std::shared_ptr<Buffer>> placeholders;
    std::vector<Array> out = placeholder_results(out_avals_, device_, any_committed(args), placeholders);
    enqueue(device_.index, [inner = inner_, args = std::move(args), placeholders]() mutable {
      fill_placeholders(placeholders, inner->run(std::move(args)));
    });
    return out;
  }
  Device device() const override { return device_; }
  std::string str() const override { return inner_->str(); }
  const Jaxpr& optimized_jaxpr() const override { return inner_->optimized_jaxpr(); }
  CostAnalysis cost() const override { return inner_->cost(); }
  const MemoryStats& memory() const override { return inner_->memory(); }

 private:
  std::shared_ptr<Executable> inner_;
  std::vector<AVal> in_avals_, out_avals_;
  Device device_;
};

std::shared_ptr<Executable> sim_compile(JaxprPtr jaxpr, const CompileOptions& options, Device device) {
  std::vector<AVal> in = jaxpr->in_avals(), out = jaxpr->out_avals();
  std::shared_ptr<Executable> inner =
      cpu::compile_cpu_program(std::move(jaxpr), options, sim_backend(), device, kernel_context());
  return std::make_shared<SimExecutable>(std::move(inner), std::move(in), std::move(out), device);
}

// The whole loop is one task: the stream reads each predicate itself.
std::vector<Array> sim_run_while(int index, std::shared_ptr<Executable> cond, std::shared_ptr<Executable> body,
                                 std::vector<Array> cond_consts, std::vector<Array> body_consts,
                                 std::vector<Array> carry) {
  auto loop = [cond, body](const std::vector<Array>& cc, const std::vector<Array>& bc, std::vector<Array> c) {
    auto with = [](const std::vector<Array>& consts, const std::vector<Array>& xs) {
      std::vector<Array> all(consts);
      all.insert(all.end(), xs.begin(), xs.end());
      return all;
    };
    while (cond->run(with(cc, c))[0].item<bool>()) c = body->run(with(bc, c));
    return c;
  };
  if (on_stream()) return loop(cond_consts, body_consts, std::move(carry));
  const Device device{DeviceKind::sim, index};
  std::vector<AVal> avals;
  for (const Array& a : carry) avals.push_back(a.aval());
  const bool committed = any_committed(carry) || any_committed(cond_consts) || any_committed(body_consts);
  std::vector<std::shared_ptr<Buffer>> placeholders;
  std::vector<Array> out = placeholder_results(avals, device, committed, placeholders);
  enqueue(index, [loop, cc = std::move(cond_consts), bc = std::move(body_consts), c = std::move(carry),
                  placeholders]() mutable { fill_placeholders(placeholders, loop(cc, bc, std::move(c))); });
  return out;
}

// The branch is picked on the stream, from the index in device memory.
std::vector<Array> sim_run_cond(int index, Array which, std::vector<std::shared_ptr<Executable>> branches,
                                std::vector<Array> operands) {
  auto pick_and_run = [branches](const Array& k, std::vector<Array> ops) {
    const int64_t n = int64_t(branches.size());
    const int64_t b = std::clamp<int64_t>(k.item<int32_t>(), 0, n - 1);
    return branches[size_t(b)]->run(std::move(ops));
  };
  if (on_stream()) return pick_and_run(which, std::move(operands));
  std::vector<AVal> avals;
  for (const AVal& a : branches[0]->optimized_jaxpr().out_avals()) avals.push_back(a);
  const bool committed = which.committed() || any_committed(operands);
  std::vector<std::shared_ptr<Buffer>> placeholders;
  std::vector<Array> out = placeholder_results(avals, Device{DeviceKind::sim, index}, committed, placeholders);
  enqueue(index, [pick_and_run, which = std::move(which), ops = std::move(operands), placeholders]() mutable {
    fill_placeholders(placeholders, pick_and_run(which, std::move(ops)));
  });
  return out;
}

}  // namespace

const Backend& sim_backend() {
  static const Backend backend = [] {
    const Backend& cpu = cpu::cpu_backend();
    return Backend{
        .name = "sim",
        .kind = DeviceKind::sim,
        .describe = sim_describe,
        .absence_reason = nullptr,
        .peak_flops = nullptr,
        .memory = DeviceMemory{.device_count = sim_device_count,
                               .host_accessible = false,
                               .allocate = allocate,
                               .to_host = sim_to_host,
                               .from_host = sim_from_host,
                               .copy = sim_copy,
                               .synchronize = sim_synchronize},
        .record_event = sim_record_event,
        .wait_event = sim_wait_event,
        .synchronize = sim_synchronize,
        .num_threads = cpu.num_threads,
        .set_num_threads = cpu.set_num_threads,
        .kernel = cpu.kernel,
        .launch = sim_launch,
        .run_while = sim_run_while,
        .run_cond = sim_run_cond,
        .supports_op = cpu.supports_op,
        .compile = sim_compile,
    };
  }();
  return backend;
}

uint64_t host_synchronizations() { return host_waits(); }

namespace {
// Loading the library registers the sim platform beside the CPU (it becomes
// the default only through PAX_PLATFORMS=sim or --platform=sim).
[[maybe_unused]] const bool kRegistered = (register_backend(sim_backend()), true);
}  // namespace

}  // namespace pax::sim

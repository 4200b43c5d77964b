// The CUDA executable that interprets its program on the device.
#include "pax/backend/cuda/cuda_executable.h"

#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/ir/jaxpr.h"

namespace pax::cuda {
namespace {

class InterpretedExecutable : public Executable {
 public:
  InterpretedExecutable(JaxprPtr jaxpr, Device device)
      : jaxpr_(std::move(jaxpr)), device_(device), cost_(cost_analysis(*jaxpr_)) {}

  std::vector<Array> run(std::vector<Array> args) const override {
    const std::vector<AVal>& in = jaxpr_->in_avals();
    PAX_CHECK(args.size() == in.size(), "executable: takes ", in.size(), " arguments, got ", args.size());
    bool committed = false;
    for (size_t i = 0; i < args.size(); ++i) {
      PAX_CHECK(args[i].defined() && args[i].shape() == in[i].shape && args[i].dtype() == in[i].dtype,
                "executable: argument ", i, " is ", args[i].defined() ? args[i].aval().str() : "undefined",
                " but the program expects ", in[i].str());
      committed = committed || args[i].committed();
    }
    bring_arguments(args, device_, "executable");
    const DefaultDeviceScope on_device(device_);
    std::vector<Array> out = eval_jaxpr(*jaxpr_, args);
    if (committed) {
      for (Array& a : out)
        if (a.is_concrete() && !a.committed()) a = Array(a.aval(), a.buffer(), true);
    }
    return out;
  }
  Device device() const override { return device_; }
  std::string str() const override { return "interpreted on " + device_.str() + ":\n" + jaxpr_->str(); }
  const Jaxpr& optimized_jaxpr() const override { return *jaxpr_; }
  CostAnalysis cost() const override { return cost_; }
  const MemoryStats& memory() const override { return memory_; }

 private:
  JaxprPtr jaxpr_;
  Device device_;
  CostAnalysis cost_;
  MemoryStats memory_;
};

}  // namespace

// The options' constants are passed again by every caller and are read as
// arguments; donation and the passes wait for the compiled executable.
std::shared_ptr<Executable> compile_for_cuda(JaxprPtr jaxpr, const CompileOptions& /*options*/, Device device) {
  return std::make_shared<InterpretedExecutable>(std::move(jaxpr), device);
}

}  // namespace pax::cuda

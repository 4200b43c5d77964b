// The executable: runs the optimised jaxpr equation by equation on the eager
// kernels, releasing each intermediate after its last use.
#include "pax/compile/executable.h"

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

class InterpretedExecutable : public Executable {
 public:
  explicit InterpretedExecutable(JaxprPtr jaxpr) : jaxpr_(std::move(jaxpr)) {
    // Last use of every variable, so intermediates are freed early.
    last_use_.assign(jaxpr_->avals.size(), -1);
    for (size_t k = 0; k < jaxpr_->eqns.size(); ++k) {
      for (Var v : jaxpr_->eqns[k].inputs) last_use_[size_t(v)] = int(k);
    }
    for (Var v : jaxpr_->outvars) last_use_[size_t(v)] = int(jaxpr_->eqns.size());
  }

  std::vector<Array> run(std::vector<Array> args) const override {
    const Jaxpr& j = *jaxpr_;
    PAX_CHECK(args.size() == j.invars.size(), "executable: takes ", j.invars.size(), " arguments, got ", args.size());
    std::vector<Array> env(j.avals.size());
    for (size_t i = 0; i < j.constvars.size(); ++i) env[size_t(j.constvars[i])] = j.consts[i];
    for (size_t i = 0; i < args.size(); ++i) {
      PAX_CHECK(args[i].shape() == j.aval(j.invars[i]).shape && args[i].dtype() == j.aval(j.invars[i]).dtype,
                "executable: argument ", i, " is ", args[i].aval().str(), " but the program expects ",
                j.aval(j.invars[i]).str());
      env[size_t(j.invars[i])] = std::move(args[i]);
    }
    std::vector<Array> inputs;
    for (size_t k = 0; k < j.eqns.size(); ++k) {
      const Eqn& e = j.eqns[k];
      inputs.clear();
      for (Var v : e.inputs) inputs.push_back(env[size_t(v)]);
      std::vector<Array> out = eager_apply(e.prim, inputs, e.params);
      for (size_t i = 0; i < out.size(); ++i) env[size_t(e.outputs[i])] = std::move(out[i]);
      for (Var v : e.inputs) {
        if (last_use_[size_t(v)] == int(k)) env[size_t(v)] = Array();
      }
    }
    std::vector<Array> out;
    for (Var v : j.outvars) out.push_back(env[size_t(v)]);
    return out;
  }

  std::string str() const override { return jaxpr_->str(); }
  const Jaxpr& optimized_jaxpr() const override { return *jaxpr_; }

 private:
  JaxprPtr jaxpr_;
  std::vector<int> last_use_;
};

}  // namespace

std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions&) {
  return std::make_shared<InterpretedExecutable>(std::move(jaxpr));
}

CostAnalysis cost_analysis(const Jaxpr& jaxpr) {
  CostAnalysis c;
  for (const Eqn& e : jaxpr.eqns) {
    for (Var v : e.inputs) c.bytes_accessed += double(jaxpr.aval(v).shape.numel() * int64_t(itemsize(jaxpr.aval(v).dtype)));
    for (Var v : e.outputs) {
      c.bytes_accessed += double(jaxpr.aval(v).shape.numel() * int64_t(itemsize(jaxpr.aval(v).dtype)));
      c.flops += double(jaxpr.aval(v).shape.numel());
    }
  }
  return c;
}

std::shared_ptr<Executable> Program::executable() const {
  std::call_once(once_, [this] { executable_ = compile(jaxpr_, options_); });
  return executable_;
}

std::string Program::str() const { return name_ + "=" + jaxpr_->str(); }

}  // namespace pax

// What a compiled jaxpr looks like to the layers above the compiler: the
// Executable interface, the options of compile(), and the Program a jit_call
// equation carries (its jaxpr plus the executable, compiled on first use).
//
// compile() hands the jaxpr to the backend of a device (pax/backend/backend.h),
// whose compile hook runs the backend-neutral compiler (pax/compile/lower.h:
// passes, fusion, memory plan) and turns its result into something the
// backend runs (the CPU's: pax/backend/cpu/cpu_executable.cc).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/jaxpr.h"

namespace pax {

struct CompileOptions {
  // Per jaxpr input: the caller gives up the argument, so its buffer may be
  // reused for an output (only when no other handle refers to it).
  std::vector<bool> donate;
  // Values of the leading inputs that are the same on every call (jit's
  // closed-over constants): the passes may fold them and simplify with them.
  // Callers still pass them; the executable ignores those arguments.
  std::vector<Array> constant_args;
  // Constant folding leaves equations with larger results to run time.
  int64_t fold_limit = int64_t(1) << 16;
  // Run the passes (inline, fold, simplify, CSE, DCE).
  bool optimize = true;
  // Group elementwise equations into fused loops (off: one kernel each).
  bool fuse = true;
};

// FLOPs and bytes of a program, as jit(f).lower(args).cost() reports them.
// FLOPs: one per output element of an elementwise operation, except
// transcendental ones (exp, log, tanh, logistic, erf, sin, pow, ...), which
// count in `transcendentals`; dot_general 2 * batch * M * N * K; convolution
// 2 * output elements * kernel spatial size * input features per group;
// reductions and cumsum one per input element; data movement none.
struct CostAnalysis {
  double flops = 0;
  double transcendentals = 0;
  double bytes_accessed = 0;
};

// Figures of an executable's memory plan (see memory_plan.h).
struct MemoryStats {
  size_t arena_bytes = 0;         // the arena holding every intermediate
  size_t intermediate_bytes = 0;  // those intermediates without any reuse
  int intermediates = 0;
  int in_place = 0;   // fused outputs written over a dying input
  int donations = 0;  // outputs that may take a donated argument's buffer
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs on concrete arguments (moved in, so that donated buffers can be
  // reused) on its device; uncommitted arguments elsewhere are brought there
  // and committed ones elsewhere are a pax::Error. The results may still be
  // being computed when it returns (host reads wait for them).
  virtual std::vector<Array> run(std::vector<Array> args) const = 0;
  // The device it runs on.
  virtual Device device() const = 0;
  // The optimised program: fused loops shown as fusion{...}, and the memory plan.
  virtual std::string str() const = 0;
  // The jaxpr after the passes (before fusion, which str() shows).
  virtual const Jaxpr& optimized_jaxpr() const = 0;
  // Cost after fusion: a fused loop accesses its inputs and outputs once.
  virtual CostAnalysis cost() const = 0;
  // Figures of the memory plan (arena size, buffers reused in place, ...).
  virtual const MemoryStats& memory() const = 0;
};

// Compiles `jaxpr` for the default device (pax/core/device.h).
std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options = {});

// Cost of a jaxpr as traced (before fusion): every equation reads its inputs
// and writes its outputs (equations that only alias their input move
// nothing); jit_call equations count their programs. See pax/ir/cost.cc.
CostAnalysis cost_analysis(const Jaxpr& jaxpr);

// FLOPs and transcendentals of one equation (bytes left at zero).
CostAnalysis eqn_flops(const Jaxpr& jaxpr, const Eqn& eqn);

// The parameter of jit_call: the traced program (constants already turned
// into leading inputs) and its executables, compiled once per device on first
// eager use there.
class Program : public ParamObject {
 public:
  Program(JaxprPtr jaxpr, std::string name, CompileOptions options = {})
      : jaxpr_(std::move(jaxpr)), name_(std::move(name)), options_(std::move(options)) {}
  const JaxprPtr& jaxpr() const { return jaxpr_; }
  const std::string& name() const { return name_; }
  // Its executable for `device` (the default device: the one the
  // operands of an eager call live on, see eager_apply).
  std::shared_ptr<Executable> executable(Device device) const;
  std::shared_ptr<Executable> executable() const { return executable(default_device()); }
  std::string str() const override;

 private:
  JaxprPtr jaxpr_;
  std::string name_;
  CompileOptions options_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<Device, std::shared_ptr<Executable>>> executables_;
};

}  // namespace pax

// The compiled form of a jaxpr for the CPU backend, and the Program a
// jit_call equation carries (its jaxpr plus the executable, compiled on first
// use). compile() runs the passes (see pax/compile/passes) and plans memory.
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
};

// FLOPs and bytes of a program, as jit(f).lower(args).cost() reports them.
struct CostAnalysis {
  double flops = 0;
  double transcendentals = 0;
  double bytes_accessed = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs on concrete arguments (moved in, so that donated buffers can be reused).
  virtual std::vector<Array> run(std::vector<Array> args) const = 0;
  // The program after the compiler's passes.
  virtual std::string str() const = 0;
  virtual const Jaxpr& optimized_jaxpr() const = 0;
};

std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options = {});

CostAnalysis cost_analysis(const Jaxpr& jaxpr);

// The parameter of jit_call: the traced program (constants already turned
// into leading inputs) and its executable, compiled once on first eager use.
class Program : public ParamObject {
 public:
  Program(JaxprPtr jaxpr, std::string name, CompileOptions options = {})
      : jaxpr_(std::move(jaxpr)), name_(std::move(name)), options_(std::move(options)) {}
  const JaxprPtr& jaxpr() const { return jaxpr_; }
  const std::string& name() const { return name_; }
  std::shared_ptr<Executable> executable() const;
  std::string str() const override;

 private:
  JaxprPtr jaxpr_;
  std::string name_;
  CompileOptions options_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<Executable> executable_;
};

}  // namespace pax

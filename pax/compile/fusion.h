// Elementwise fusion: the schedule of an optimised jaxpr, in which maximal
// groups of elementwise equations (with the broadcasts and reshapes feeding
// them, and possibly one trailing reduce_sum / max / min) run as one fused
// loop (a LoopProgram, loop_program.h, which the backend prepares and runs),
// and every other equation as itself.
//
// Equations are visited in order. An elementwise equation joins the group of
// one of its operands when the groups have the same number of elements (the
// loop domain) and every other operand is available before that group runs;
// groups that only depend on values available earlier may be merged into it.
// A group runs at the position of its first equation, so the schedule stays
// a valid topological order. Once a step outside the loops has read one of
// a group's values, only a trailing reduction may still join it (later
// elementwise work, such as the backward pass's, forms loops of its own).
// Broadcasts of values from outside become strided reads of the loop,
// reshapes are free; a broadcast / reshape whose result is also needed
// outside the loop is computed by its own step.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pax/compile/loop_program.h"
#include "pax/ir/jaxpr.h"

namespace pax {

struct LoweringTarget;  // pax/compile/lowering_target.h

struct FusionGroup {
  std::vector<size_t> eqns;  // member equations and the broadcasts it reads, in program order
  std::vector<Var> inputs;   // values read from outside the group
  std::vector<Var> outputs;  // values written: used after the group, or the reduction's result
  // Per input: read only contiguously (never through a broadcast), so an
  // output of the same size may overwrite it in place.
  std::vector<bool> contiguous;
  int64_t size = 0;            // loop elements
  bool has_reduction = false;  // ends in a reduction
  std::shared_ptr<const LoopProgram> program;
};

struct Step {
  enum class Kind : uint8_t {
    kernel,  // one equation, run by its backend kernel
    alias,   // one equation whose result shares its input's bytes (reshape, ...)
    impl,    // one equation run by its impl rule on Arrays (custom_vjp_call, ...)
    fused,   // a fusion group
  };
  Kind kind;
  size_t index;  // equation index, or group index for fused steps
};

// A run of consecutive steps, fused loops over the same rows (and reshapes),
// that runs one tile of rows at a time: every loop computes the tile's rows
// before the next loop starts on them, so the values the loops pass each
// other are still in cache when they are read again (a softmax's maximum,
// exponentials and division read its logits from memory once). The loops
// cover `rows` x `row_len` elements (row_len == 1: row-sized loops) and read
// the values of earlier loops of the sweep only for the same row: whole
// rows contiguously, or a per-row value (a row reduction's result)
// broadcast along the row. See row_sweep.h.
struct RowSweep {
  size_t first = 0, last = 0;  // its steps, [first, last]
  int64_t rows = 0, row_len = 0;
};

struct StepSchedule {
  std::vector<Step> steps;
  std::vector<FusionGroup> groups;
  std::vector<RowSweep> sweeps;  // in step order, disjoint

  // Per step: the index of the row sweep it belongs to, or -1.
  std::vector<int> sweep_of_steps() const;
  // The values a step reads / writes.
  std::vector<Var> inputs(const Jaxpr& j, const Step& s) const;
  std::vector<Var> outputs(const Jaxpr& j, const Step& s) const;
  // The program with fused groups shown as fusion{...}; `notes` adds what
  // the backend made of a group (", chain") after its size.
  std::string str(const Jaxpr& j, const std::function<std::string(size_t group)>& notes = {}) const;
};

// The schedule of `jaxpr` (fuse=false: one step per equation); `target`
// says which reductions a loop may end in.
StepSchedule schedule(const Jaxpr& jaxpr, bool fuse, const LoweringTarget& target);

// A reduction equation as (outer, n, inner) when its reduced axes are the
// leading or the trailing ones (size-1 dimensions ignored), as the reduce
// kernel merges them; nullopt otherwise.
struct ReduceShape {
  ReduceOp op = ReduceOp::sum;
  int64_t outer = 1, n = 1, inner = 1;
};
std::optional<ReduceShape> reduce_shape(const Eqn& e, const AVal& x);

// How an equation runs when it is not fused.
Step::Kind step_kind(Prim p);

// jaxpr-style variable names (a, b, ..., z, ba, ...).
std::string var_name(Var v);

}  // namespace pax

// Structured control flow, as in jax.lax: the primitives cond, while, scan
// and remat, their parameter objects, and the binders that the user API
// (pax/api/control_flow.h) and the transform rules share.
//
// Every sub-function is traced to a jaxpr whose constants are turned into
// leading inputs (closure conversion), so that values closed over — concrete
// arrays or tracers of enclosing transformations — are explicit operands, and
// is carried as a Program (its executable is compiled once and run by the
// eager implementation on every iteration).
//
//   cond   (index, *ops)                 branches: every branch takes all ops;
//                                        index is an int32 scalar (clamped), or
//                                        a bool scalar choosing of 2 branches
//   while  (*cond_consts, *body_consts, *init)
//                                        cond: [cond_consts, carry] -> bool[]
//                                        body: [body_consts, carry] -> carry
//   scan   (*consts, *init, *xs)         body: [consts, carry, x] -> [carry, y]
//                                        outputs [carry, ys (stacked on axis 0)]
//   remat  (*args)                       jaxpr: the checkpointed function
//
// Residual outputs for reverse mode: a scan with save_carries also returns
// the carry that entered every iteration, stacked; a remat with num_res > 0
// returns after its outputs the values of the jaxpr's last num_res outputs
// (the dot_general results that dots_saveable keeps). The binders below ask
// for them only when the innermost level is grad, and never return them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pax/ir/executable.h"
#include "pax/interp/trace.h"
#include "pax/prims/registry.h"

namespace pax {

// Which values checkpoint / remat keeps from the forward pass for the
// backward pass (the rest is recomputed), as jax.checkpoint_policies.
enum class RematPolicy {
  nothing_saveable,  // keep only the inputs; recompute everything
  dots_saveable,     // also keep the results of dot_general (matmuls)
};
const char* remat_policy_name(RematPolicy policy);

// The `branches` parameter of cond.
class BranchList : public ParamObject {
 public:
  std::vector<std::shared_ptr<const Program>> branches;
  std::string str() const override;
};

namespace cf {

// A traced function: program inputs are [consts..., args...].
struct ClosedFn {
  std::shared_ptr<const Program> program;
  std::vector<Array> consts;
};
ClosedFn trace_closed(const FlatFn& f, std::span<const AVal> in_avals, const std::string& name);

// ---------------------------------------------------------------------------
// Binders: bind the primitive on explicit operands and return its outputs
// without residuals.

// `index` is an int32 or bool scalar; each branch takes `operands` (after its consts).
std::vector<Array> cond(const Array& index, std::span<const ClosedFn> branches, std::span<const Array> operands);

std::vector<Array> while_loop(const ClosedFn& cond, const ClosedFn& body, std::span<const Array> init);

struct ScanSpec {
  std::shared_ptr<const Program> body;
  int64_t num_consts = 0;
  int64_t num_carry = 0;
  int64_t length = 0;
  bool reverse = false;
};
ScanSpec scan_spec(const Params& p);
Params scan_params(const ScanSpec& spec, bool save_carries);
// operands: [consts, init, xs]. With want_carries the stacked carries that
// entered each iteration follow [carry, ys].
std::vector<Array> scan(const ScanSpec& spec, std::span<const Array> operands, bool want_carries = false);

// `jaxpr` takes args (its constants already leading inputs).
std::vector<Array> remat(const std::shared_ptr<const Program>& jaxpr, RematPolicy policy, std::span<const Array> args);

// ---------------------------------------------------------------------------
// Helpers shared by the rules.

// A freshly allocated [length, ...] output of a loop, filled row by row (a
// copy shares the rows: each row written by one writer, from any thread).
class RowWriter {
 public:
  RowWriter(const AVal& row, int64_t length);
  void put(int64_t t, const Array& row) const;
  Array finish() const { return Array(aval_, buffer_); }

 private:
  AVal aval_;
  size_t row_bytes_;
  std::shared_ptr<Buffer> buffer_;
};
// Row t of xs (along its leading axis), copied out.
Array read_row(const Array& xs, int64_t t);

// Shape and dtype equal (weak types may differ).
bool same_type(const AVal& a, const AVal& b);
bool same_types(std::span<const AVal> a, std::span<const AVal> b);  // elementwise, and equal counts
std::string avals_str(std::span<const AVal> avals);                 // "(f32[3], i32[])"
std::vector<AVal> avals_of(std::span<const Array> xs);

// True when the innermost level that will process `operands` is grad (so
// residual outputs are worth computing).
bool differentiated_here(Prim prim, std::span<const Array> operands, const Params& params = {});

// f on values batched at bdims (-1: not batched) under a fresh vmap level of
// `info`'s size and axis name; returns each output's value and batch axis.
Batched batch_fn(const FlatFn& f, std::span<const Array> values, std::span<const int64_t> bdims, const BatchInfo& info);

// A program batched along a leading axis of the inputs marked in_batched.
// Outputs that come out batched, or are marked in force_out (may be empty),
// carry the batch axis at 0; out_batched says which do.
struct BatchedFn {
  ClosedFn fn;
  std::vector<bool> out_batched;
};
BatchedFn batch_program(const Program& program, const std::vector<bool>& in_batched, const std::vector<bool>& force_out,
                        const BatchInfo& info);

// Evaluates a program's jaxpr at the current interpreter levels.
std::vector<Array> call(const Program& program, std::span<const Array> args);
std::vector<Array> call(const ClosedFn& fn, std::span<const Array> args);  // consts first

// Concatenation of spans of arrays.
std::vector<Array> concat(std::initializer_list<std::span<const Array>> parts);

// Bookkeeping for rules that pass only some tangents / cotangents along.
std::vector<size_t> defined_positions(std::span<const Array> xs);
std::vector<size_t> floating_positions(std::span<const Array> xs);
std::vector<Array> pick(std::span<const Array> xs, const std::vector<size_t>& idx);  // xs[idx[k]]...
// n undefined entries with vals[k] at idx[k].
std::vector<Array> place(size_t n, const std::vector<size_t>& idx, std::span<const Array> vals);
// The tangents of the floating outputs, zeros where undefined.
std::vector<Array> floating_tangents(std::span<const Array> outs, std::span<const Array> touts);
// One entry per output: the next of `values` for a floating output, undefined otherwise.
std::vector<Array> spread_floating(std::span<const Array> outs, std::span<const Array> values);

// Rule registration, one per primitive (control_flow_<name>.cc).
void register_cond(PrimTable& table);
void register_while(PrimTable& table);
void register_scan(PrimTable& table);
void register_remat(PrimTable& table);

}  // namespace cf
}  // namespace pax

// Reverse mode. The vjp level computes each primal one level down and records
// a tape entry (primitive, params, input and output primals); the backward
// pass walks the tape in reverse applying the primitives' VJP rules. The rules
// bind their ops at the levels below, so grad(grad(f)), jit(grad(f)),
// vmap(grad(f)) and value-dependent C++ control flow (primals are concrete
// outside jit) all work.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/interp/trace.h"
#include "pax/prims/registry.h"

namespace pax {

struct TapeEntry {
  Prim prim;
  Params params;
  std::vector<int> in_ids;  // tape slot of each input; -1 for constants
  std::vector<Array> in_primals;
  std::vector<int> out_ids;  // -1 for outputs that carry no gradient
  std::vector<Array> out_primals;
};

class VjpTrace : public Trace, public std::enable_shared_from_this<VjpTrace> {
 public:
  std::vector<Array> process(Prim prim, std::span<const Array> inputs, const Params& params) override;
  std::string name() const override { return "grad"; }

  // Wraps a primal as a tracked value of this level.
  Array track(const Array& primal);
  // (primal, slot) of a value: slot -1 when it is not this level's.
  std::pair<Array, int> unwrap(const Array& x) const;
  int num_slots() const { return next_id_; }
  const std::vector<TapeEntry>& tape() const { return tape_; }

 private:
  std::vector<Array> process_with_residuals(TapeEntry entry, VjpForwardRule forward);
  // The outputs of `entry`'s primitive as this level sees them: floating
  // ones tracked (their slots in entry.out_ids), the others as they are (-1).
  std::vector<Array> track_outputs(const std::vector<Array>& outputs, TapeEntry& entry);
  std::vector<TapeEntry> tape_;
  int next_id_ = 0;
};

class VjpTracer : public LevelTracer {
 public:
  VjpTracer(std::shared_ptr<Trace> trace, Array primal, int id)
      : LevelTracer(std::move(trace)), primal(std::move(primal)), id(id) {}
  const Array* concrete() const override;
  const Array primal;
  const int id;
};

// Input cotangents (by slot) from output cotangents, walking `trace`'s tape.
// Undefined arrays are zeros. Returns one entry per slot.
std::vector<Array> backward_pass(const VjpTrace& trace, std::span<const int> out_ids, std::span<const Array> out_cts);

// vjp over flat arrays. `f` returns its differentiable outputs first and then
// `num_aux` auxiliary outputs that are not differentiated.
struct FlatVjp {
  std::vector<Array> outputs;  // primal values of every output (aux included)
  // Cotangents of the inputs (undefined = zero) from cotangents of the
  // non-aux outputs (undefined = zero).
  std::function<std::vector<Array>(std::span<const Array>)> backward;
};
FlatVjp vjp_flat(const FlatFn& f, std::span<const Array> primals, size_t num_aux = 0);

// Zeros of `like`'s shape and dtype.
Array zeros_like_aval(const Array& like);

}  // namespace pax

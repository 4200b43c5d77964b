// The interpreter stack. Every primitive application goes through bind(),
// which hands it to the highest interpreter level that owns one of the inputs
// — or, while a trace for jit / make_jaxpr / eval_shape is active, at least to
// that "dynamic" level, so that ops without traced inputs (zeros, iota) are
// recorded instead of computed — and runs the backend kernel eagerly when no
// level is involved. Levels (see DESIGN.md):
//   trace (trace.h)  record an equation in a Jaxpr; only avals are known
//   vjp   (vjp.h)    compute the primal one level down and record a tape entry
//   jvp   (jvp.h)    carry a tangent beside each primal
//   vmap  (vmap.h)   carry a batch dimension and apply batching rules
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/core/tracer.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

// One interpreter level.
class Trace {
 public:
  virtual ~Trace() = default;
  int level() const { return level_; }
  bool active() const { return active_; }
  // Applies `prim`; some inputs are this level's tracers, the others belong to
  // lower levels (or are concrete) and count as constants here.
  virtual std::vector<Array> process(Prim prim, std::span<const Array> inputs, const Params& params) = 0;
  virtual std::string name() const = 0;  // "jit", "grad", "vmap", ...
  // The axis name of a vmap level (collectives over that name go to it).
  virtual const std::string* axis_name() const { return nullptr; }
  virtual int64_t axis_length() const { return 0; }

 private:
  friend class TraceScope;
  int level_ = 0;
  bool active_ = false;
};

// Every tracer belongs to one Trace.
class LevelTracer : public Tracer {
 public:
  explicit LevelTracer(std::shared_ptr<Trace> trace) : trace_(std::move(trace)) {}
  Trace* trace() const { return trace_.get(); }
  std::string owner() const override { return trace_->name(); }

 private:
  std::shared_ptr<Trace> trace_;
};

// The collective family of prims.def (psum, pmax, pmin, all_gather,
// psum_scatter, axis_index): primitives with an axis_name.
bool is_collective(Prim p);
// The collectives that move data between processes (all but axis_index):
// compiled programs run them on the communication thread.
bool moves_data(Prim p);

// The trace that owns `x`, or nullptr for a concrete array.
Trace* trace_of(const Array& x);

// Pushes a level for the lifetime of the scope; on exit the level is popped
// and marked inactive, so tracers that escape it are detected when used.
class TraceScope {
 public:
  TraceScope(std::shared_ptr<Trace> trace, bool dynamic);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  std::shared_ptr<Trace> trace_;
  bool dynamic_;
};

// The size of the named axis of the innermost enclosing vmap with that
// axis_name, else (the process axis, pax/dist) the process count; throws
// pax::Error naming the axis when neither has that name.
int64_t axis_size(const std::string& axis_name);

// The innermost active dynamic trace, if any.
Trace* dynamic_trace();

// The level bind() hands `prim` to (nullptr: eager execution).
Trace* find_top_trace(Prim prim, std::span<const Array> inputs, const Params& params);

std::vector<Array> bind(Prim prim, std::span<const Array> inputs, const Params& params = {});
inline std::vector<Array> bind(Prim prim, std::initializer_list<Array> inputs, const Params& params = {}) {
  return bind(prim, std::span<const Array>(inputs.begin(), inputs.size()), params);
}
// For primitives with exactly one output.
Array bind1(Prim prim, std::span<const Array> inputs, const Params& params = {});
inline Array bind1(Prim prim, std::initializer_list<Array> inputs, const Params& params = {}) {
  return bind1(prim, std::span<const Array>(inputs.begin(), inputs.size()), params);
}

// The eager interpreter: checks shapes, allocates the results and runs the
// kernel (or the primitive's impl rule). Inputs must all be concrete.
std::vector<Array> eager_apply(Prim prim, std::span<const Array> inputs, const Params& params);

}  // namespace pax

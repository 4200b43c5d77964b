// The thread-local interpreter stack and bind().
#include "pax/interp/interpreter.h"

#include <vector>

#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/interp/process_axis.h"

namespace pax {
namespace {

struct Stack {
  std::vector<Trace*> levels;
  std::vector<Trace*> dynamic;
};

Stack& stack() {
  thread_local Stack s;
  return s;
}

}  // namespace

bool is_collective(Prim p) { return prim_family(p) == PrimFamily::collective; }
bool moves_data(Prim p) { return is_collective(p) && p != Prim::axis_index; }

Trace* trace_of(const Array& x) {
  if (!x.is_tracer()) return nullptr;
  // Every tracer is a LevelTracer (the interpreters create them).
  return static_cast<const LevelTracer*>(x.tracer())->trace();
}

TraceScope::TraceScope(std::shared_ptr<Trace> trace, bool dynamic) : trace_(std::move(trace)), dynamic_(dynamic) {
  Stack& s = stack();
  s.levels.push_back(trace_.get());
  trace_->level_ = int(s.levels.size());
  trace_->active_ = true;
  if (dynamic_) s.dynamic.push_back(trace_.get());
}

TraceScope::~TraceScope() {
  Stack& s = stack();
  trace_->active_ = false;
  if (!s.levels.empty() && s.levels.back() == trace_.get()) s.levels.pop_back();
  if (dynamic_ && !s.dynamic.empty() && s.dynamic.back() == trace_.get()) s.dynamic.pop_back();
}

Trace* dynamic_trace() {
  Stack& s = stack();
  return s.dynamic.empty() ? nullptr : s.dynamic.back();
}

int64_t axis_size(const std::string& axis_name) {
  const std::vector<Trace*>& levels = stack().levels;
  for (size_t i = levels.size(); i-- > 0;) {
    const std::string* axis = levels[i]->axis_name();
    if (axis && *axis == axis_name) return levels[i]->axis_length();
  }
  return bound_process_axis(axis_name, "axis_size").size();
}

Trace* find_top_trace(Prim prim, std::span<const Array> inputs, const Params& params) {
  Trace* top = nullptr;
  for (const Array& a : inputs) {
    PAX_CHECK(a.defined(), prim_name(prim), ": an operand is an empty Array");
    Trace* t = trace_of(a);
    if (!t) continue;
    PAX_CHECK(t->active(), prim_name(prim), ": an operand ", a.aval().str(), " is a value traced by ", t->name(),
              " that escaped its transformation (e.g. stored in a variable outside the function); return it "
              "from the transformed function instead");
    if (!top || t->level() > top->level()) top = t;
  }
  // A collective goes to the level that owns its named axis.
  if (is_collective(prim)) {
    const std::string& name = params.s("axis_name");
    const std::vector<Trace*>& levels = stack().levels;
    for (size_t i = levels.size(); i-- > 0;) {
      const std::string* axis = levels[i]->axis_name();
      if (axis && *axis == name) {
        if (!top || levels[i]->level() > top->level()) top = levels[i];
        break;
      }
    }
  }
  // A custom_vjp_call goes to the innermost named vmap level it is not
  // batched over yet (interp/custom_vjp.h).
  if (prim == Prim::custom_vjp_call) {
    const auto rule = params.object<CustomVjpRule>("rule");
    const std::vector<Trace*>& levels = stack().levels;
    for (size_t i = levels.size(); i-- > 0;) {
      const std::string* axis = levels[i]->axis_name();
      if (!axis || rule->batched_over(*axis)) continue;
      if (!top || levels[i]->level() > top->level()) top = levels[i];
      break;
    }
  }
  Trace* dyn = dynamic_trace();
  if (dyn && (!top || dyn->level() > top->level())) top = dyn;
  return top;
}

std::vector<Array> bind(Prim prim, std::span<const Array> inputs, const Params& params) {
  Trace* top = find_top_trace(prim, inputs, params);
  if (!top) return eager_apply(prim, inputs, params);
  return top->process(prim, inputs, params);
}

Array bind1(Prim prim, std::span<const Array> inputs, const Params& params) {
  std::vector<Array> out = bind(prim, inputs, params);
  PAX_CHECK(out.size() == 1, prim_name(prim), ": has ", out.size(), " outputs; use bind()");
  return std::move(out[0]);
}

}  // namespace pax

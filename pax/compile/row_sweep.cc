// Row sweeps: which consecutive fused loops run one tile of rows at a time
// (see row_sweep.h).
#include "pax/compile/row_sweep.h"

#include <cstdlib>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "pax/compile/lowering_target.h"
#include "pax/core/env_switch.h"

namespace pax {
namespace {

// How a value computed inside a sweep is laid out over the rows.
enum class RowShape : uint8_t { whole_rows, per_row };

// Whether a sweep may run a reduction of the domain (outer, n, inner) from
// `dtype` to `out_dtype`: whole rows (inner == 1) that the backend reduces one
// tile at a time with the bits of the whole reduction (each row's result
// written as it is reduced).
bool rows_reducible(const LoweringTarget& target, ReduceOp op, int64_t outer, int64_t n, int64_t inner, DType dtype,
                    DType out_dtype) {
  return inner == 1 && outer >= 2 && target.row_reduction_in_sweep(op, dtype, out_dtype, n);
}

// The rows a loop's reduction reduces, when a sweep may start at it (or
// take it).
bool sweepable_reduction(const LoopProgram& p, const LoweringTarget& target) {
  if (!p.reduce) return false;
  const FusedReduce& r = *p.reduce;
  return rows_reducible(target, r.op, r.outer, r.n, r.inner, p.slots[size_t(r.slot)].dtype, r.out_dtype);
}

// How many steps past its last loop a sweep looks for more.
constexpr size_t kLookahead = 12;

class SweepFinder {
 public:
  SweepFinder(const Jaxpr& j, StepSchedule& s, const LoweringTarget& target) : j_(j), s_(s), target_(target) {}

  void run() {
    for (size_t first = 0; first < s_.steps.size();) {
      if (std::optional<RowSweep> sw = extend(first)) {
        s_.sweeps.push_back(*sw);
        keep_passed_values_in_cache(sw->first, sw->last);
        first = sw->last + 1;
      } else {
        ++first;
      }
    }
  }

 private:
  const FusionGroup* group(size_t step) const {
    const Step& st = s_.steps[step];
    return st.kind == Step::Kind::fused ? &s_.groups[st.index] : nullptr;
  }

  // A reduction step of whole rows that a sweep may run: its (rows, n).
  std::optional<std::pair<int64_t, int64_t>> row_reduction(size_t step) const {
    const Step& st = s_.steps[step];
    if (st.kind == Step::Kind::fused) {
      const LoopProgram& p = *s_.groups[st.index].program;
      if (!sweepable_reduction(p, target_) || !target_.tileable_loop(p)) return std::nullopt;
      return std::make_pair(p.reduce->outer, p.reduce->n);
    }
    if (st.kind != Step::Kind::kernel) return std::nullopt;
    const Eqn& e = j_.eqns[st.index];
    if (e.prim != Prim::reduce_sum && e.prim != Prim::reduce_max && e.prim != Prim::reduce_min) return std::nullopt;
    const AVal& x = j_.aval(e.inputs[0]);
    const std::optional<ReduceShape> r = reduce_shape(e, x);
    if (!r || !rows_reducible(target_, r->op, r->outer, r->n, r->inner, x.dtype, j_.aval(e.outputs[0]).dtype)) {
      return std::nullopt;
    }
    return std::make_pair(r->outer, r->n);
  }

  std::vector<Var> reads(size_t step) const { return s_.inputs(j_, s_.steps[step]); }
  std::vector<Var> writes(size_t step) const { return s_.outputs(j_, s_.steps[step]); }

  // The sweep that starts at `first`, if one does. Steps between its loops
  // that read none of its values move before it, and steps that read them
  // but cannot join move after it (with the steps that read theirs).
  std::optional<RowSweep> extend(size_t first) {
    const auto start = row_reduction(first);
    if (!start) return std::nullopt;
    rows_ = start->first;
    row_len_ = start->second;
    values_.clear();
    add_outputs(first);
    std::vector<size_t> before, members = {first}, after;
    std::unordered_set<Var> deferred;
    size_t last_loop = first, loops = 1;
    for (size_t k = first + 1; k < s_.steps.size() && k <= last_loop + kLookahead; ++k) {
      const std::vector<Var> in = reads(k);
      bool of_sweep = false, of_after = false;
      for (Var v : in) {
        of_sweep = of_sweep || values_.count(v);
        of_after = of_after || deferred.count(v);
      }
      const Step& st = s_.steps[k];
      if (st.kind == Step::Kind::impl) break;  // runs on Arrays, in place
      if (!of_after && st.kind == Step::Kind::alias && of_sweep) {
        const Eqn& e = j_.eqns[st.index];
        values_[e.outputs[0]] = values_.at(e.inputs[0]);
        members.push_back(k);
      } else if (!of_after && st.kind != Step::Kind::alias && takes(k)) {
        add_outputs(k);
        members.push_back(k);
        last_loop = k;
        ++loops;
      } else if (!of_sweep && !of_after) {
        before.push_back(k);
      } else {
        after.push_back(k);
        for (Var v : writes(k)) deferred.insert(v);
      }
    }
    if (loops < 2) return std::nullopt;
    // Steps after the last loop stay where they are.
    auto upto = [&](std::vector<size_t>& v) { std::erase_if(v, [&](size_t k) { return k > last_loop; }); };
    upto(before);
    upto(members);
    upto(after);
    std::vector<Step> order;
    for (const auto* part : {&before, &members, &after}) {
      for (size_t k : *part) order.push_back(s_.steps[k]);
    }
    std::copy(order.begin(), order.end(), s_.steps.begin() + int64_t(first));
    RowSweep sw;
    sw.first = first + before.size();
    sw.last = sw.first + members.size() - 1;
    sw.rows = rows_;
    sw.row_len = row_len_;
    return sw;
  }

  void add_outputs(size_t step) {
    for (Var v : writes(step)) {
      const int64_t n = j_.aval(v).shape.numel();
      values_[v] = n == rows_ ? RowShape::per_row : RowShape::whole_rows;
    }
  }

  // Whether step k can join the sweep: a loop or a row reduction over the
  // same rows, reading every value of the sweep for the same row only.
  bool takes(size_t k) const {
    const Step& st = s_.steps[k];
    if (st.kind == Step::Kind::kernel) {
      const auto r = row_reduction(k);
      if (!r || r->first != rows_ || r->second != row_len_) return false;
      const auto it = values_.find(j_.eqns[st.index].inputs[0]);
      return it == values_.end() || it->second == RowShape::whole_rows;
    }
    const FusionGroup* h = group(k);
    if (!h) return false;
    const LoopProgram& p = *h->program;
    const bool whole = p.size == rows_ * row_len_;
    if ((!whole && p.size != rows_) || !target_.tileable_loop(p)) return false;
    if (p.reduce &&
        !(whole && sweepable_reduction(p, target_) && p.reduce->outer == rows_ && p.reduce->n == row_len_)) {
      return false;
    }
    for (const FusedSlot& slot : p.slots) {
      if (slot.kind == FusedSlot::Kind::reg) continue;
      const auto it = values_.find(h->inputs[size_t(slot.arg)]);
      if (it == values_.end()) continue;  // computed before the sweep
      const bool row_value = it->second == RowShape::per_row;
      if (slot.kind == FusedSlot::Kind::input) {
        if (row_value != !whole) return false;  // whole rows read by a loop over rows, or the reverse
      } else if (slot.kind == FusedSlot::Kind::view) {
        if (!whole || !row_value || !is_row_broadcast(slot.dims, slot.strides, rows_, row_len_)) return false;
      } else {
        return false;  // a splat reads one element for every row
      }
    }
    return true;
  }

  // A value stored by one loop of the sweep and read by a later one is read
  // from cache: its stores must not bypass the cache.
  void keep_passed_values_in_cache(size_t first, size_t last) {
    std::unordered_set<Var> read_later;
    for (size_t k = first; k <= last; ++k) {
      if (s_.steps[k].kind == Step::Kind::alias) continue;
      for (Var v : reads(k)) read_later.insert(v);
    }
    // A reshape read later counts for the value it reshapes.
    for (size_t k = last + 1; k-- > first;) {
      if (s_.steps[k].kind != Step::Kind::alias) continue;
      const Eqn& e = j_.eqns[s_.steps[k].index];
      if (read_later.count(e.outputs[0])) read_later.insert(e.inputs[0]);
    }
    for (size_t k = first; k <= last; ++k) {
      if (s_.steps[k].kind != Step::Kind::fused) continue;
      FusionGroup& g = s_.groups[s_.steps[k].index];
      bool change = false;
      for (const FusedStore& st : g.program->stores) {
        change = change || (!st.keep_in_cache && read_later.count(g.outputs[size_t(st.output)]));
      }
      if (!change) continue;
      auto copy = std::make_shared<LoopProgram>(*g.program);
      for (FusedStore& st : copy->stores) {
        if (read_later.count(g.outputs[size_t(st.output)])) st.keep_in_cache = true;
      }
      g.program = std::move(copy);
    }
  }

  const Jaxpr& j_;
  StepSchedule& s_;
  const LoweringTarget& target_;
  int64_t rows_ = 0, row_len_ = 0;
  std::unordered_map<Var, RowShape> values_;  // computed by the sweep so far
};

}  // namespace

bool is_row_broadcast(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t rows,
                      int64_t row_len) {
  if (dims.size() != strides.size()) return false;
  size_t d = dims.size();
  int64_t along = 1;  // trailing elements of a row seen so far
  while (d > 0 && along < row_len) {
    --d;
    if (dims[d] != 1 && strides[d] != 0) return false;
    along *= dims[d];
  }
  if (along != row_len) return false;
  int64_t expect = 1;  // the next stride of a row-major [rows] index
  while (d-- > 0) {
    if (dims[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= dims[d];
  }
  return expect == rows;
}

void find_row_sweeps(const Jaxpr& jaxpr, StepSchedule& schedule, const LoweringTarget& target) {
  schedule.sweeps.clear();
  if (!env_switch("PAX_ROW_SWEEPS", true)) return;
  SweepFinder(jaxpr, schedule, target).run();
}

}  // namespace pax

// Collectives start early (see collective_order.h): a list schedule over the
// steps in which reductions and their cheap feeders run as soon as their
// operands exist, and all_gathers are fetched one use ahead.
#include "pax/compile/collective_order.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "pax/core/error.h"
#include "pax/interp/collective_thread.h"
#include "pax/interp/interpreter.h"
#include "pax/ir/prims.h"

namespace pax {
namespace {

// Steps that rearrange, cast, reduce or compute elementwise in one pass
// over their operands: worth moving with the collective they prepare.
bool cheap(const Jaxpr& j, const Step& s) {
  if (s.kind == Step::Kind::fused || s.kind == Step::Kind::alias) return true;
  if (s.kind != Step::Kind::kernel) return false;
  const Prim p = j.eqns[s.index].prim;
  return prim_family(p) == PrimFamily::shape || prim_family(p) == PrimFamily::reduction ||
         p == Prim::convert_element_type;
}

enum class Role : uint8_t {
  stays,   // keeps its place
  early,   // a reduction or one of its feeders: runs as soon as it can
  gather,  // an all_gather or one of its feeders: fetched one use ahead
};

class Reorder {
 public:
  Reorder(const Jaxpr& j, const StepSchedule& sch) : j_(j), sch_(sch), n_(sch.steps.size()) {
    ins_.resize(n_);
    outs_.resize(n_);
    producer_.assign(j.avals.size(), -1);
    readers_.resize(j.avals.size());
    for (size_t s = 0; s < n_; ++s) {
      ins_[s] = sch.inputs(j, sch.steps[s]);
      std::sort(ins_[s].begin(), ins_[s].end());
      ins_[s].erase(std::unique(ins_[s].begin(), ins_[s].end()), ins_[s].end());
      outs_[s] = sch.outputs(j, sch.steps[s]);
      for (Var v : outs_[s]) producer_[size_t(v)] = int(s);
      for (Var v : ins_[s]) readers_[size_t(v)].push_back(s);
    }
    std::vector<bool> escapes(j.avals.size(), false);
    for (Var v : j.outvars) escapes[size_t(v)] = true;
    role_.assign(n_, Role::stays);
    group_.assign(n_, -1);
    for (size_t s = 0; s < n_; ++s) {
      const Step& step = sch.steps[s];
      if (step.kind != Step::Kind::impl || !moves_data(j.eqns[step.index].prim)) continue;
      any_ = true;
      if (j.eqns[step.index].prim == Prim::all_gather) {
        role_[s] = Role::gather;
        group_[s] = int(groups_.size());
        groups_.emplace_back();
      } else {
        role_[s] = Role::early;
      }
    }
    // Feeders, from the last step back: cheap steps every result of which
    // only collectives of one kind (and their feeders) read.
    for (size_t s = n_; s-- > 0;) {
      if (role_[s] != Role::stays || !cheap(j, sch.steps[s]) || outs_[s].empty()) continue;
      bool all_early = true, one_gather = true;
      int group = -2;
      for (Var v : outs_[s]) {
        if (escapes[size_t(v)] || readers_[size_t(v)].empty()) all_early = one_gather = false;
        for (size_t r : readers_[size_t(v)]) {
          all_early = all_early && role_[r] == Role::early;
          one_gather = one_gather && role_[r] == Role::gather && (group == -2 || group == group_[r]);
          group = group_[r];
        }
      }
      if (all_early) {
        role_[s] = Role::early;
      } else if (one_gather) {
        role_[s] = Role::gather;
        group_[s] = group;
      }
    }
    for (size_t s = 0; s < n_; ++s)
      if (group_[s] >= 0) groups_[size_t(group_[s])].push_back(s);
  }

  bool any() const { return any_; }

  std::vector<Step> order() {
    avail_.assign(j_.avals.size(), false);
    for (size_t v = 0; v < j_.avals.size(); ++v) avail_[v] = producer_[v] < 0;
    missing_.assign(n_, 0);
    emitted_.assign(n_, false);
    for (size_t s = 0; s < n_; ++s) {
      if (role_[s] != Role::early) continue;
      for (Var v : ins_[s]) missing_[s] += !avail_[size_t(v)];
      if (missing_[s] == 0) ready_.push(s);
    }
    flush();
    int last_gather = -1;
    for (size_t s = 0; s < n_; ++s) {
      if (emitted_[s] || role_[s] == Role::early) continue;
      const size_t next = size_t(last_gather + 1);
      if (last_gather >= 0 && next < groups_.size() && reads_group(s, size_t(last_gather)) && group_ready(next)) {
        for (size_t g : groups_[next])
          if (!emitted_[g]) emit(g);
        last_gather = int(next);
        flush();
      }
      if (emitted_[s]) continue;  // fetched just now
      emit(s);
      if (role_[s] == Role::gather && j_.eqns[sch_.steps[s].index].prim == Prim::all_gather)
        last_gather = std::max(last_gather, group_[s]);
      flush();
    }
    PAX_CHECK(order_.size() == n_, "start_collectives_early: ordered ", order_.size(), " of ", n_, " steps");
    std::vector<Step> steps;
    for (size_t s : order_) steps.push_back(sch_.steps[s]);
    return steps;
  }

 private:
  void emit(size_t s) {
    emitted_[s] = true;
    order_.push_back(s);
    for (Var v : outs_[s]) {
      if (avail_[size_t(v)]) continue;
      avail_[size_t(v)] = true;
      for (size_t r : readers_[size_t(v)])
        if (role_[r] == Role::early && --missing_[r] == 0) ready_.push(r);
    }
  }
  void flush() {
    while (!ready_.empty()) {
      const size_t s = ready_.top();
      ready_.pop();
      emit(s);
    }
  }
  bool reads_group(size_t s, size_t group) const {
    for (Var v : ins_[s]) {
      const int p = producer_[size_t(v)];
      if (p >= 0 && group_[size_t(p)] == int(group)) return true;
    }
    return false;
  }
  // Whether every operand from outside the group exists already.
  bool group_ready(size_t group) const {
    for (size_t g : groups_[group])
      for (Var v : ins_[g]) {
        const int p = producer_[size_t(v)];
        if (!avail_[size_t(v)] && (p < 0 || group_[size_t(p)] != int(group))) return false;
      }
    return true;
  }

  const Jaxpr& j_;
  const StepSchedule& sch_;
  const size_t n_;
  bool any_ = false;
  std::vector<std::vector<Var>> ins_, outs_;
  std::vector<int> producer_;
  std::vector<std::vector<size_t>> readers_;
  std::vector<Role> role_;
  std::vector<int> group_;                   // gather group of a gather-role step
  std::vector<std::vector<size_t>> groups_;  // per all_gather: it and its feeders, in order
  std::vector<bool> avail_, emitted_;
  std::vector<int> missing_;
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready_;
  std::vector<size_t> order_;
};

}  // namespace

void start_collectives_early(const Jaxpr& jaxpr, StepSchedule& schedule) {
  if (!overlap_collectives()) return;
  PAX_CHECK(schedule.sweeps.empty(), "start_collectives_early: runs before row sweeps are found");
  Reorder reorder(jaxpr, schedule);
  if (!reorder.any()) return;
  schedule.steps = reorder.order();
}

}  // namespace pax

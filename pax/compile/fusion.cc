// Fusion: grouping equations into fused loops, and building each group's
// register program (see fusion.h).
#include "pax/compile/fusion.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "pax/compile/lowering_target.h"
#include "pax/core/error.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

constexpr size_t kMaxSelectCases = kMaxFusedSelectCases;
constexpr size_t kMaxViewRank = kMaxFusedViewRank;

// ---------------------------------------------------------------------------
// What an equation is to a fused loop.

enum class Role : uint8_t {
  none,       // not fusable
  compute,    // an elementwise instruction
  reshape,    // same elements in the same order (a free alias)
  broadcast,  // a broadcast of a value from outside (a strided read)
  reduce,     // the trailing reduction
};

struct Instr {
  FusedInstr::Kind kind;
  uint8_t op = 0;
};

std::optional<Instr> instr_of(const Eqn& e) {
  using K = FusedInstr::Kind;
  const ElementwiseKernel k = prim_kernel(e.prim);  // prims.def's kernel column
  switch (k.kind) {
    case ElementwiseKernel::Kind::unary: return Instr{K::unary, k.op};
    case ElementwiseKernel::Kind::binary: return Instr{K::binary, k.op};
    case ElementwiseKernel::Kind::compare: return Instr{K::compare, k.op};
    case ElementwiseKernel::Kind::none: return std::nullopt;
    case ElementwiseKernel::Kind::special: break;
  }
  switch (e.prim) {
    case Prim::round:
      return Instr{K::unary, uint8_t(rounds_half_to_even(e.params) ? UnaryOp::round_even : UnaryOp::round_away)};
    case Prim::is_finite: return Instr{K::is_finite};
    case Prim::integer_pow: return Instr{K::integer_pow};
    case Prim::convert_element_type: return Instr{K::convert};
    case Prim::select_n:
      if (e.inputs.size() - 1 > kMaxSelectCases) return std::nullopt;
      return Instr{K::select_n};
    default: PAX_FAIL("fusion: ", prim_name(e.prim), " has a special kernel in prims.def but no instruction here");
  }
}

// A broadcast's read pattern: the operand seen through strides over the
// result's shape (size-1 and contiguous dimensions merged).
struct View {
  std::vector<int64_t> dims, strides;
};

View view_of(const Shape& in, const Shape& out, const Ints& bdims) {
  View v{out.dims(), std::vector<int64_t>(size_t(out.rank()), 0)};
  const std::vector<int64_t> in_strides = in.strides();
  for (size_t i = 0; i < bdims.size(); ++i) {
    if (in[int64_t(i)] != 1) v.strides[size_t(bdims[i])] = in_strides[i];
  }
  coalesce_view(v.dims, v.strides);
  return v;
}

Role role_of(const Jaxpr& j, const Eqn& e, const LoweringTarget& target) {
  // Nullary equations (a large iota that constant folding kept, axis_index)
  // stay steps of their own; so do collectives, which no rule below matches
  // and which every process must enter in the same order.
  if (e.outputs.size() != 1 || e.inputs.empty()) return Role::none;
  const AVal& out = j.aval(e.outputs[0]);
  if (out.shape.numel() == 0) return Role::none;
  if (instr_of(e)) return Role::compute;
  switch (e.prim) {
    case Prim::reshape:
    case Prim::squeeze:
    case Prim::expand_dims: return Role::reshape;
    // A loop's slot keeps the dtype it was loaded as, so a bitcast to another
    // dtype is a step of its own (its output shares the input's bytes) and
    // the loops around it read its result as typed.
    case Prim::bitcast_convert_type: return j.aval(e.inputs[0]).dtype == out.dtype ? Role::reshape : Role::none;
    case Prim::broadcast_in_dim: {
      const AVal& in = j.aval(e.inputs[0]);
      if (in.shape.numel() == out.shape.numel()) return Role::reshape;
      return view_of(in.shape, out.shape, e.params.ints("broadcast_dimensions")).dims.size() <= kMaxViewRank
                 ? Role::broadcast
                 : Role::none;
    }
    default: {
      const AVal& x = j.aval(e.inputs[0]);
      const std::optional<ReduceShape> r = reduce_shape(e, x);
      return r && target.fusable_reduction(r->op, x.dtype, r->outer, r->n, r->inner) ? Role::reduce : Role::none;
    }
  }
}

// ---------------------------------------------------------------------------
// Grouping

struct Group {
  int step;        // position in the schedule
  int64_t domain;  // loop elements
  bool reduce = false, compute = false, alive = true;
  // A step outside the loops has read one of its values: later elementwise
  // equations start a loop of their own rather than join this one (work for
  // the backward pass stays out of the forward loops, and recomputes from
  // their inputs); a trailing reduction may still join.
  bool sealed = false;
  Var reduced = -1;  // its reduction's result
  int max_ext = -1;  // latest step among the values read from outside
  std::vector<size_t> members;
};

// One position of the schedule being built: a group, or a single equation
// (floating: a broadcast that runs only if something besides loops reads it).
struct Slot {
  int group = -1;
  size_t eqn = 0;
  bool floating = false;
};

class Grouper {
 public:
  Grouper(const Jaxpr& j, const LoweringTarget& target)
      : j_(j),
        target_(target),
        group_of_(j.avals.size(), -1),
        avail_(j.avals.size(), -1),
        computed_(j.avals.size(), false),
        floating_(j.avals.size(), -1) {}

  void run(bool fuse) {
    for (const Eqn& e : j_.eqns) roles_.push_back(fuse ? role_of(j_, e, target_) : Role::none);
    for (size_t k = 0; k < j_.eqns.size(); ++k) visit(k, roles_[k]);
  }

  const std::vector<Slot>& order() const { return order_; }
  const std::vector<Group>& groups() const { return groups_; }
  // The broadcast equation that produces v, when loops read it as a view.
  const std::vector<int>& floating() const { return floating_; }

 private:
  int64_t numel(Var v) const { return j_.aval(v).shape.numel(); }
  // The group v is an elementwise value of, when that group's domain is n.
  int internal(Var v, int64_t n) const {
    const int g = group_of_[size_t(v)];
    return g >= 0 && numel(v) == n ? g : -1;
  }

  void single(size_t k) {
    const int s = int(order_.size());
    order_.push_back({-1, k});
    for (Var o : j_.eqns[k].outputs) avail_[size_t(o)] = s;
    for (Var v : j_.eqns[k].inputs) {
      if (const int g = group_of_[size_t(v)]; g >= 0) groups_[size_t(g)].sealed = true;
    }
  }

  void visit(size_t k, Role role) {
    const Eqn& e = j_.eqns[k];
    visiting_ = int(k);
    if (role == Role::broadcast) {
      // Every loop reading it reads its operand through a view instead.
      order_.push_back({-1, k, true});
      avail_[size_t(e.outputs[0])] = avail_[size_t(e.inputs[0])];
      floating_[size_t(e.outputs[0])] = int(k);
      return;
    }
    if (role == Role::reshape && floating_[size_t(e.inputs[0])] >= 0) role = Role::none;
    if (role == Role::none) return single(k);
    const int64_t n = role == Role::reduce ? numel(e.inputs[0]) : numel(e.outputs[0]);
    if (role == Role::reduce && (internal(e.inputs[0], n) < 0 || !computed_[size_t(e.inputs[0])])) return single(k);
    std::vector<int> candidates;
    for (Var v : e.inputs) {
      const int g = internal(v, n);
      if (g >= 0 && std::find(candidates.begin(), candidates.end(), g) == candidates.end()) candidates.push_back(g);
    }
    std::sort(candidates.begin(), candidates.end(),
              [&](int a, int b) { return groups_[size_t(a)].step < groups_[size_t(b)].step; });
    for (int g : candidates) {
      std::vector<int> merges;
      if (!can_join(g, e, n, role, merges)) continue;
      for (int h : merges) merge(h, g);
      return add(g, k, role);
    }
    Group fresh;
    fresh.step = int(order_.size());
    fresh.domain = n;
    groups_.push_back(fresh);
    order_.push_back({int(groups_.size()) - 1, 0});
    add(int(groups_.size()) - 1, k, role);
  }

  // Whether e can run inside group g: every operand is g's own value, a
  // value of a later group that can move into g, or available before g runs.
  bool can_join(int g, const Eqn& e, int64_t n, Role role, std::vector<int>& merges) const {
    const Group& G = groups_[size_t(g)];
    bool reduce = G.reduce || role == Role::reduce;
    if ((G.sealed && role != Role::reduce) || (G.reduce && role == Role::reduce)) return false;
    if (G.reduce && role != Role::reduce && meets_before(G.reduced, e, visiting_)) return false;
    for (Var v : e.inputs) {
      const int h = internal(v, n);
      if (h == g || std::find(merges.begin(), merges.end(), h) != merges.end()) continue;
      if (h >= 0 && groups_[size_t(h)].step > G.step) {
        const Group& H = groups_[size_t(h)];
        if (H.sealed || H.max_ext >= G.step || (H.reduce && reduce)) return false;
        reduce = reduce || H.reduce;
        merges.push_back(h);
        continue;
      }
      if (avail_[size_t(v)] >= G.step) return false;
    }
    return true;
  }

  static constexpr int kNever = std::numeric_limits<int>::max();

  // Whether e, placed at equation k, computes a value that is later
  // combined elementwise with a value computed from reduction result r that
  // exists before k (a train step's update, kept or dropped by a scalar
  // decided by the gradients' norm). Such an e starts a loop of its own
  // rather than join r's loop: the combination can then join e's loop,
  // instead of being a pass that reads e's values back.
  bool meets_before(Var r, const Eqn& e, int k) const {
    if (r < 0) return false;
    const std::vector<int>& meet = meet_positions(r);
    for (Var o : e.outputs) {
      if (meet[size_t(o)] < k) return true;
    }
    return false;
  }

  const std::vector<int>& meet_positions(Var r) const {
    if (const auto it = meets_.find(r); it != meets_.end()) return it->second;
    const size_t n = j_.avals.size();
    // The values computed from r, and the equation after which each exists
    // (a broadcast or reshape of one when its operand does: loops read them
    // as views).
    std::vector<int> from_r(n, -1);
    size_t first = 0;
    while (first < j_.eqns.size() &&
           std::find(j_.eqns[first].outputs.begin(), j_.eqns[first].outputs.end(), r) == j_.eqns[first].outputs.end()) {
      ++first;
    }
    from_r[size_t(r)] = int(first);
    for (size_t k = first + 1; k < j_.eqns.size(); ++k) {
      const Eqn& f = j_.eqns[k];
      int at = -1;
      for (Var v : f.inputs) at = std::max(at, from_r[size_t(v)]);
      if (at < 0) continue;
      const bool view = f.prim == Prim::broadcast_in_dim || f.prim == Prim::reshape;
      for (Var o : f.outputs) from_r[size_t(o)] = view ? at : int(k);
    }
    std::vector<int> meet(n, kNever);
    for (size_t k = j_.eqns.size(); k-- > 0;) {
      const Eqn& f = j_.eqns[k];
      if (roles_[k] != Role::compute) continue;
      int m = kNever;
      for (Var w : f.inputs) {
        if (from_r[size_t(w)] >= 0) m = std::min(m, from_r[size_t(w)]);
      }
      for (Var o : f.outputs) m = std::min(m, meet[size_t(o)]);
      if (m == kNever) continue;
      const int64_t size = numel(f.outputs[0]);
      for (Var v : f.inputs) {
        if (from_r[size_t(v)] < 0 && numel(v) == size) meet[size_t(v)] = std::min(meet[size_t(v)], m);
      }
    }
    return meets_.emplace(r, std::move(meet)).first->second;
  }

  void merge(int h, int g) {
    Group& H = groups_[size_t(h)];
    Group& G = groups_[size_t(g)];
    for (size_t m : H.members) {
      G.members.push_back(m);
      for (Var o : j_.eqns[m].outputs) {
        if (group_of_[size_t(o)] == h) group_of_[size_t(o)] = g;
        avail_[size_t(o)] = G.step;
      }
    }
    G.max_ext = std::max(G.max_ext, H.max_ext);
    if (H.reduce) G.reduced = H.reduced;
    G.reduce = G.reduce || H.reduce;
    G.compute = G.compute || H.compute;
    H.alive = false;
    H.members.clear();
  }

  void add(int g, size_t k, Role role) {
    Group& G = groups_[size_t(g)];
    const Eqn& e = j_.eqns[k];
    G.members.push_back(k);
    G.compute = G.compute || role == Role::compute;
    G.reduce = G.reduce || role == Role::reduce;
    for (Var v : e.inputs) {
      if (internal(v, G.domain) != g) G.max_ext = std::max(G.max_ext, avail_[size_t(v)]);
    }
    for (Var o : e.outputs) {
      avail_[size_t(o)] = G.step;
      if (role == Role::reduce) {
        G.reduced = o;
        continue;
      }
      group_of_[size_t(o)] = g;
      computed_[size_t(o)] = role == Role::compute || (role == Role::reshape && computed_[size_t(e.inputs[0])]);
    }
  }

  const Jaxpr& j_;
  const LoweringTarget& target_;
  std::vector<Slot> order_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;   // per var: the group it is an elementwise value of
  std::vector<int> avail_;      // per var: the step after which it exists (-1: inputs, consts)
  std::vector<bool> computed_;  // per var: produced by an instruction (not a view of an input)
  std::vector<int> floating_;   // per var: the broadcast producing it, or -1
  std::vector<Role> roles_;     // per equation
  int visiting_ = 0;            // the equation being placed
  // Per reduction result r (made when first asked, meet_positions): per
  // value, the first equation after which a value computed from r exists that
  // an elementwise equation of the value's size combines with it, or with
  // a value computed from it elementwise; kNever if none does.
  mutable std::unordered_map<Var, std::vector<int>> meets_;
};

// ---------------------------------------------------------------------------
// Program building

class ProgramBuilder {
 public:
  ProgramBuilder(const Jaxpr& j, const std::vector<int>& floating, FusionGroup& g, int64_t domain)
      : j_(j), floating_(floating), g_(g) {
    g.size = domain;
    p_.size = domain;
  }

  void add(const Eqn& e, Role role) {
    const Var o = e.outputs[0];
    switch (role) {
      case Role::reshape: slot_[o] = operand(e.inputs[0]); break;
      case Role::compute: slot_[o] = instruction(e); break;
      case Role::reduce: {
        const ReduceShape r = *reduce_shape(e, j_.aval(e.inputs[0]));
        FusedReduce red;
        red.op = r.op;
        red.slot = slot_.at(e.inputs[0]);
        red.outer = r.outer;
        red.n = r.n;
        red.inner = r.inner;
        red.out_dtype = j_.aval(o).dtype;
        p_.reduce = red;
        break;
      }
      case Role::broadcast:
      case Role::none: PAX_FAIL("fusion: equation ", prim_name(e.prim), " is not a loop member");
    }
  }

  // Marks v (a value of the group) as written by the loop.
  void output(Var v, bool reduced) {
    const int index = int(g_.outputs.size());
    g_.outputs.push_back(v);
    if (reduced) p_.reduce->output = index;
    else p_.stores.push_back({slot_.at(v), index});
  }

  void finish() {
    p_.num_inputs = int(g_.inputs.size());
    p_.num_outputs = int(g_.outputs.size());
    std::sort(g_.eqns.begin(), g_.eqns.end());
    g_.has_reduction = p_.reduce.has_value();
    g_.program = std::make_shared<const LoopProgram>(std::move(p_));
  }

 private:
  int new_slot(FusedSlot s) {
    p_.slots.push_back(std::move(s));
    return int(p_.slots.size()) - 1;
  }

  int input_index(Var v, bool contiguous) {
    auto it = std::find(g_.inputs.begin(), g_.inputs.end(), v);
    if (it == g_.inputs.end()) {
      g_.inputs.push_back(v);
      g_.contiguous.push_back(contiguous);
      return int(g_.inputs.size()) - 1;
    }
    const size_t i = size_t(it - g_.inputs.begin());
    g_.contiguous[i] = g_.contiguous[i] && contiguous;
    return int(i);
  }

  // The slot of a value of the loop's domain: the group's own, a broadcast
  // read through a view, or a contiguous read of an input.
  int operand(Var v) {
    auto it = slot_.find(v);
    if (it != slot_.end()) return it->second;
    if (const int k = floating_[size_t(v)]; k >= 0) {
      g_.eqns.push_back(size_t(k));
      return slot_[v] = broadcast(j_.eqns[size_t(k)]);
    }
    auto in = direct_.find(v);
    if (in != direct_.end()) return in->second;
    PAX_CHECK(j_.aval(v).shape.numel() == p_.size, "fusion: ", var_name(v), ":", j_.aval(v).str(),
              " is read by a loop of ", p_.size, " elements");
    FusedSlot s;
    s.kind = FusedSlot::Kind::input;
    s.dtype = j_.aval(v).dtype;
    s.arg = input_index(v, true);
    return direct_[v] = new_slot(std::move(s));
  }

  int splat(Var v, int64_t clamp_hi) {
    FusedSlot s;
    s.kind = FusedSlot::Kind::splat;
    s.dtype = j_.aval(v).dtype;
    s.arg = input_index(v, false);
    s.clamp_hi = clamp_hi;
    return new_slot(std::move(s));
  }

  int broadcast(const Eqn& e) {
    const Var x = e.inputs[0];
    View view = view_of(j_.aval(x).shape, j_.aval(e.outputs[0]).shape, e.params.ints("broadcast_dimensions"));
    bool zero = true;
    for (int64_t s : view.strides) zero = zero && s == 0;
    if (zero) return splat(x, -1);
    FusedSlot s;
    s.kind = FusedSlot::Kind::view;
    s.dtype = j_.aval(x).dtype;
    s.arg = input_index(x, false);
    s.dims = std::move(view.dims);
    s.strides = std::move(view.strides);
    return new_slot(std::move(s));
  }

  int instruction(const Eqn& e) {
    const Instr what = *instr_of(e);
    FusedInstr ins;
    ins.kind = what.kind;
    ins.op = what.op;
    ins.dtype = j_.aval(e.inputs[0]).dtype;
    ins.out_dtype = j_.aval(e.outputs[0]).dtype;
    if (what.kind == FusedInstr::Kind::integer_pow) ins.exponent = e.params.i("y");
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      const Var v = e.inputs[i];
      if (e.prim == Prim::select_n && i == 0 && j_.aval(v).shape.numel() != p_.size) {
        // A scalar selector: the kernel clamps an int32 one.
        ins.args.push_back(splat(v, j_.aval(v).dtype == DType::i32 ? int64_t(e.inputs.size()) - 2 : -1));
      } else {
        ins.args.push_back(operand(v));
      }
    }
    FusedSlot r;
    r.kind = FusedSlot::Kind::reg;
    r.dtype = ins.out_dtype;
    ins.result = new_slot(std::move(r));
    p_.instrs.push_back(std::move(ins));
    return p_.instrs.back().result;
  }

  const Jaxpr& j_;
  const std::vector<int>& floating_;
  FusionGroup& g_;
  LoopProgram p_;
  std::unordered_map<Var, int> slot_;    // group values
  std::unordered_map<Var, int> direct_;  // contiguous input reads
};

// ---------------------------------------------------------------------------
// Assembling the schedule

class ScheduleBuilder {
 public:
  ScheduleBuilder(const Jaxpr& j, const Grouper& grouper, const LoweringTarget& target)
      : j_(j), grouper_(grouper), target_(target) {}

  StepSchedule build() {
    // Which values are read outside the group (or step) that produces them.
    std::vector<int> eqn_group(j_.eqns.size(), -1);
    for (size_t g = 0; g < grouper_.groups().size(); ++g) {
      for (size_t m : grouper_.groups()[g].members) eqn_group[m] = int(g);
    }
    std::vector<int> producer_group(j_.avals.size(), -2);
    for (size_t k = 0; k < j_.eqns.size(); ++k) {
      for (Var o : j_.eqns[k].outputs) producer_group[size_t(o)] = eqn_group[k];
    }
    escapes_.assign(j_.avals.size(), false);
    for (size_t k = 0; k < j_.eqns.size(); ++k) {
      for (Var v : j_.eqns[k].inputs) {
        if (producer_group[size_t(v)] != eqn_group[k] || eqn_group[k] < 0) escapes_[size_t(v)] = true;
      }
    }
    for (Var v : j_.outvars) escapes_[size_t(v)] = true;
    // Broadcasts are materialised only for readers other than loops.
    needed_.assign(j_.avals.size(), false);
    for (size_t k = 0; k < j_.eqns.size(); ++k) {
      const int g = eqn_group[k];
      if (g >= 0 && grouper_.groups()[size_t(g)].compute) continue;
      for (Var v : j_.eqns[k].inputs) needed_[size_t(v)] = true;
    }
    for (Var v : j_.outvars) needed_[size_t(v)] = true;

    for (const Slot& slot : grouper_.order()) {
      if (slot.floating) {
        if (needed_[size_t(j_.eqns[slot.eqn].outputs[0])]) single(slot.eqn);
        continue;
      }
      if (slot.group < 0) {
        single(slot.eqn);
        continue;
      }
      const Group& g = grouper_.groups()[size_t(slot.group)];
      if (!g.alive) continue;
      std::vector<size_t> members = g.members;
      std::sort(members.begin(), members.end());
      if (!g.compute) {
        for (size_t m : members) single(m);
        continue;
      }
      fused(g, members);
    }
    return std::move(out_);
  }

 private:
  void single(size_t k) { out_.steps.push_back({step_kind(j_.eqns[k].prim), k}); }

  void fused(const Group& g, const std::vector<size_t>& members) {
    // Values needed outside: instruction results are stored by the loop;
    // reshapes run after it as steps of their own (their operand is stored).
    std::vector<size_t> post;
    for (size_t i = members.size(); i-- > 0;) {
      const Eqn& e = j_.eqns[members[i]];
      if (!escapes_[size_t(e.outputs[0])] || role_of(j_, e, target_) != Role::reshape) continue;
      post.insert(post.begin(), members[i]);
      escapes_[size_t(e.inputs[0])] = true;
    }
    FusionGroup fg;
    fg.eqns = members;
    ProgramBuilder b(j_, grouper_.floating(), fg, g.domain);
    for (size_t m : members) b.add(j_.eqns[m], role_of(j_, j_.eqns[m], target_));
    for (size_t m : members) {
      const Eqn& e = j_.eqns[m];
      const Role role = role_of(j_, e, target_);
      if ((role == Role::compute || role == Role::reduce) && escapes_[size_t(e.outputs[0])]) {
        b.output(e.outputs[0], role == Role::reduce);
      }
    }
    b.finish();
    out_.steps.push_back({Step::Kind::fused, out_.groups.size()});
    out_.groups.push_back(std::move(fg));
    for (size_t m : post) single(m);
  }

  const Jaxpr& j_;
  const Grouper& grouper_;
  const LoweringTarget& target_;
  std::vector<bool> escapes_;  // per var: read outside the group that computes it
  std::vector<bool> needed_;   // per var: read by a step other than a loop
  StepSchedule out_;
};

std::string decl(const Jaxpr& j, Var v) {
  std::string s = var_name(v);
  s += ':';
  s += j.aval(v).str();
  return s;
}

std::string eqn_str(const Jaxpr& j, const Eqn& e) {
  std::ostringstream os;
  for (size_t i = 0; i < e.outputs.size(); ++i) os << (i ? " " : "") << decl(j, e.outputs[i]);
  os << " = " << prim_name(e.prim);
  if (!e.params.empty()) os << "[" << e.params.str() << "]";
  for (Var v : e.inputs) os << " " << var_name(v);
  return os.str();
}

}  // namespace

std::optional<ReduceShape> reduce_shape(const Eqn& e, const AVal& x) {
  ReduceShape r;
  switch (e.prim) {
    case Prim::reduce_sum: r.op = ReduceOp::sum; break;
    case Prim::reduce_max: r.op = ReduceOp::max; break;
    case Prim::reduce_min: r.op = ReduceOp::min; break;
    default: return std::nullopt;
  }
  std::vector<bool> reduced(size_t(x.shape.rank()), false);
  for (int64_t a : e.params.ints("axes")) reduced[size_t(a < 0 ? a + x.shape.rank() : a)] = true;
  std::vector<std::pair<bool, int64_t>> groups;
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    if (x.shape[d] == 1) continue;
    if (!groups.empty() && groups.back().first == reduced[size_t(d)]) groups.back().second *= x.shape[d];
    else groups.emplace_back(reduced[size_t(d)], x.shape[d]);
  }
  if (groups.size() == 1 && groups[0].first) {
    r.n = groups[0].second;
  } else if (groups.size() == 2 && !groups[0].first) {
    r.outer = groups[0].second;
    r.n = groups[1].second;
  } else if (groups.size() == 2) {
    r.n = groups[0].second;
    r.inner = groups[1].second;
  } else {
    return std::nullopt;
  }
  return r;
}

Step::Kind step_kind(Prim p) {
  const PrimDef& def = prim_def(p);
  if (def.impl) return Step::Kind::impl;
  if (def.output_aliases_input >= 0) return Step::Kind::alias;
  return Step::Kind::kernel;
}

std::string var_name(Var v) {
  std::string s;
  int64_t n = v;
  do {
    s.push_back(char('a' + n % 26));
    n /= 26;
  } while (n > 0);
  return std::string(s.rbegin(), s.rend());
}

StepSchedule schedule(const Jaxpr& jaxpr, bool fuse, const LoweringTarget& target) {
  Grouper grouper(jaxpr, target);
  grouper.run(fuse);
  return ScheduleBuilder(jaxpr, grouper, target).build();
}

std::vector<int> StepSchedule::sweep_of_steps() const {
  std::vector<int> of(steps.size(), -1);
  for (size_t k = 0; k < sweeps.size(); ++k) {
    for (size_t s = sweeps[k].first; s <= sweeps[k].last; ++s) of[s] = int(k);
  }
  return of;
}

std::vector<Var> StepSchedule::inputs(const Jaxpr& j, const Step& s) const {
  return s.kind == Step::Kind::fused ? groups[s.index].inputs : j.eqns[s.index].inputs;
}

std::vector<Var> StepSchedule::outputs(const Jaxpr& j, const Step& s) const {
  return s.kind == Step::Kind::fused ? groups[s.index].outputs : j.eqns[s.index].outputs;
}

std::string StepSchedule::str(const Jaxpr& j, const std::function<std::string(size_t group)>& notes) const {
  std::ostringstream os;
  os << "{ lambda ";
  for (size_t i = 0; i < j.constvars.size(); ++i) os << (i ? " " : "") << decl(j, j.constvars[i]);
  os << "; ";
  for (size_t i = 0; i < j.invars.size(); ++i) os << (i ? " " : "") << decl(j, j.invars[i]);
  os << ". let\n";
  size_t next_sweep = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    if (next_sweep < sweeps.size() && sweeps[next_sweep].first == k) {
      const RowSweep& sw = sweeps[next_sweep++];
      os << "    # row sweep of the next " << sw.last - sw.first + 1 << " steps over " << sw.rows << " rows of "
         << sw.row_len << "\n";
    }
    if (s.kind != Step::Kind::fused) {
      os << "    " << eqn_str(j, j.eqns[s.index]) << "\n";
      continue;
    }
    const FusionGroup& g = groups[s.index];
    os << "    ";
    for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? " " : "") << decl(j, g.outputs[i]);
    os << " = fusion[size=" << g.size << (notes ? notes(s.index) : "") << "]{\n";
    for (size_t m : g.eqns) os << "        " << eqn_str(j, j.eqns[m]) << "\n";
    os << "      }";
    for (Var v : g.inputs) os << " " << var_name(v);
    os << "\n";
  }
  os << "  in (";
  for (size_t i = 0; i < j.outvars.size(); ++i) os << (i ? ", " : "") << var_name(j.outvars[i]);
  if (j.outvars.size() == 1) os << ",";
  os << ") }";
  return os.str();
}

}  // namespace pax

// Producer duplication for fusion: an elementwise value computed from
// narrower values by a short chain of cheap operations (a bf16 -> f32
// convert, the select of a mask applied to it, a scaling, ...) is recomputed
// inside every loop that reads it, instead of being written by one loop and
// read back by the others. Reading the narrow sources again costs less
// memory traffic than storing and reloading the wide value, and the value is
// then stored only for readers that are not loops (a matmul, a gather) or not
// at all (XLA duplicates producers into their consumers the same way).
//
// Transcendental operations (exp, tanh, log, logistic) are not recomputed:
// their dozens of vector operations per element cost more than storing the
// value and reading it back, so a softmax computes its exponentials once
// (the sum's loop stores them, the division's loop reads them) and a GELU's
// backward reads the forward's tanh. In the bf16 GPT step of bench/gpt_step
// the attention softmax's division loop went from 1.06 to 0.33 ms a call.
//
// It works on a first schedule: a loop that reads a value computed by
// another loop gets its own copy of the producing chain, placed just before
// the loop's first equation that reads it (later readers share the copy),
// when the chain is at most kMaxChain elementwise equations and the
// full-size values it starts from take no more bytes per element than the
// value itself (broadcasts of smaller arrays and scalars count nothing; a
// chain stops at values that are stored anyway, for a matmul say, and at
// transcendental results). On a tie the chain is recomputed, so the value
// need not be stored at all, unless it is stored anyway: a softmax's
// backward reads the probabilities the attention's matmul reads, rather than
// the exponentials and their sums, which then stay inside the forward's
// loops. The originals that no longer have readers are dropped by dce, and
// the program is scheduled again. Runs after cse, which would merge the
// copies back.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pax/compile/fusion.h"
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {
namespace {

constexpr int kMaxChain = 10;
constexpr size_t kTooLong = size_t(1) << 20;

class Duplicator {
 public:
  Duplicator(const Jaxpr& j, const StepSchedule& s) : j_(j), producer_(j.avals.size(), -1), loop_(j.eqns.size(), -1) {
    for (size_t k = 0; k < j.eqns.size(); ++k) {
      for (Var o : j.eqns[k].outputs) producer_[size_t(o)] = int(k);
    }
    for (size_t g = 0; g < s.groups.size(); ++g) {
      for (size_t k : s.groups[g].eqns) {
        if (j.eqns[k].prim != Prim::broadcast_in_dim) loop_[k] = int(g);
      }
    }
    stored_.assign(j.avals.size(), false);
    for (Var v : j.outvars) stored_[size_t(v)] = true;
    for (size_t k = 0; k < j.eqns.size(); ++k) {
      if (loop_[k] >= 0) continue;
      for (Var v : j.eqns[k].inputs) stored_[size_t(v)] = true;
    }
  }

  // The program with the copies, or nullopt when no loop needs one.
  std::optional<Jaxpr> run() {
    Jaxpr out = passes::copy_header(j_);
    bool changed = false;
    for (size_t k = 0; k < j_.eqns.size(); ++k) {
      Eqn copy = j_.eqns[k];
      if (loop_[k] >= 0) {
        std::unordered_map<Var, Var>& copies = copies_[loop_[k]];  // shared by the loop's readers
        for (Var& v : copy.inputs) {
          if (!duplicable(v) || loop_[size_t(producer_[size_t(v)])] == loop_[k]) continue;
          // A value stored anyway (for a matmul, say) is read where it is,
          // unless its chain reads fewer bytes.
          const size_t leaves = leaf_bytes(v, j_.aval(v).shape.numel()), own = itemsize(j_.aval(v).dtype);
          if (leaves > own || (stored_[size_t(v)] && leaves == own)) continue;
          v = emit_chain(v, out, copies);
          changed = true;
        }
      }
      out.eqns.push_back(std::move(copy));
    }
    if (!changed) return std::nullopt;
    out.outvars = j_.outvars;
    return dce(out);
  }

 private:
  const Eqn* producer(Var v) const {
    const int k = size_t(v) < producer_.size() ? producer_[size_t(v)] : -1;
    return k >= 0 ? &j_.eqns[size_t(k)] : nullptr;
  }

  bool duplicable(Var v) const {
    const Eqn* p = producer(v);
    return p && p->outputs.size() == 1 && prim_recomputable(p->prim) && j_.aval(v).shape.numel() > 1;
  }
  // Whether a chain reads u rather than recomputing it: u is stored anyway
  // (for a reader that is not a loop, or as an output), or is not recomputable.
  bool chain_leaf(Var u) const { return stored_[size_t(u)] || !duplicable(u); }

  // Bytes per element that the chain producing v (of n elements) reads from
  // full-size values, each counted once; kTooLong when the chain has more
  // than kMaxChain equations.
  size_t leaf_bytes(Var v, int64_t n) const {
    std::unordered_set<Var> chain, leaves;
    std::vector<Var> todo = {v};
    size_t bytes = 0;
    while (!todo.empty()) {
      const Var w = todo.back();
      todo.pop_back();
      if (!chain.insert(w).second) continue;
      if (chain.size() > size_t(kMaxChain)) return kTooLong;
      for (Var u : producer(w)->inputs) {
        const AVal& a = j_.aval(u);
        if (a.shape.numel() != n || from_smaller(u)) continue;
        if (!chain_leaf(u)) todo.push_back(u);
        else if (leaves.insert(u).second) bytes += itemsize(a.dtype);
      }
    }
    return bytes;
  }

  // A broadcast of a smaller array: loops read it through a view.
  bool from_smaller(Var u) const {
    const Eqn* p = producer(u);
    return p && p->prim == Prim::broadcast_in_dim && j_.aval(p->inputs[0]).shape.numel() < j_.aval(u).shape.numel();
  }

  Var emit_chain(Var v, Jaxpr& out, std::unordered_map<Var, Var>& copies) {
    if (auto it = copies.find(v); it != copies.end()) return it->second;
    const Eqn& p = *producer(v);
    const int64_t n = j_.aval(v).shape.numel();
    Eqn copy{p.prim, {}, {}, p.params};
    for (Var u : p.inputs) {
      const bool chain = j_.aval(u).shape.numel() == n && !from_smaller(u) && !chain_leaf(u);
      copy.inputs.push_back(chain ? emit_chain(u, out, copies) : u);
    }
    const Var nv = out.new_var(j_.aval(v));
    copy.outputs.push_back(nv);
    out.eqns.push_back(std::move(copy));
    return copies[v] = nv;
  }

  const Jaxpr& j_;
  std::vector<int> producer_;                                     // per var: the equation computing it, or -1
  std::vector<int> loop_;                                         // per equation: the fused loop running it, or -1
  std::vector<bool> stored_;                                      // per var: an output, or read outside the loops
  std::unordered_map<int, std::unordered_map<Var, Var>> copies_;  // per loop: original -> copy
};

}  // namespace

std::optional<Jaxpr> duplicate_producers(const Jaxpr& j, const StepSchedule& s) { return Duplicator(j, s).run(); }

}  // namespace pax

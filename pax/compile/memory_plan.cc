// Memory planning (see memory_plan.h): storages, liveness, in-place fused
// outputs, donation candidates and the arena layout.
#include "pax/compile/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "pax/core/error.h"

namespace pax {
namespace {

constexpr size_t kAlign = 64;

size_t align(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t nbytes_of(const AVal& a) { return size_t(a.shape.numel()) * itemsize(a.dtype); }

std::string bytes_str(size_t n) {
  std::ostringstream os;
  os.precision(3);
  if (n >= (size_t(1) << 20)) os << double(n) / double(1 << 20) << " MiB";
  else if (n >= 1024) os << double(n) / 1024.0 << " KiB";
  else os << n << " B";
  return os.str();
}

class Planner {
 public:
  Planner(const Jaxpr& j, const StepSchedule& s, const std::vector<bool>& donate)
      : j_(j), s_(s), donate_(donate), num_steps_(int(s.steps.size())) {}

  MemoryPlan run() {
    p_.storage_of.assign(j_.avals.size(), -1);
    for (size_t i = 0; i < j_.constvars.size(); ++i) make(Storage::Kind::constant, j_.constvars[i], -1, int(i));
    for (size_t i = 0; i < j_.invars.size(); ++i) make(Storage::Kind::argument, j_.invars[i], -1, int(i));
    liveness();
    sweep_lifetimes();
    parent_.resize(p_.storages.size());
    std::iota(parent_.begin(), parent_.end(), 0);
    sweep_locals();
    in_place();
    donations();
    layout();
    releases();
    return std::move(p_);
  }

 private:
  int make(Storage::Kind kind, Var v, int def, int index = -1) {
    Storage st;
    st.kind = kind;
    st.var = v;
    st.index = index;
    st.nbytes = nbytes_of(j_.aval(v));
    st.def_step = def;
    st.last_step = def;
    p_.storages.push_back(st);
    p_.storage_of[size_t(v)] = int(p_.storages.size()) - 1;
    return int(p_.storages.size()) - 1;
  }

  Storage& storage(Var v) {
    const int id = p_.storage_of[size_t(v)];
    PAX_CHECK(id >= 0, "memory plan: ", var_name(v), " is read before it is written");
    return p_.storages[size_t(id)];
  }

  void liveness() {
    for (int s = 0; s < num_steps_; ++s) {
      const Step& step = s_.steps[size_t(s)];
      if (step.kind == Step::Kind::alias) {
        const Eqn& e = j_.eqns[step.index];
        storage(e.inputs[0]);
        p_.storage_of[size_t(e.outputs[0])] = p_.storage_of[size_t(e.inputs[0])];
        continue;
      }
      for (Var v : s_.inputs(j_, step)) {
        Storage& st = storage(v);
        st.last_step = std::max(st.last_step, s);
        // impl rules take Arrays, which need buffers of their own.
        if (step.kind == Step::Kind::impl && st.kind == Storage::Kind::arena) st.kind = Storage::Kind::buffer;
      }
      const Storage::Kind kind = step.kind == Step::Kind::impl ? Storage::Kind::buffer : Storage::Kind::arena;
      for (Var v : s_.outputs(j_, step)) make(kind, v, s);
    }
    for (Var v : j_.outvars) {
      Storage& st = storage(v);
      st.last_step = num_steps_;
      if (st.kind == Storage::Kind::arena || st.kind == Storage::Kind::buffer) st.kind = Storage::Kind::output;
    }
    for (Storage& st : p_.storages) {
      if (st.kind == Storage::Kind::argument && num_steps_ > 0) st.last_step = std::max(st.last_step, 0);
    }
  }

  // The loops of a row sweep run interleaved, a tile of rows at a time: every
  // value a sweep reads or writes lives through the whole sweep (see
  // sweep_in_place for the writes in place it allows).
  void sweep_lifetimes() {
    sweep_of_ = s_.sweep_of_steps();
    last_read_.resize(p_.storages.size());
    for (size_t i = 0; i < p_.storages.size(); ++i) last_read_[i] = p_.storages[i].last_step;
    for (const RowSweep& sw : s_.sweeps) {
      const int first = int(sw.first), last = int(sw.last);
      for (Storage& st : p_.storages) {
        if (st.def_step >= first && st.def_step <= last) st.def_step = first;
        if (st.last_step >= first && st.last_step <= last) st.last_step = last;
      }
    }
  }

  // Arena values written by a sweep's loops, of whole rows, that only the
  // sweep's steps read.
  void sweep_locals() {
    for (const RowSweep& sw : s_.sweeps) {
      for (size_t k = sw.first; k <= sw.last; ++k) {
        if (s_.steps[k].kind != Step::Kind::fused) continue;
        for (Var v : s_.groups[s_.steps[k].index].outputs) {
          Storage& st = storage(v);
          if (st.kind == Storage::Kind::arena && st.last_step == int(sw.last) &&
              j_.aval(v).shape.numel() == sw.rows * sw.row_len) {
            st.kind = Storage::Kind::sweep_local;
          }
        }
      }
    }
  }

  // Whether a loop of a row sweep may write its output over input storage
  // `id`: a value from before the sweep, not read after it, whose last
  // reader is this loop (step s), and which every step of the sweep reads
  // contiguously, so that each tile's rows of it are read, by this tile's
  // steps, before this loop overwrites them.
  bool sweep_in_place(int s, int id) const {
    const RowSweep& sw = s_.sweeps[size_t(sweep_of_[size_t(s)])];
    const Storage& st = p_.storages[size_t(id)];
    if (st.def_step >= int(sw.first) || st.last_step != int(sw.last) || last_read_[size_t(id)] != s) return false;
    for (size_t k = sw.first; k <= sw.last; ++k) {
      const Step& step = s_.steps[k];
      if (step.kind == Step::Kind::fused && !read_contiguously(s_.groups[step.index], id)) return false;
    }
    return true;
  }

  // Whether every read of storage `id` by fused group `g` is contiguous.
  bool read_contiguously(const FusionGroup& g, int id) const {
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      if (p_.storage_of[size_t(g.inputs[i])] == id && !g.contiguous[i]) return false;
    }
    return true;
  }

  int find(int b) {
    while (parent_[size_t(b)] != b) b = parent_[size_t(b)] = parent_[size_t(parent_[size_t(b)])];
    return b;
  }

  void in_place() {
    std::vector<bool> claimed(p_.storages.size(), false);
    for (int s = 0; s < num_steps_; ++s) {
      const Step& step = s_.steps[size_t(s)];
      if (step.kind != Step::Kind::fused) continue;
      const FusionGroup& g = s_.groups[step.index];
      if (g.has_reduction) continue;  // a reduction's tiles read past their stores
      const bool swept = sweep_of_[size_t(s)] >= 0;
      for (Var o : g.outputs) {
        const int so = p_.storage_of[size_t(o)];
        if (p_.storages[size_t(so)].kind != Storage::Kind::arena) continue;
        for (Var in : g.inputs) {
          const int si = p_.storage_of[size_t(in)];
          const Storage& st = p_.storages[size_t(si)];
          if (claimed[size_t(si)] || st.kind != Storage::Kind::arena || st.nbytes != p_.storages[size_t(so)].nbytes ||
              !read_contiguously(g, si) || (swept ? !sweep_in_place(s, si) : st.last_step != s)) {
            continue;
          }
          claimed[size_t(si)] = true;
          parent_[size_t(so)] = find(si);
          ++p_.stats.in_place;
          break;
        }
      }
    }
  }

  void donations() {
    std::vector<bool> taken(j_.invars.size(), false);
    for (Storage& out : p_.storages) {
      if (out.kind != Storage::Kind::output || out.def_step < 0) continue;
      const Step& step = s_.steps[size_t(out.def_step)];
      if (step.kind == Step::Kind::impl) continue;
      const AVal& want = j_.aval(out.var);
      for (size_t k = 0; k < j_.invars.size() && k < donate_.size(); ++k) {
        if (!donate_[k] || taken[k]) continue;
        const Var arg = j_.invars[k];
        const int sa = p_.storage_of[size_t(arg)];
        const Storage& in = p_.storages[size_t(sa)];
        if (in.kind != Storage::Kind::argument || j_.aval(arg).shape != want.shape ||
            j_.aval(arg).dtype != want.dtype) {
          continue;
        }
        bool ok = in.last_step < out.def_step;
        if (in.last_step == out.def_step && step.kind == Step::Kind::fused) {
          const FusionGroup& g = s_.groups[step.index];
          ok = !g.has_reduction && read_contiguously(g, sa);
        }
        if (!ok) continue;
        taken[k] = true;
        out.donor = int(k);
        ++p_.stats.donations;
        break;
      }
    }
  }

  void layout() {
    struct Buf {
      size_t size = 0;
      int first = 0, last = 0;
      size_t offset = 0;
      bool used = false;
    };
    std::vector<Buf> bufs(p_.storages.size());
    for (size_t i = 0; i < p_.storages.size(); ++i) {
      const Storage& st = p_.storages[i];
      if (st.kind != Storage::Kind::arena) continue;
      ++p_.stats.intermediates;
      p_.stats.intermediate_bytes += align(st.nbytes);
      Buf& b = bufs[size_t(find(int(i)))];
      b.first = b.used ? std::min(b.first, st.def_step) : st.def_step;
      b.last = b.used ? std::max(b.last, st.last_step) : st.last_step;
      b.size = std::max(b.size, align(st.nbytes));
      b.used = true;
    }
    std::vector<int> order;
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (bufs[i].used && bufs[i].size > 0) order.push_back(int(i));
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      const Buf& x = bufs[size_t(a)];
      const Buf& y = bufs[size_t(b)];
      return x.size != y.size ? x.size > y.size : x.first < y.first;
    });
    std::vector<int> placed;
    std::vector<std::pair<size_t, size_t>> busy;  // (offset, end) of overlapping placed buffers
    for (int id : order) {
      Buf& b = bufs[size_t(id)];
      busy.clear();
      for (int q : placed) {
        const Buf& c = bufs[size_t(q)];
        if (c.first <= b.last && b.first <= c.last) busy.emplace_back(c.offset, c.offset + c.size);
      }
      std::sort(busy.begin(), busy.end());
      size_t offset = 0;
      for (auto [lo, hi] : busy) {
        if (offset + b.size <= lo) break;
        offset = std::max(offset, hi);
      }
      b.offset = offset;
      p_.stats.arena_bytes = std::max(p_.stats.arena_bytes, offset + b.size);
      placed.push_back(id);
    }
    for (size_t i = 0; i < p_.storages.size(); ++i) {
      if (p_.storages[i].kind == Storage::Kind::arena) p_.storages[i].offset = bufs[size_t(find(int(i)))].offset;
    }
  }

  void releases() {
    p_.release_after.assign(size_t(num_steps_), {});
    for (size_t i = 0; i < p_.storages.size(); ++i) {
      const Storage& st = p_.storages[i];
      const bool held = st.kind == Storage::Kind::argument || st.kind == Storage::Kind::buffer;
      if (held && st.last_step >= 0 && st.last_step < num_steps_)
        p_.release_after[size_t(st.last_step)].push_back(int(i));
    }
  }

  const Jaxpr& j_;
  const StepSchedule& s_;
  const std::vector<bool>& donate_;
  const int num_steps_;
  MemoryPlan p_;
  std::vector<int> parent_;     // arena storages sharing a slice (in-place chains)
  std::vector<int> sweep_of_;   // per step: its row sweep, or -1
  std::vector<int> last_read_;  // per storage: its last reader before sweep_lifetimes
};

}  // namespace

MemoryPlan plan_memory(const Jaxpr& jaxpr, const StepSchedule& schedule, const std::vector<bool>& donate) {
  return Planner(jaxpr, schedule, donate).run();
}

std::string MemoryPlan::str() const {
  std::ostringstream os;
  os << "arena " << bytes_str(stats.arena_bytes) << " for " << stats.intermediates << " intermediates ("
     << bytes_str(stats.intermediate_bytes) << " without reuse), " << stats.in_place << " written in place, "
     << stats.donations << " into donated arguments";
  return os.str();
}

}  // namespace pax

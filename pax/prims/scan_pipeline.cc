// A scan's collectives overlapping its other iterations (see scan_pipeline.h):
// the split of the body into fetch / main / finish programs, and the loop
// that runs them.
#include "pax/prims/scan_pipeline.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "pax/core/error.h"
#include "pax/interp/collective_thread.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/control_flow.h"

namespace pax::cf {
namespace {

bool is_reduction(Prim p) { return p == Prim::psum || p == Prim::psum_scatter || p == Prim::pmax || p == Prim::pmin; }

// Equations that only cast or move bytes: cheap enough to run on the
// communication thread beside a collective.
bool moves_bytes(Prim p) { return prim_family(p) == PrimFamily::shape || p == Prim::convert_element_type; }

// A program of `j`'s variables: the given inputs, equations and outputs.
std::shared_ptr<Executable> compile_part(const Jaxpr& j, std::vector<Var> invars, const std::vector<size_t>& eqns,
                                         std::vector<Var> outvars) {
  auto part = std::make_shared<Jaxpr>();
  part->avals = j.avals;
  part->constvars = j.constvars;
  part->consts = j.consts;
  part->invars = std::move(invars);
  for (size_t e : eqns) part->eqns.push_back(j.eqns[e]);
  part->outvars = std::move(outvars);
  typecheck(*part);
  return compile(part);
}

std::shared_ptr<const ScanPipeline> split_body(const Jaxpr& j, size_t nc, size_t ncar) {
  const size_t n = j.eqns.size();
  std::vector<int> producer(j.avals.size(), -1);
  std::vector<int> readers(j.avals.size(), 0);
  std::vector<bool> reads_carry(j.avals.size(), false);
  for (size_t i = nc; i < nc + ncar; ++i) reads_carry[size_t(j.invars[i])] = true;
  for (size_t e = 0; e < n; ++e) {
    bool carry = false;
    for (Var v : j.eqns[e].inputs) {
      carry = carry || reads_carry[size_t(v)];
      ++readers[size_t(v)];
    }
    for (Var v : j.eqns[e].outputs) {
      producer[size_t(v)] = int(e);
      reads_carry[size_t(v)] = carry;
    }
  }
  for (Var v : j.outvars) ++readers[size_t(v)];

  // fetch: all_gathers of values computed from constants and xs alone, by
  // casts and reshapes (whose other readers keep their own copy in main).
  std::vector<bool> in_fetch(n, false);
  std::vector<Var> gathered;
  for (size_t e = 0; e < n; ++e) {
    const Eqn& g = j.eqns[e];
    if (g.prim != Prim::all_gather || reads_carry[size_t(g.outputs[0])]) continue;
    std::vector<size_t> cone, todo{e};
    std::set<size_t> seen{e};
    bool cheap = true;
    while (!todo.empty() && cheap) {
      const size_t k = todo.back();
      todo.pop_back();
      cone.push_back(k);
      for (Var v : j.eqns[k].inputs) {
        const int p = producer[size_t(v)];
        if (p < 0) continue;
        cheap = cheap && moves_bytes(j.eqns[size_t(p)].prim);
        if (seen.insert(size_t(p)).second) todo.push_back(size_t(p));
      }
    }
    if (!cheap) continue;
    for (size_t k : cone) in_fetch[k] = true;
    gathered.push_back(g.outputs[0]);
  }

  // finish: ys outputs made from one value by a chain of one-operand
  // equations that includes a reduction and that nothing else reads.
  std::vector<bool> in_finish(n, false);
  std::vector<Var> pre, finished;
  std::vector<size_t> finish_eqns;
  std::vector<int64_t> ys_from;
  std::vector<Var> main_outs(j.outvars.begin(), j.outvars.begin() + ptrdiff_t(ncar));
  std::vector<Var> main_ys;
  for (size_t k = ncar; k < j.outvars.size(); ++k) {
    const Var y = j.outvars[k];
    std::vector<size_t> chain;
    bool reduces = false;
    Var v = y;
    while (producer[size_t(v)] >= 0) {
      const size_t e = size_t(producer[size_t(v)]);
      const Eqn& q = j.eqns[e];
      const bool link = q.inputs.size() == 1 && q.outputs.size() == 1 && !in_fetch[e] && !in_finish[e] &&
                        (is_reduction(q.prim) || moves_bytes(q.prim)) && readers[size_t(v)] == 1;
      if (!link) break;
      reduces = reduces || is_reduction(q.prim);
      chain.push_back(e);
      v = q.inputs[0];
    }
    // Leave the casts before the first reduction in main.
    while (!chain.empty() && !is_reduction(j.eqns[chain.back()].prim)) {
      v = j.eqns[chain.back()].outputs[0];
      chain.pop_back();
    }
    if (!reduces || chain.empty() || producer[size_t(v)] < 0) {
      ys_from.push_back(int64_t(main_ys.size()));
      main_ys.push_back(y);
      continue;
    }
    for (size_t e : chain) in_finish[e] = true;
    finish_eqns.insert(finish_eqns.end(), chain.rbegin(), chain.rend());
    ys_from.push_back(-1 - int64_t(finished.size()));
    // Two chains may start from one value (psum and pmax of it): one input.
    if (std::find(pre.begin(), pre.end(), v) == pre.end()) pre.push_back(v);
    finished.push_back(y);
  }
  if (gathered.empty() && finished.empty()) return nullptr;

  auto pl = std::make_shared<ScanPipeline>();
  std::vector<Var> consts_xs(j.invars.begin(), j.invars.begin() + ptrdiff_t(nc));
  consts_xs.insert(consts_xs.end(), j.invars.begin() + ptrdiff_t(nc + ncar), j.invars.end());
  std::vector<size_t> fetch_eqns, rest;
  for (size_t e = 0; e < n; ++e) {
    if (in_fetch[e]) fetch_eqns.push_back(e);
    // The fetch's casts stay in main too, for their other readers (dead
    // otherwise, and dropped by the compiler's passes).
    if (!in_finish[e] && !(in_fetch[e] && j.eqns[e].prim == Prim::all_gather)) rest.push_back(e);
  }
  if (!gathered.empty()) pl->fetch = compile_part(j, consts_xs, fetch_eqns, gathered);
  std::vector<Var> main_in = j.invars;
  main_in.insert(main_in.end(), gathered.begin(), gathered.end());
  main_outs.insert(main_outs.end(), main_ys.begin(), main_ys.end());
  main_outs.insert(main_outs.end(), pre.begin(), pre.end());
  pl->main = compile_part(j, main_in, rest, main_outs);
  if (!finished.empty()) pl->finish = compile_part(j, pre, finish_eqns, finished);
  pl->ys_from = std::move(ys_from);
  pl->main_ys = main_ys.size();
  return pl;
}

}  // namespace

std::shared_ptr<const ScanPipeline> scan_pipeline(const std::shared_ptr<const Program>& body, int64_t num_consts,
                                                  int64_t num_carry) {
  static std::mutex mu;
  // Per body and split; an entry whose program has gone is stale (its
  // address may be another program's now) and is dropped.
  struct Entry {
    std::weak_ptr<const Program> body;
    std::shared_ptr<const ScanPipeline> pipeline;
  };
  static auto* cache = new std::map<std::tuple<const Program*, int64_t, int64_t>, Entry>;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(body.get(), num_consts, num_carry);
  auto it = cache->find(key);
  if (it != cache->end() && !it->second.body.expired()) return it->second.pipeline;
  for (auto e = cache->begin(); e != cache->end();) e = e->second.body.expired() ? cache->erase(e) : std::next(e);
  const Jaxpr& j = body->executable()->optimized_jaxpr();
  std::shared_ptr<const ScanPipeline> pl;
  bool any = false;
  for (const Eqn& e : j.eqns) any = any || moves_data(e.prim);
  if (any && j.invars.size() == body->jaxpr()->invars.size()) pl = split_body(j, size_t(num_consts), size_t(num_carry));
  (*cache)[key] = Entry{body, pl};
  return pl;
}

std::vector<Array> run_scan_pipeline(const ScanPipeline& pl, std::span<const Array> consts, std::span<const Array> init,
                                     std::span<const Array> xs, int64_t length, bool reverse, bool save_carries) {
  const size_t ncar = init.size();
  const std::vector<AVal> main_out = pl.main->optimized_jaxpr().out_avals();
  std::vector<RowWriter> ys, carries;
  for (int64_t from : pl.ys_from) {
    const AVal row = from >= 0 ? main_out[ncar + size_t(from)]
                               : pl.finish->optimized_jaxpr().out_avals()[size_t(-1 - from)];
    ys.emplace_back(row, length);
  }
  if (save_carries)
    for (const Array& c : init) carries.emplace_back(c.aval(), length);
  auto fetch = [&](int64_t t) -> PendingCollectivePtr {
    if (!pl.fetch) return nullptr;
    std::vector<Array> args(consts.begin(), consts.end());
    for (const Array& x : xs) args.push_back(read_row(x, t));
    return start_collective([exe = pl.fetch, args = std::move(args)] { return exe->run(args); });
  };
  std::vector<PendingCollectivePtr> finishing;
  auto wait_all = [&] {
    for (PendingCollectivePtr& p : finishing) p->wait();
    finishing.clear();
  };
  std::vector<Array> carry(init.begin(), init.end());
  PendingCollectivePtr next;
  try {
    next = length > 0 ? fetch(reverse ? length - 1 : 0) : nullptr;
    for (int64_t i = 0; i < length; ++i) {
      const int64_t t = reverse ? length - 1 - i : i;
      std::vector<Array> gathered = next ? next->wait() : std::vector<Array>{};
      next = i + 1 < length ? fetch(reverse ? t - 1 : t + 1) : nullptr;
      std::vector<Array> args(consts.begin(), consts.end());
      for (size_t k = 0; k < ncar; ++k) {
        if (save_carries) carries[k].put(t, carry[k]);
        args.push_back(std::move(carry[k]));
      }
      for (const Array& x : xs) args.push_back(read_row(x, t));
      args.insert(args.end(), gathered.begin(), gathered.end());
      gathered.clear();
      std::vector<Array> out = pl.main->run(std::move(args));
      for (size_t k = 0; k < ncar; ++k) carry[k] = std::move(out[k]);
      std::vector<Array> pre(out.begin() + ptrdiff_t(ncar + pl.main_ys), out.end());
      std::vector<RowWriter> behind;
      for (size_t k = 0; k < ys.size(); ++k) {
        if (pl.ys_from[k] >= 0) {
          ys[k].put(t, out[ncar + size_t(pl.ys_from[k])]);
        } else {
          behind.push_back(ys[k]);
        }
      }
      if (pl.finish) {
        finishing.push_back(start_collective([exe = pl.finish, pre = std::move(pre), behind = std::move(behind), t] {
          const std::vector<Array> done = exe->run(pre);
          for (size_t k = 0; k < behind.size(); ++k) behind[k].put(t, done[k]);
          return std::vector<Array>{};
        }));
      }
    }
  } catch (...) {
    // Rows of this call may still be written, and a fetch may still run:
    // wait (their failures are secondary to this one), then rethrow.
    if (next) finishing.push_back(next);
    for (PendingCollectivePtr& p : finishing) {
      try {
        p->wait();
      } catch (...) {
      }
    }
    throw;
  }
  wait_all();
  std::vector<Array> result = std::move(carry);
  for (const RowWriter& y : ys) result.push_back(y.finish());
  for (const RowWriter& c : carries) result.push_back(c.finish());
  return result;
}

}  // namespace pax::cf

// Common subexpression elimination: an equation with the same primitive,
// params (Params::operator==) and inputs as an earlier one reuses its results.
// Every primitive is pure (random numbers are a function of their key), so
// any two such equations compute the same values. Constants that are the same
// array, or small arrays with the same aval and bytes, are merged first (each
// C++ literal becomes its own constant when traced).
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>

#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {
namespace {

constexpr size_t kMaxCompareBytes = 1024;  // consts compared by value up to this size

std::string const_key(const Array& c) {
  std::string key = c.aval().str() + (c.weak_type() ? "w" : "s") + ":";
  const size_t at = key.size();
  key.resize(at + c.nbytes());
  c.copy_to_host(c.dtype(), key.data() + at);
  return key;
}

size_t eqn_hash(const Eqn& e) {
  size_t h = std::hash<int>{}(int(e.prim));
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (Var v : e.inputs) mix(std::hash<Var>{}(v));
  mix(e.params.hash());
  return h;
}

}  // namespace

Jaxpr cse(const Jaxpr& j) {
  Jaxpr out = passes::copy_header(j);
  passes::Subst subst(j.avals.size());
  out.constvars.clear();
  out.consts.clear();
  std::unordered_map<const void*, Var> by_id;
  std::unordered_map<std::string, Var> by_value;
  for (size_t i = 0; i < j.constvars.size(); ++i) {
    const Array& c = j.consts[i];
    const Var v = j.constvars[i];
    auto [it, fresh] = by_id.emplace(c.id(), v);
    if (fresh && c.is_concrete() && c.nbytes() <= kMaxCompareBytes) {
      auto [vit, vfresh] = by_value.emplace(const_key(c), v);
      if (!vfresh) it->second = vit->second;
    }
    if (it->second != v) {
      subst.set(v, it->second);
      continue;
    }
    out.constvars.push_back(v);
    out.consts.push_back(c);
  }
  std::unordered_multimap<size_t, size_t> seen;  // hash -> index in out.eqns
  for (const Eqn& orig : j.eqns) {
    Eqn e = subst.apply(orig);
    const size_t h = eqn_hash(e);
    bool merged = false;
    auto [lo, hi] = seen.equal_range(h);
    for (auto it = lo; it != hi && !merged; ++it) {
      const Eqn& prev = out.eqns[it->second];
      if (prev.prim != e.prim || prev.inputs != e.inputs || !(prev.params == e.params)) continue;
      for (size_t k = 0; k < e.outputs.size(); ++k) subst.set(e.outputs[k], prev.outputs[k]);
      merged = true;
    }
    if (merged) continue;
    seen.emplace(h, out.eqns.size());
    out.eqns.push_back(std::move(e));
  }
  subst.finish(out, j);
  return out;
}

}  // namespace pax

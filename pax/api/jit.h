// jit: trace once per signature (tree structures, shapes, dtypes and static
// argument values), compile, cache, and run the executable.
//
//   auto step = pax::jit(train_step, {.donate_argnums = {0}});
//   state = step(std::move(state), batch);  // state's buffers are reused
//
// Closed-over concrete arrays become constants of the compiled program (as in
// JAX: later changes to the captured variable are not seen). Donated
// arguments are given up by the caller: pass them with std::move so that no
// other handle keeps their buffers, which then receive the outputs in place.
// jit(f).lower(args...) exposes the jaxpr and its cost; .compile() returns the
// executable for that signature (ahead of time).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pax/api/function_adapter.h"
#include "pax/api/transform_core.h"
#include "pax/api/tree_convert.h"

namespace pax {

struct JitOptions {
  // Arguments that are static (not traced). Non-array arguments are always
  // static; listing an array argument here is an error.
  std::vector<int> static_argnums;
  // Arguments whose buffers the executable may reuse for outputs.
  std::vector<int> donate_argnums;
  std::string name = "jit";
};

namespace detail {

// Everything a call needs after the arguments are split.
struct PreparedCall {
  JitKey key;
  std::vector<Array> leaves;
  std::vector<bool> donate_leaf;
};

template <class Tuple>
PreparedCall prepare_call(Tuple& saved, const JitOptions& options) {
  constexpr size_t n = std::tuple_size_v<Tuple>;
  std::vector<bool> sel = tree_positions<Tuple>();
  for (int i : options.static_argnums) {
    PAX_CHECK(i >= 0 && size_t(i) < n, options.name, ": static_argnums entry ", i, " is out of range for ", n,
              " arguments");
    PAX_CHECK(!sel[size_t(i)], options.name, ": argument ", i,
              " is an array or tree and cannot be static; only non-array arguments are static");
  }
  PreparedCall call;
  call.key.statics = statics_of(saved, std::make_index_sequence<n>{});
  std::vector<Tree> trees = take_trees(saved, sel);
  call.leaves = flatten_trees(trees, &call.key.in_defs);
  call.key.device = jit_device(call.leaves, options.name);
  // Leaf-level donation flags, argument by argument.
  size_t tree_index = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!sel[i]) continue;
    bool donated = false;
    for (int d : options.donate_argnums) donated = donated || d == int(i);
    for (size_t k = 0; k < call.key.in_defs[tree_index].num_leaves(); ++k) call.donate_leaf.push_back(donated);
    ++tree_index;
  }
  for (int d : options.donate_argnums) {
    PAX_CHECK(d >= 0 && size_t(d) < n && sel[size_t(d)], options.name, ": donate_argnums entry ", d,
              " must name an array or tree argument");
  }
  trees.clear();  // the leaves are now the only handles this call holds
  for (const Array& x : call.leaves) call.key.avals.push_back(x.aval());
  return call;
}

}  // namespace detail

template <class R>
class Compiled;

// The result of jit(f).lower(args...): the traced program for one signature.
template <class R>
class Lowered {
 public:
  Lowered(std::shared_ptr<const detail::JitEntry> entry, detail::JitKey key, std::string name)
      : entry_(std::move(entry)), key_(std::move(key)), name_(std::move(name)) {}
  const Jaxpr& jaxpr() const { return *entry_->program->jaxpr(); }
  std::string as_text() const { return jaxpr().str(); }
  CostAnalysis cost() const { return cost_analysis(jaxpr()); }
  Compiled<R> compile() const {
    entry_->program->executable(entry_->device);
    return Compiled<R>(entry_, key_, name_);
  }

 private:
  std::shared_ptr<const detail::JitEntry> entry_;
  detail::JitKey key_;
  std::string name_;
};

// An executable for one signature; calling it with another signature is an error.
template <class R>
class Compiled {
 public:
  Compiled(std::shared_ptr<const detail::JitEntry> entry, detail::JitKey key, std::string name)
      : entry_(std::move(entry)), key_(std::move(key)), name_(std::move(name)) {}
  template <class... Args>
  R operator()(Args&&... args) const {
    detail::ArgTuple<Args...> saved(std::forward<Args>(args)...);
    detail::PreparedCall call = detail::prepare_call(saved, JitOptions{{}, {}, name_});
    PAX_CHECK(call.key == key_, name_, ": compiled for arguments ", key_.str(), " but called with ", call.key.str());
    std::vector<Array> out = detail::run_jit_entry(*entry_, std::move(call.leaves));
    return from_tree<R>(tree_unflatten(entry_->out_def, out));
  }
  const Executable& executable() const { return *entry_->program->executable(entry_->device); }

 private:
  std::shared_ptr<const detail::JitEntry> entry_;
  detail::JitKey key_;
  std::string name_;
};

template <class F>
class Jitted {
 public:
  Jitted(F f, JitOptions options)
      : f_(std::make_shared<F>(std::move(f))),
        options_(std::move(options)),
        cache_(std::make_shared<detail::JitCache>()) {}

  template <class... Args>
  auto operator()(Args&&... args) const {
    using R = decltype((*f_)(std::declval<const std::decay_t<Args>&>()...));
    detail::ArgTuple<Args...> saved(std::forward<Args>(args)...);
    auto [entry, call] = lookup(saved);
    std::vector<Array> out = detail::run_jit_entry(*entry, std::move(call.leaves));
    return from_tree<R>(tree_unflatten(entry->out_def, out));
  }

  template <class... Args>
  auto lower(const Args&... args) const {
    using R = decltype((*f_)(args...));
    detail::ArgTuple<Args...> saved(args...);
    auto [entry, call] = lookup(saved);
    return Lowered<R>(entry, call.key, options_.name);
  }

  // How many times the function was traced (once per new signature).
  size_t num_traces() const { return cache_->num_traces(); }
  size_t cache_size() const { return cache_->size(); }

 private:
  template <class Tuple>
  std::pair<std::shared_ptr<const detail::JitEntry>, detail::PreparedCall> lookup(Tuple& saved) const {
    detail::PreparedCall call = detail::prepare_call(saved, options_);
    std::shared_ptr<const detail::JitEntry> entry = cache_->find(call.key);
    if (!entry) {  // the function to trace is only built on a miss
      std::vector<bool> sel = detail::tree_positions<Tuple>();
      entry = cache_->trace(call.key, detail::make_tree_fn(*f_, saved, sel), options_.name, call.donate_leaf);
    }
    return {entry, std::move(call)};
  }

  std::shared_ptr<F> f_;
  JitOptions options_;
  std::shared_ptr<detail::JitCache> cache_;
};

template <class F>
Jitted<F> jit(F f, JitOptions options = {}) {
  return Jitted<F>(std::move(f), std::move(options));
}

}  // namespace pax

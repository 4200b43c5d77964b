// Structured control flow, as jax.lax.cond / switch / while_loop / fori_loop
// / scan and jax.checkpoint. The functions take plain C++ callables whose
// traced values are Arrays, Trees, or vectors / pairs / tuples / string maps
// of those (as the transforms in pax/api/transforms.h), trace them once to
// jaxprs and bind one control-flow primitive, so the loop or branch stays a
// single equation under jit and every transform (grad, jvp, vmap) applies.
// Values the callables close over (weights, tracers of an enclosing grad or
// vmap) become explicit operands automatically.
//
//   Array y = cond(sum(x) > 0.0, [](const Array& v) { return v * 2.0; },
//                  [](const Array& v) { return -v; }, x);
//   Array z = cond(index, branches(f0, f1, f2), x);        // index clamped
//   Tree s = while_loop(cond_fn, body_fn, init);
//   Array acc = fori_loop(0, 10, [](const Array& i, const Array& a) { ... }, a0);
//   auto [h, hs] = scan([&](const Array& h, const Array& x) {
//     Array h2 = tanh(matmul(h, w) + x);
//     return std::make_pair(h2, h2);                        // (carry, y)
//   }, h0, xs);                                             // xs: [T, ...]
//   auto block = checkpoint(layer_fn, RematPolicy::dots_saveable);
#pragma once

#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/prims/control_flow.h"

namespace pax {

namespace detail {

using BranchTreeFn = std::function<Tree(const std::vector<Tree>&)>;
// `names` label the branches in errors ("false_fn", "true_fn"; empty: "branch k").
Tree cond_trees(const Array& index, const std::vector<BranchTreeFn>& branches, const std::vector<Tree>& operands,
                const std::vector<std::string>& names);
Tree while_trees(const std::function<Array(const Tree&)>& cond_fn, const std::function<Tree(const Tree&)>& body_fn,
                 const Tree& init);
using ForiBody = std::function<Tree(const Array&, const Tree&)>;
Tree fori_static_trees(int64_t lower, int64_t upper, const ForiBody& body, const Tree& init);
Tree fori_trees(const Array& lower, const Array& upper, const ForiBody& body, const Tree& init);
using ScanBody = std::function<std::pair<Tree, Tree>(const Tree&, const Tree&)>;
std::pair<Tree, Tree> scan_trees(const ScanBody& f, const Tree& init, const Tree& xs, std::optional<int64_t> length,
                                 bool reverse);
Tree checkpoint_trees(const TreeFn& f, const std::vector<Tree>& args, RematPolicy policy);

template <class... Fs>
struct BranchFns {
  std::tuple<Fs...> fns;
};
template <class T>
inline constexpr bool is_branch_fns_v = false;
template <class... Fs>
inline constexpr bool is_branch_fns_v<BranchFns<Fs...>> = true;

// A branch as a function of the operand trees.
template <class R, class... Ops, class F>
BranchTreeFn branch_tree_fn(const F& f) {
  static_assert(std::is_same_v<std::decay_t<std::invoke_result_t<const F&, const Ops&...>>, R>,
                "cond: every branch must return the same type");
  return [&f](const std::vector<Tree>& trees) -> Tree {
    return [&]<size_t... I>(std::index_sequence<I...>) { return to_tree(f(from_tree<Ops>(trees[I])...)); }
    (std::index_sequence_for<Ops...>{});
  };
}

template <class R>
constexpr void check_result() {
  static_assert(is_tree_v<R>,
                "control flow: a function must return Array, Tree, or a vector / pair / tuple / map of those");
}

}  // namespace detail

// ---------------------------------------------------------------------------
// cond

// The branches of an indexed cond: cond(index, branches(f0, f1, ...), ops...).
template <class... Fs>
detail::BranchFns<std::decay_t<Fs>...> branches(Fs&&... fns) {
  return {{std::forward<Fs>(fns)...}};
}

// cond(pred, true_fn, false_fn, operands...) -> true_fn(operands...) when the
// bool scalar `pred` holds, else false_fn(operands...). Both branches are
// traced and must return the same type, tree structure, shapes and dtypes.
// Unlike a C++ `if`, pred may be traced (inside jit or vmap).
template <class TrueFn, class FalseFn, class... Ops>
requires(!detail::is_branch_fns_v<std::decay_t<TrueFn>>) auto cond(const Array& pred, const TrueFn& true_fn,
                                                                   const FalseFn& false_fn, const Ops&... operands) {
  static_assert((is_tree_v<Ops> && ...), "cond: every operand must be an Array or a tree of Arrays");
  using R = std::decay_t<std::invoke_result_t<const TrueFn&, const Ops&...>>;
  detail::check_result<R>();
  PAX_CHECK(pred.defined() && pred.ndim() == 0 && pred.dtype() == DType::bool_,
            "cond(pred, true_fn, false_fn, ...): pred must be a bool scalar, got ",
            pred.defined() ? pred.aval().str() : "an empty Array",
            "; for an integer index use cond(index, branches(f0, f1, ...), ...)");
  std::vector<detail::BranchTreeFn> fns{detail::branch_tree_fn<R, std::decay_t<Ops>...>(false_fn),
                                        detail::branch_tree_fn<R, std::decay_t<Ops>...>(true_fn)};
  return from_tree<R>(detail::cond_trees(pred, fns, {to_tree(operands)...}, {"false_fn", "true_fn"}));
}

// cond(index, branches(f0, ..., fn), operands...) -> f_index(operands...)
// (jax.lax.switch): `index` is an integer scalar, clamped to [0, n - 1].
template <class... Fs, class... Ops>
auto cond(const Array& index, const detail::BranchFns<Fs...>& fns, const Ops&... operands) {
  static_assert(sizeof...(Fs) > 0, "cond: give at least one branch");
  static_assert((is_tree_v<Ops> && ...), "cond: every operand must be an Array or a tree of Arrays");
  using R = std::decay_t<std::invoke_result_t<const std::tuple_element_t<0, std::tuple<Fs...>>&, const Ops&...>>;
  detail::check_result<R>();
  std::vector<detail::BranchTreeFn> list = std::apply(
      [](const auto&... f) {
        return std::vector<detail::BranchTreeFn>{detail::branch_tree_fn<R, std::decay_t<Ops>...>(f)...};
      },
      fns.fns);
  return from_tree<R>(detail::cond_trees(index, list, {to_tree(operands)...}, {}));
}

// ---------------------------------------------------------------------------
// loops

// while_loop(cond_fn, body_fn, init): carry = init; while (cond_fn(carry))
// carry = body_fn(carry); returns carry. cond_fn returns a bool scalar Array;
// body_fn returns the carry's type with the same structure, shapes and dtypes.
// Differentiable in forward mode (jvp) only: for grad use scan or fori_loop
// with static bounds.
template <class CondFn, class BodyFn, class T>
T while_loop(const CondFn& cond_fn, const BodyFn& body_fn, const T& init) {
  static_assert(is_tree_v<T>, "while_loop: init must be an Array or a tree of Arrays");
  static_assert(std::is_convertible_v<std::invoke_result_t<const CondFn&, const T&>, Array>,
                "while_loop: cond_fn must return a bool scalar Array");
  static_assert(std::is_convertible_v<std::invoke_result_t<const BodyFn&, const T&>, T>,
                "while_loop: body_fn must return the carry's type");
  return from_tree<T>(detail::while_trees([&](const Tree& c) -> Array { return cond_fn(from_tree<T>(c)); },
                                          [&](const Tree& c) { return to_tree(T(body_fn(from_tree<T>(c)))); },
                                          to_tree(init)));
}

// fori_loop(lower, upper, body_fn, init): carry = init; for i in [lower,
// upper): carry = body_fn(i, carry), with i an int32 scalar Array. Static
// (int) bounds make it a scan of upper - lower steps, differentiable in
// reverse mode; traced bounds make it a while_loop.
template <class BodyFn, class T>
T fori_loop(int64_t lower, int64_t upper, const BodyFn& body_fn, const T& init) {
  static_assert(is_tree_v<T>, "fori_loop: init must be an Array or a tree of Arrays");
  return from_tree<T>(detail::fori_static_trees(
      lower, upper, [&](const Array& i, const Tree& c) { return to_tree(T(body_fn(i, from_tree<T>(c)))); },
      to_tree(init)));
}

// Bounds as integer scalar Arrays: concrete ones count as static.
template <class BodyFn, class T>
T fori_loop(const Array& lower, const Array& upper, const BodyFn& body_fn, const T& init) {
  static_assert(is_tree_v<T>, "fori_loop: init must be an Array or a tree of Arrays");
  return from_tree<T>(detail::fori_trees(
      lower, upper, [&](const Array& i, const Tree& c) { return to_tree(T(body_fn(i, from_tree<T>(c)))); },
      to_tree(init)));
}

// scan(f, init, xs, length, reverse) -> (final carry, stacked ys), as
// jax.lax.scan: f(carry, x) returns std::pair(new carry, y), x is xs sliced
// along its leading axis (every leaf of xs has that axis, of equal length),
// and every leaf of ys gets a leading axis of the scan's length. xs may be
// Tree() (None) when `length` is given; y may be Tree() too. reverse scans
// from the last element to the first (ys keep their positions).
template <class F, class C, class X>
auto scan(const F& f, const C& init, const X& xs, std::optional<int64_t> length = std::nullopt, bool reverse = false) {
  static_assert(is_tree_v<C> && is_tree_v<X>, "scan: init and xs must be Arrays or trees of Arrays");
  using R = std::decay_t<std::invoke_result_t<const F&, const C&, const X&>>;
  static_assert(is_tree_v<typename R::first_type> && is_tree_v<typename R::second_type>,
                "scan: f(carry, x) must return std::pair(new carry, y)");
  using Y = std::decay_t<typename R::second_type>;
  auto out = detail::scan_trees(
      [&](const Tree& c, const Tree& x) {
        R r = f(from_tree<C>(c), from_tree<X>(x));
        return std::make_pair(to_tree(r.first), to_tree(r.second));
      },
      to_tree(init), to_tree(xs), length, reverse);
  return std::make_pair(from_tree<C>(out.first), from_tree<Y>(out.second));
}

// ---------------------------------------------------------------------------
// checkpoint / remat

// checkpoint(f, policy) -> a function computing f whose intermediates are not
// kept for reverse mode: grad recomputes them in the backward pass (except the
// matmul results under dots_saveable). Same values and gradients as f, less
// memory. Arguments follow the transforms' conventions (trees are traced,
// other arguments static).
template <class F>
auto checkpoint(F f, RematPolicy policy = RematPolicy::nothing_saveable) {
  return [f = std::move(f), policy](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    Tuple saved(args...);
    std::vector<bool> sel = detail::tree_positions<Tuple>();
    std::vector<Tree> trees = detail::take_trees(saved, sel);
    Tree out = detail::checkpoint_trees(detail::make_tree_fn(f, saved, sel), trees, policy);
    return from_tree<decltype(f(args...))>(out);
  };
}

// jax.remat is another name for jax.checkpoint.
template <class F>
auto remat(F f, RematPolicy policy = RematPolicy::nothing_saveable) {
  return checkpoint(std::move(f), policy);
}

}  // namespace pax

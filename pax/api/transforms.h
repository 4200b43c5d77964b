// The transforms, as in jax: grad, value_and_grad, vjp, jvp, vmap, jit,
// make_jaxpr, eval_shape, stop_gradient and custom_vjp. They take plain C++
// functions whose traced arguments and results are Arrays, Trees, or
// vectors / pairs / tuples / string maps of those; other arguments (int,
// double, bool, std::string, enums) are static. The heavy lifting is in
// pax/api/transform_core.h; these templates only adapt types.
//
//   auto loss = [](const Tree& params, const Array& x) { ... return scalar; };
//   Tree g = pax::grad(loss)(params, x);                  // d/d params
//   auto [value, g2] = pax::value_and_grad<0, 1>(loss)(params, x);
//   auto step = pax::jit(train_step, {.donate_argnums = {0}});
//   auto batched = pax::vmap(f, {.in_axes = {0, std::nullopt}});
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pax/api/function_adapter.h"
#include "pax/api/transform_core.h"
#include "pax/api/tree_convert.h"
#include "pax/interp/custom_vjp.h"

namespace pax {

// Marks a function as returning (value, aux): only the value is differentiated.
struct HasAux {};
inline constexpr HasAux has_aux{};

// ---------------------------------------------------------------------------
// grad / value_and_grad

// value_and_grad<argnums...>(f)(args...) -> (value, grads); with has_aux,
// ((value, aux), grads). One argnum gives that argument's type; several, a
// tuple. The default argnum is 0.
namespace detail {
template <bool kHasAux, int... Argnums, class F>
auto value_and_grad_impl(F f) {
  return [f = std::move(f)](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    Tuple saved(args...);
    constexpr bool kDefault = sizeof...(Argnums) == 0;
    std::vector<bool> sel = kDefault ? detail::select_argnums<0>(sizeof...(args))
                                     : detail::select_argnums<Argnums...>(sizeof...(args));
    std::vector<Tree> diff = detail::take_trees(saved, sel);
    detail::GradResult r = detail::value_and_grad_trees(detail::make_tree_fn(f, saved, sel), diff, kHasAux);
    using R = decltype(f(args...));  // with aux: std::pair<Array, Aux>
    auto value = [&] {
      if constexpr (kHasAux) {
        using Aux = std::decay_t<decltype(std::declval<R>().second)>;
        return std::make_pair(from_tree<Array>(r.value), from_tree<Aux>(r.aux));
      } else {
        return from_tree<R>(r.value);
      }
    }();
    if constexpr (kDefault) {
      return std::make_pair(std::move(value), detail::grads_as<Tuple, 0>(r.grads));
    } else {
      return std::make_pair(std::move(value), detail::grads_as<Tuple, Argnums...>(r.grads));
    }
  };
}
}  // namespace detail

template <int... Argnums, class F>
auto value_and_grad(F f) {
  return detail::value_and_grad_impl<false, Argnums...>(std::move(f));
}

template <int... Argnums, class F>
auto value_and_grad(F f, HasAux) {
  return detail::value_and_grad_impl<true, Argnums...>(std::move(f));
}

// grad<argnums...>(f)(args...) -> grads (see value_and_grad).
template <int... Argnums, class F>
auto grad(F f) {
  return [vg = value_and_grad<Argnums...>(std::move(f))](const auto&... args) { return vg(args...).second; };
}

// grad(f, has_aux)(args...) -> (grads, aux).
template <int... Argnums, class F>
auto grad(F f, HasAux) {
  return [vg = value_and_grad<Argnums...>(std::move(f), has_aux)](const auto&... args) {
    auto [value_aux, g] = vg(args...);
    return std::make_pair(g, value_aux.second);
  };
}

// ---------------------------------------------------------------------------
// vjp / jvp

// vjp(f, primals...) -> (out, vjp_fn); vjp_fn(cotangent) returns the
// cotangent of the single primal, or a tuple of them.
template <class F, class... Args>
auto vjp(F f, const Args&... primals) {
  static_assert((is_tree_v<Args> && ...), "vjp: every primal must be an Array or a tree of Arrays");
  using Tuple = detail::ArgTuple<Args...>;
  Tuple saved(primals...);
  std::vector<bool> sel(sizeof...(Args), true);
  std::vector<Tree> trees = detail::take_trees(saved, sel);
  auto holder = std::make_shared<F>(std::move(f));
  detail::VjpTrees r = detail::vjp_trees(detail::make_tree_fn(*holder, saved, sel), trees);
  using R = decltype((*holder)(primals...));
  auto backward = [r, holder](const R& ct) {
    std::vector<Tree> g = r.backward(to_tree(ct));
    if constexpr (sizeof...(Args) == 1) {
      return from_tree<std::tuple_element_t<0, Tuple>>(g[0]);
    } else {
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return Tuple(from_tree<std::tuple_element_t<I, Tuple>>(g[I])...);
      }
      (std::index_sequence_for<Args...>{});
    }
  };
  return std::make_pair(from_tree<R>(r.out), backward);
}

// jvp(f, {primals...}, {tangents...}) -> (out, tangent_out).
template <class F, class... Args>
auto jvp(F f, const std::tuple<Args...>& primals, const std::tuple<Args...>& tangents) {
  static_assert((is_tree_v<Args> && ...), "jvp: every primal must be an Array or a tree of Arrays");
  std::vector<Tree> p, t;
  std::apply([&](const auto&... x) { (p.push_back(to_tree(x)), ...); }, primals);
  std::apply([&](const auto&... x) { (t.push_back(to_tree(x)), ...); }, tangents);
  using Tuple = detail::ArgTuple<Args...>;
  std::vector<bool> sel(sizeof...(Args), true);
  auto [out, tout] = detail::jvp_trees(detail::make_tree_fn(f, Tuple(), sel), p, t);
  using R = decltype(std::apply(f, primals));
  return std::make_pair(from_tree<R>(out), from_tree<R>(tout));
}

// jvp of a function of one array.
template <class F>
auto jvp(F f, const Array& primal, const Array& tangent) {
  return jvp(std::move(f), std::tuple<Array>(primal), std::tuple<Array>(tangent));
}

// ---------------------------------------------------------------------------
// vmap

struct VmapOptions {
  // Batch axis of each argument (nullopt: not mapped); one entry applies to all.
  std::vector<std::optional<int64_t>> in_axes = {0};
  // Where the batch axis goes: one entry for every output leaf, one per
  // element of the output (a tuple's, a list's or a dict's, for all of its
  // leaves), or one per leaf. nullopt (JAX's None): the output is not mapped;
  // it must not depend on the mapped axis (a pmean over it, say), and comes
  // out without a batch axis.
  std::vector<std::optional<int64_t>> out_axes = {0};
  // Names the mapped axis for collectives (psum, pmean, pmax, all_gather, psum_scatter).
  std::string axis_name;
};

template <class F>
auto vmap(F f, VmapOptions options = {}) {
  return [f = std::move(f), options = std::move(options)](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    Tuple saved(args...);
    std::vector<bool> sel = detail::tree_positions<Tuple>();
    std::vector<std::optional<int64_t>> in_axes = options.in_axes;
    if (in_axes.size() == sel.size() && in_axes.size() > 1) {
      // Per positional argument: keep the entries of traced arguments.
      std::vector<std::optional<int64_t>> kept;
      for (size_t i = 0; i < sel.size(); ++i) {
        if (sel[i]) kept.push_back(in_axes[i]);
      }
      in_axes = kept;
    }
    std::vector<Tree> trees = detail::take_trees(saved, sel);
    Tree out =
        detail::vmap_trees(detail::make_tree_fn(f, saved, sel), trees, in_axes, options.out_axes, options.axis_name);
    return from_tree<decltype(f(args...))>(out);
  };
}

// ---------------------------------------------------------------------------
// make_jaxpr / eval_shape

// make_jaxpr(f)(args...) -> the jaxpr f traces to (printable).
template <class F>
auto make_jaxpr(F f) {
  return [f = std::move(f)](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    Tuple saved(args...);
    std::vector<bool> sel = detail::tree_positions<Tuple>();
    std::vector<Tree> trees = detail::take_trees(saved, sel);
    return std::shared_ptr<const Jaxpr>(detail::make_jaxpr_trees(detail::make_tree_fn(f, saved, sel), trees));
  };
}

// eval_shape(f)(args...) -> f's result with abstract leaves (shapes and
// dtypes, printed as ShapeDtypeStruct); nothing is computed or allocated.
template <class F>
auto eval_shape(F f) {
  return [f = std::move(f)](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    Tuple saved(args...);
    std::vector<bool> sel = detail::tree_positions<Tuple>();
    std::vector<Tree> trees = detail::take_trees(saved, sel);
    return from_tree<decltype(f(args...))>(detail::eval_shape_trees(detail::make_tree_fn(f, saved, sel), trees));
  };
}

// ---------------------------------------------------------------------------
// stop_gradient / custom_vjp

// The identity whose derivative is zero (applied to every leaf).
Array stop_gradient(const Array& x);
Tree stop_gradient(const Tree& x);

// custom_vjp(f, fwd, bwd): f(args...) -> R; fwd(args...) -> (R, residuals);
// bwd(residuals, cotangent of R) -> the cotangents of the arguments (one
// value, or a tuple). Arguments must all be Arrays or trees; the functions
// must not close over traced values.
template <class F, class Fwd, class Bwd>
auto custom_vjp(F f, Fwd fwd, Bwd bwd, std::string name = "custom_vjp") {
  return [f, fwd, bwd, name](const auto&... args) {
    using Tuple = detail::ArgTuple<decltype(args)...>;
    static_assert((is_tree_v<decltype(args)> && ...), "custom_vjp: every argument must be an Array or a tree");
    using R = decltype(f(args...));
    using Res = std::decay_t<decltype(fwd(args...).second)>;
    std::vector<TreeDef> in_defs;
    std::vector<Array> leaves = detail::flatten_trees({to_tree(args)...}, &in_defs);
    auto rule = std::make_shared<CustomVjpRule>();
    auto out_def = std::make_shared<TreeDef>();
    auto res_def = std::make_shared<TreeDef>();
    auto call = [](const auto& fn, const std::vector<Tree>& trees) {
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return fn(from_tree<std::tuple_element_t<I, Tuple>>(trees[I])...);
      }
      (std::make_index_sequence<std::tuple_size_v<Tuple>>{});
    };
    rule->name = name;
    rule->fn = [f, in_defs, out_def, call](std::span<const Array> xs) {
      auto [out, def] = tree_flatten(to_tree(call(f, detail::unflatten_trees(in_defs, xs))));
      *out_def = def;
      return out;
    };
    rule->fwd = [fwd, in_defs, res_def, call](std::span<const Array> xs) {
      auto [out, res] = call(fwd, detail::unflatten_trees(in_defs, xs));
      auto [res_leaves, rd] = tree_flatten(to_tree(res));
      *res_def = rd;
      return std::make_pair(tree_leaves(to_tree(out)), res_leaves);
    };
    rule->bwd = [bwd, out_def, res_def](std::span<const Array> residuals, std::span<const Array> cts) {
      Res res = from_tree<Res>(tree_unflatten(*res_def, residuals));
      R ct = from_tree<R>(tree_unflatten(*out_def, cts));
      return tree_leaves(to_tree(bwd(res, ct)));
    };
    // Output avals for the primitive's shape rule.
    std::vector<AVal> avals;
    for (const Array& x : leaves) avals.push_back(x.aval());
    rule->jaxpr = trace_to_jaxpr(rule->fn, avals);
    rule->out_avals = rule->jaxpr->out_avals();
    std::vector<Array> out =
        bind(Prim::custom_vjp_call, leaves, Params{{"rule", std::static_pointer_cast<const ParamObject>(rule)}});
    return from_tree<R>(tree_unflatten(*out_def, out));
  };
}

}  // namespace pax

#include "pax/api/jit.h"

// Adapting typed C++ functions to the type-erased transform cores: which
// arguments are traced trees and which are static, moving the trees out of
// an argument tuple, static values as cache keys, and the user function as a
// function of its traced arguments. Used by transforms.h and jit.h.
#pragma once

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pax/api/transform_core.h"
#include "pax/api/tree_convert.h"

namespace pax {

namespace detail {

template <class... Ts>
using ArgTuple = std::tuple<std::decay_t<Ts>...>;

// Which positions of an argument tuple are traced trees.
template <class Tuple, size_t... I>
std::vector<bool> tree_positions(std::index_sequence<I...>) {
  return {is_tree_v<std::tuple_element_t<I, Tuple>>...};
}
template <class Tuple>
std::vector<bool> tree_positions() {
  return tree_positions<Tuple>(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

// Moves the selected tree arguments out of `args` (leaving default values).
template <class Tuple, size_t... I>
std::vector<Tree> take_trees(Tuple& args, const std::vector<bool>& selected, std::index_sequence<I...>) {
  std::vector<Tree> out;
  auto take = [&](auto& x, size_t i) {
    using T = std::decay_t<decltype(x)>;
    if constexpr (is_tree_v<T>) {
      if (selected[i]) {
        out.push_back(to_tree(x));
        x = T();
      }
    }
  };
  (take(std::get<I>(args), I), ...);
  return out;
}
template <class Tuple>
std::vector<Tree> take_trees(Tuple& args, const std::vector<bool>& selected) {
  return take_trees(args, selected, std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

// Static arguments as cache-key values.
template <class T>
void add_static(std::vector<std::shared_ptr<const StaticValue>>& out, const T& x) {
  if constexpr (!is_tree_v<T>) {
    static_assert(std::is_invocable_v<std::hash<T>, const T&>,
                  "a static (non-array) argument of a jitted function needs std::hash and operator==");
    out.push_back(std::make_shared<StaticValueOf<T>>(x));
  }
}
template <class Tuple, size_t... I>
std::vector<std::shared_ptr<const StaticValue>> statics_of(const Tuple& args, std::index_sequence<I...>) {
  std::vector<std::shared_ptr<const StaticValue>> out;
  (add_static(out, std::get<I>(args)), ...);
  return out;
}

// The user function as a TreeFn over the selected arguments; the others keep
// the values in `saved`.
template <class F, class Tuple>
TreeFn make_tree_fn(const F& f, Tuple saved, std::vector<bool> selected) {
  return [&f, saved = std::move(saved), selected = std::move(selected)](const std::vector<Tree>& trees) -> Tree {
    Tuple args = saved;
    size_t k = 0;
    std::apply(
        [&](auto&... x) {
          size_t i = 0;
          auto put = [&](auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (is_tree_v<T>) {
              if (selected[i]) v = from_tree<T>(trees[k++]);
            }
            ++i;
          };
          (put(x), ...);
        },
        args);
    using R = decltype(std::apply(f, args));
    static_assert(is_tree_v<R>,
                  "a transformed function must return Array, Tree, or a vector / pair / tuple / map of those");
    return to_tree(std::apply(f, args));
  };
}

template <int... I>
std::vector<bool> select_argnums(size_t n) {
  std::vector<bool> sel(n, false);
  ((sel[size_t(I)] = true), ...);
  return sel;
}

// The gradient of argument I as its own type.
template <class Tuple, int I>
auto grad_as(const Tree& g) {
  using T = std::tuple_element_t<size_t(I), Tuple>;
  static_assert(is_tree_v<T>, "grad: a differentiated argument must be an Array or a tree of Arrays");
  return from_tree<T>(g);
}

template <class Tuple, int... I>
auto grads_as(const std::vector<Tree>& g) {
  if constexpr (sizeof...(I) == 1) {
    return grad_as<Tuple, I...>(g[0]);
  } else {
    size_t k = 0;
    return std::tuple{grad_as<Tuple, I>(g[k++])...};
  }
}

}  // namespace detail

}  // namespace pax

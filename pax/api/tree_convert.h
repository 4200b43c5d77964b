// Conversion between C++ argument / result types and Trees, so that the
// transforms accept natural signatures: Array, Tree, std::vector<T>,
// std::pair, std::tuple and std::map<std::string, T> of those. Other argument
// types (int, double, bool, std::string, enums, ...) are static: they are not
// traced, and jit keys its cache on their values.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pax/core/error.h"
#include "pax/core/tree.h"

namespace pax {

template <class T, class Enable = void>
struct TreeConvert {
  static constexpr bool is_tree = false;
};

template <class T>
inline constexpr bool is_tree_v = TreeConvert<std::decay_t<T>>::is_tree;

template <class T>
Tree to_tree(const T& x) {
  return TreeConvert<std::decay_t<T>>::to(x);
}
template <class T>
T from_tree(const Tree& t) {
  return TreeConvert<T>::from(t);
}

template <>
struct TreeConvert<Array> {
  static constexpr bool is_tree = true;
  static Tree to(const Array& a) { return Tree(a); }
  static Array from(const Tree& t) { return t.leaf(); }
};

template <>
struct TreeConvert<Tree> {
  static constexpr bool is_tree = true;
  static Tree to(const Tree& t) { return t; }
  static Tree from(const Tree& t) { return t; }
};

template <class T>
struct TreeConvert<std::vector<T>, std::enable_if_t<is_tree_v<T>>> {
  static constexpr bool is_tree = true;
  static Tree to(const std::vector<T>& v) {
    Tree::List items;
    for (const T& x : v) items.push_back(to_tree(x));
    return Tree(std::move(items));
  }
  static std::vector<T> from(const Tree& t) {
    std::vector<T> out;
    for (const Tree& c : t.items()) out.push_back(from_tree<T>(c));
    return out;
  }
};

template <class T>
struct TreeConvert<std::map<std::string, T>, std::enable_if_t<is_tree_v<T>>> {
  static constexpr bool is_tree = true;
  static Tree to(const std::map<std::string, T>& m) {
    Tree::Dict items;
    for (const auto& [k, v] : m) items.emplace_back(k, to_tree(v));
    return Tree::dict(std::move(items));
  }
  static std::map<std::string, T> from(const Tree& t) {
    std::map<std::string, T> out;
    for (const auto& [k, v] : t.entries()) out.emplace(k, from_tree<T>(v));
    return out;
  }
};

template <class... Ts>
struct TreeConvert<std::tuple<Ts...>, std::enable_if_t<(is_tree_v<Ts> && ...)>> {
  static constexpr bool is_tree = true;
  static Tree to(const std::tuple<Ts...>& t) {
    Tree::List items;
    std::apply([&](const auto&... x) { (items.push_back(to_tree(x)), ...); }, t);
    return Tree(std::move(items));
  }
  static std::tuple<Ts...> from(const Tree& t) {
    PAX_CHECK(t.is_list() && t.size() == sizeof...(Ts), "expected a list of ", sizeof...(Ts), " trees, got ", t.str());
    return from_items(t, std::index_sequence_for<Ts...>{});
  }
  template <size_t... I>
  static std::tuple<Ts...> from_items(const Tree& t, std::index_sequence<I...>) {
    return std::tuple<Ts...>(from_tree<Ts>(t[I])...);
  }
};

template <class A, class B>
struct TreeConvert<std::pair<A, B>, std::enable_if_t<is_tree_v<A> && is_tree_v<B>>> {
  static constexpr bool is_tree = true;
  static Tree to(const std::pair<A, B>& p) { return Tree(Tree::List{to_tree(p.first), to_tree(p.second)}); }
  static std::pair<A, B> from(const Tree& t) {
    PAX_CHECK(t.is_list() && t.size() == 2, "expected a pair (a list of 2 trees), got ", t.str());
    return {from_tree<A>(t[0]), from_tree<B>(t[1])};
  }
};

}  // namespace pax

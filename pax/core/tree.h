// Tree: a pytree of Arrays — a leaf, a list, an insertion-ordered
// string-keyed dict (Pax's NestedMap), or None (an empty subtree). Every
// transform accepts and returns trees. TreeDef is a tree's structure without
// its leaves: comparable, hashable and printable.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/array.h"

namespace pax {

class Tree {
 public:
  enum class Kind : uint8_t { none, leaf, list, dict };
  using List = std::vector<Tree>;
  using Item = std::pair<std::string, Tree>;
  using Dict = std::vector<Item>;  // insertion order; keys unique

  Tree() = default;  // None
  Tree(Array leaf);  // NOLINT(google-explicit-constructor)
  Tree(List items);  // NOLINT
  static Tree list(List items = {});
  static Tree dict(Dict items = {});
  static Tree dict(std::initializer_list<Item> items);

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_leaf() const { return kind_ == Kind::leaf; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }

  const Array& leaf() const;    // throws unless a leaf
  size_t size() const;          // children of a list or dict; 0 otherwise
  const List& items() const;    // list children
  const Dict& entries() const;  // dict children in insertion order
  std::vector<std::string> keys() const;
  bool contains(const std::string& key) const;

  // Dict access. The const form throws pax::Error listing the keys; the
  // mutable form inserts None for a missing key (NestedMap-style building).
  const Tree& operator[](const std::string& key) const;
  Tree& operator[](const std::string& key);
  const Tree& operator[](const char* key) const { return (*this)[std::string(key)]; }
  Tree& operator[](const char* key) { return (*this)[std::string(key)]; }
  // List access (throws when out of range).
  const Tree& operator[](size_t i) const;
  Tree& operator[](size_t i);
  const Tree& operator[](int i) const { return (*this)[size_t(i)]; }  // t[0] is not a null key
  Tree& operator[](int i) { return (*this)[size_t(i)]; }
  const Tree& at(const std::string& key) const { return (*this)[key]; }
  // Path access: "params/ff/w" (list entries by index, "layers/0/w").
  const Tree& at_path(const std::string& path) const;

  void push_back(Tree t);                        // list
  void set(const std::string& key, Tree value);  // dict: insert or replace

  // "{'b': f32[4], 'w': f32[3,4]}" — shapes, not values.
  std::string str() const;

 private:
  Kind kind_ = Kind::none;
  Array leaf_;
  std::shared_ptr<List> list_;  // copy-on-write children
  std::shared_ptr<Dict> dict_;
  List& mutable_list();
  Dict& mutable_dict();
};

std::ostream& operator<<(std::ostream& os, const Tree& t);

// flax.core.pop(tree, key): (the dict without `key`, the value at `key`).
//   auto [state, params] = tree_pop(variables, "params");
// Throws pax::Error unless `tree` is a dict holding `key` (the message lists its keys).
std::pair<Tree, Tree> tree_pop(const Tree& tree, const std::string& key);

// Python's {**a, **b} for dicts: a's entries, then b's; a key in both takes
// b's value in a's position.
//   Tree variables = tree_merge(Tree::dict({{"params", params}}), state);
// Throws pax::Error unless both are dicts (None counts as an empty dict).
Tree tree_merge(const Tree& a, const Tree& b);

// The structure of a tree: kinds, dict keys and list lengths, with leaves as
// holes. Two trees with equal TreeDefs can be zipped leaf by leaf.
class TreeDef {
 public:
  TreeDef() = default;
  size_t num_leaves() const { return num_leaves_; }
  // The leaves under each child of the root (a list's items, a dict's
  // entries), in order; empty when the root is a leaf or None.
  std::vector<size_t> child_leaf_counts() const;
  bool operator==(const TreeDef& other) const;
  bool operator!=(const TreeDef& other) const { return !(*this == other); }
  size_t hash() const;
  std::string str() const;  // "{'b': *, 'w': *}"

 private:
  friend class TreeDefBuilder;
  struct Node {
    Tree::Kind kind = Tree::Kind::none;
    std::vector<std::string> keys;  // dict
    size_t num_children = 0;
    size_t num_leaves = 0;  // below this node
  };
  std::vector<Node> nodes_;  // pre-order
  size_t num_leaves_ = 0;
  friend std::pair<std::vector<Array>, TreeDef> tree_flatten(const Tree& tree);
  friend Tree tree_unflatten(const TreeDef& def, std::span<const Array> leaves);
};

std::ostream& operator<<(std::ostream& os, const TreeDef& d);

// Leaves in pre-order (dict entries in insertion order), and the structure.
std::pair<std::vector<Array>, TreeDef> tree_flatten(const Tree& tree);
Tree tree_unflatten(const TreeDef& def, std::span<const Array> leaves);
std::vector<Array> tree_leaves(const Tree& tree);
TreeDef tree_structure(const Tree& tree);
// Paths of the leaves in flatten order: "params/ff/w", "layers/0/b".
std::vector<std::string> tree_paths(const Tree& tree);

// "" when a and b have the same structure; otherwise where and how they
// differ, e.g. "at params/ff: keys differ (missing 'b', unexpected 'c')".
std::string tree_structure_diff(const Tree& a, const Tree& b);
// Throws pax::Error naming `what` and the difference when structures differ.
void check_same_structure(const Tree& a, const Tree& b, const std::string& what);

Tree tree_map(const std::function<Array(const Array&)>& f, const Tree& tree);
Tree tree_map(const std::function<Array(const Array&, const Array&)>& f, const Tree& a, const Tree& b);
// n-ary: f receives the leaves at one position of every tree.
Tree tree_map_n(const std::function<Array(std::span<const Array>)>& f, std::span<const Tree> trees);
Tree tree_map_with_path(const std::function<Array(const std::string& path, const Array&)>& f, const Tree& tree);

}  // namespace pax

// Tree, TreeDef, flatten / unflatten, tree_map and structure diffs.
#include "pax/core/tree.h"

#include <algorithm>
#include <functional>
#include <ostream>

#include "pax/core/error.h"

namespace pax {

// ---------------------------------------------------------------------------
// Tree

Tree::Tree(Array leaf) : kind_(Kind::leaf), leaf_(std::move(leaf)) {
  PAX_CHECK(leaf_.defined(), "Tree: a leaf must be a defined Array (use Tree() for None)");
}
Tree::Tree(List items) : kind_(Kind::list), list_(std::make_shared<List>(std::move(items))) {}
Tree Tree::list(List items) { return Tree(std::move(items)); }

Tree Tree::dict(Dict items) {
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      PAX_CHECK(items[i].first != items[j].first, "Tree::dict: duplicate key '", items[i].first, "'");
    }
  }
  Tree t;
  t.kind_ = Kind::dict;
  t.dict_ = std::make_shared<Dict>(std::move(items));
  return t;
}
Tree Tree::dict(std::initializer_list<Item> items) { return dict(Dict(items)); }

const Array& Tree::leaf() const {
  PAX_CHECK(is_leaf(), "Tree: expected a leaf, got ", str());
  return leaf_;
}

size_t Tree::size() const {
  if (is_list()) return list_->size();
  if (is_dict()) return dict_->size();
  return 0;
}

const Tree::List& Tree::items() const {
  PAX_CHECK(is_list(), "Tree: expected a list, got ", str());
  return *list_;
}

const Tree::Dict& Tree::entries() const {
  PAX_CHECK(is_dict(), "Tree: expected a dict, got ", str());
  return *dict_;
}

std::vector<std::string> Tree::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries()) out.push_back(k);
  return out;
}

bool Tree::contains(const std::string& key) const {
  if (!is_dict()) return false;
  for (const auto& item : *dict_) {
    if (item.first == key) return true;
  }
  return false;
}

namespace {
std::string keys_str(const Tree::Dict& d) {
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", '" : "'") + d[i].first + "'";
  return out.empty() ? "(none)" : out;
}
}  // namespace

std::pair<Tree, Tree> tree_pop(const Tree& tree, const std::string& key) {
  PAX_CHECK(tree.is_dict(), "tree_pop: cannot pop '", key, "' from ", tree.str(), " (not a dict)");
  PAX_CHECK(tree.contains(key), "tree_pop: no key '", key, "'; keys are ", keys_str(tree.entries()));
  Tree::Dict rest;
  Tree popped;
  for (const auto& [k, v] : tree.entries()) {
    if (k == key) popped = v;
    else rest.emplace_back(k, v);
  }
  return {Tree::dict(std::move(rest)), popped};
}

Tree tree_merge(const Tree& a, const Tree& b) {
  for (const Tree* t : {&a, &b})
    PAX_CHECK(t->is_dict() || t->is_none(), "tree_merge: ", t->str(), " is not a dict (only dicts merge)");
  Tree out = a.is_none() ? Tree::dict() : a;
  if (b.is_dict())
    for (const auto& [k, v] : b.entries()) out.set(k, v);
  return out;
}

const Tree& Tree::operator[](const std::string& key) const {
  PAX_CHECK(is_dict(), "Tree: cannot look up key '", key, "' in ", str(), " (not a dict)");
  for (const auto& item : *dict_) {
    if (item.first == key) return item.second;
  }
  PAX_FAIL("Tree: no key '", key, "'; keys are ", keys_str(*dict_));
}

Tree::List& Tree::mutable_list() {
  if (list_.use_count() > 1) list_ = std::make_shared<List>(*list_);
  return *list_;
}

Tree::Dict& Tree::mutable_dict() {
  if (dict_.use_count() > 1) dict_ = std::make_shared<Dict>(*dict_);
  return *dict_;
}

Tree& Tree::operator[](const std::string& key) {
  if (is_none()) *this = dict();
  PAX_CHECK(is_dict(), "Tree: cannot set key '", key, "' in ", str(), " (not a dict)");
  Dict& d = mutable_dict();
  for (auto& item : d) {
    if (item.first == key) return item.second;
  }
  d.emplace_back(key, Tree());
  return d.back().second;
}

const Tree& Tree::operator[](size_t i) const {
  PAX_CHECK(is_list() && i < list_->size(), "Tree: index ", i, " is out of range for ", str());
  return (*list_)[i];
}

Tree& Tree::operator[](size_t i) {
  PAX_CHECK(is_list() && i < list_->size(), "Tree: index ", i, " is out of range for ", str());
  return mutable_list()[i];
}

const Tree& Tree::at_path(const std::string& path) const {
  const Tree* node = this;
  size_t start = 0;
  while (start <= path.size() && !path.empty()) {
    size_t slash = path.find('/', start);
    std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (node->is_list()) {
      char* end = nullptr;
      unsigned long i = std::strtoul(part.c_str(), &end, 10);
      PAX_CHECK(!part.empty() && *end == '\0', "Tree::at_path('", path, "'): '", part, "' is not a list index");
      node = &(*node)[size_t(i)];
    } else {
      PAX_CHECK(node->contains(part), "Tree::at_path('", path, "'): no key '", part, "'",
                node->is_dict() ? "; keys are " + keys_str(*node->dict_) : std::string(" (not a dict)"));
      node = &(*node)[part];
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return *node;
}

void Tree::push_back(Tree t) {
  if (is_none()) *this = list();
  PAX_CHECK(is_list(), "Tree: push_back on ", str(), " (not a list)");
  mutable_list().push_back(std::move(t));
}

void Tree::set(const std::string& key, Tree value) { (*this)[key] = std::move(value); }

std::string Tree::str() const {
  switch (kind_) {
    case Kind::none: return "None";
    case Kind::leaf: return leaf_.aval().str();
    case Kind::list: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].str();
      return out + "]";
    }
    case Kind::dict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        out += (i ? ", '" : "'") + (*dict_)[i].first + "': " + (*dict_)[i].second.str();
      }
      return out + "}";
    }
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, const Tree& t) { return os << t.str(); }

// ---------------------------------------------------------------------------
// TreeDef, flatten, unflatten

class TreeDefBuilder {
 public:
  static void add(const Tree& t, TreeDef& def, std::vector<Array>* leaves) {
    const size_t index = def.nodes_.size();
    def.nodes_.push_back({t.kind(), {}, t.size(), 0});
    const size_t before = leaves ? leaves->size() : def.num_leaves_;
    switch (t.kind()) {
      case Tree::Kind::none: break;
      case Tree::Kind::leaf:
        if (leaves) leaves->push_back(t.leaf());
        ++def.num_leaves_;
        break;
      case Tree::Kind::list:
        for (const Tree& c : t.items()) add(c, def, leaves);
        break;
      case Tree::Kind::dict:
        for (const auto& [k, c] : t.entries()) {
          def.nodes_[index].keys.push_back(k);
          add(c, def, leaves);
        }
        break;
    }
    def.nodes_[index].num_leaves = (leaves ? leaves->size() : def.num_leaves_) - before;
  }

  static Tree build(const TreeDef& def, size_t& node, std::span<const Array> leaves, size_t& leaf) {
    const TreeDef::Node& n = def.nodes_[node++];
    switch (n.kind) {
      case Tree::Kind::none: return Tree();
      case Tree::Kind::leaf: return Tree(leaves[leaf++]);
      case Tree::Kind::list: {
        Tree::List items;
        for (size_t i = 0; i < n.num_children; ++i) items.push_back(build(def, node, leaves, leaf));
        return Tree(std::move(items));
      }
      case Tree::Kind::dict: {
        Tree::Dict items;
        for (size_t i = 0; i < n.num_children; ++i) items.emplace_back(n.keys[i], build(def, node, leaves, leaf));
        return Tree::dict(std::move(items));
      }
    }
    return Tree();
  }

  static void str(const TreeDef& def, size_t& node, std::string& out) {
    const TreeDef::Node& n = def.nodes_[node++];
    switch (n.kind) {
      case Tree::Kind::none: out += "None"; return;
      case Tree::Kind::leaf: out += "*"; return;
      case Tree::Kind::list:
        out += "[";
        for (size_t i = 0; i < n.num_children; ++i) {
          if (i) out += ", ";
          str(def, node, out);
        }
        out += "]";
        return;
      case Tree::Kind::dict:
        out += "{";
        for (size_t i = 0; i < n.num_children; ++i) {
          out += (i ? ", '" : "'") + n.keys[i] + "': ";
          str(def, node, out);
        }
        out += "}";
        return;
    }
  }
};

std::pair<std::vector<Array>, TreeDef> tree_flatten(const Tree& tree) {
  std::pair<std::vector<Array>, TreeDef> out;
  TreeDefBuilder::add(tree, out.second, &out.first);
  return out;
}

Tree tree_unflatten(const TreeDef& def, std::span<const Array> leaves) {
  PAX_CHECK(leaves.size() == def.num_leaves(), "tree_unflatten: structure ", def.str(), " has ", def.num_leaves(),
            " leaves but ", leaves.size(), " arrays were given");
  if (def.nodes_.empty()) return Tree();
  size_t node = 0, leaf = 0;
  return TreeDefBuilder::build(def, node, leaves, leaf);
}

std::vector<Array> tree_leaves(const Tree& tree) { return tree_flatten(tree).first; }
TreeDef tree_structure(const Tree& tree) { return tree_flatten(tree).second; }

std::vector<size_t> TreeDef::child_leaf_counts() const {
  std::vector<size_t> counts;
  auto children = [&](size_t i) {
    const Tree::Kind k = nodes_[i].kind;
    return k == Tree::Kind::list || k == Tree::Kind::dict ? nodes_[i].num_children : 0;
  };
  if (nodes_.empty()) return counts;
  // Pre-order: a child's subtree spans the nodes up to the next child.
  std::function<size_t(size_t)> subtree_end = [&](size_t i) {
    size_t j = i + 1;
    for (size_t c = 0; c < children(i); ++c) j = subtree_end(j);
    return j;
  };
  for (size_t c = 0, i = 1; c < children(0); ++c) {
    counts.push_back(nodes_[i].num_leaves);
    i = subtree_end(i);
  }
  return counts;
}

bool TreeDef::operator==(const TreeDef& o) const {
  if (nodes_.size() != o.nodes_.size() || num_leaves_ != o.num_leaves_) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &a = nodes_[i], &b = o.nodes_[i];
    if (a.kind != b.kind || a.num_children != b.num_children || a.keys != b.keys) return false;
  }
  return true;
}

size_t TreeDef::hash() const {
  size_t h = nodes_.size();
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (const Node& n : nodes_) {
    mix(size_t(n.kind));
    mix(n.num_children);
    for (const std::string& k : n.keys) mix(std::hash<std::string>{}(k));
  }
  return h;
}

std::string TreeDef::str() const {
  if (nodes_.empty()) return "None";
  std::string out;
  size_t node = 0;
  TreeDefBuilder::str(*this, node, out);
  return out;
}

std::ostream& operator<<(std::ostream& os, const TreeDef& d) { return os << d.str(); }

// ---------------------------------------------------------------------------
// paths, diffs, maps

namespace {

std::string join(const std::string& prefix, const std::string& part) {
  return prefix.empty() ? part : prefix + "/" + part;
}

void collect_paths(const Tree& t, const std::string& prefix, std::vector<std::string>& out) {
  switch (t.kind()) {
    case Tree::Kind::none: return;
    case Tree::Kind::leaf: out.push_back(prefix); return;
    case Tree::Kind::list:
      for (size_t i = 0; i < t.size(); ++i) collect_paths(t[i], join(prefix, std::to_string(i)), out);
      return;
    case Tree::Kind::dict:
      for (const auto& [k, c] : t.entries()) collect_paths(c, join(prefix, k), out);
      return;
  }
}

const char* kind_name(Tree::Kind k) {
  switch (k) {
    case Tree::Kind::none: return "None";
    case Tree::Kind::leaf: return "a leaf";
    case Tree::Kind::list: return "a list";
    case Tree::Kind::dict: return "a dict";
  }
  return "?";
}

std::string diff(const Tree& a, const Tree& b, const std::string& path) {
  const std::string where = path.empty() ? "at the root" : "at " + path;
  if (a.kind() != b.kind()) return where + ": " + kind_name(a.kind()) + " vs " + kind_name(b.kind());
  if (a.is_list()) {
    if (a.size() != b.size()) {
      return where + ": lists of length " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    }
    for (size_t i = 0; i < a.size(); ++i) {
      std::string d = diff(a[i], b[i], join(path, std::to_string(i)));
      if (!d.empty()) return d;
    }
  } else if (a.is_dict()) {
    std::string missing, extra;
    for (const auto& [k, v] : a.entries()) {
      if (!b.contains(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
    }
    for (const auto& [k, v] : b.entries()) {
      if (!a.contains(k)) extra += (extra.empty() ? "'" : ", '") + k + "'";
    }
    if (!missing.empty() || !extra.empty()) {
      std::string out = where + ": keys differ (";
      if (!missing.empty()) out += "missing " + missing;
      if (!extra.empty()) out += std::string(missing.empty() ? "" : ", ") + "unexpected " + extra;
      return out + ")";
    }
    std::vector<std::string> ka = a.keys(), kb = b.keys();
    if (ka != kb) return where + ": same keys in a different order";
    for (const auto& [k, v] : a.entries()) {
      std::string d = diff(v, b[k], join(path, k));
      if (!d.empty()) return d;
    }
  }
  return "";
}

void map_paths(const Tree& t, const std::string& prefix,
               const std::function<Array(const std::string&, const Array&)>& f, Tree& out) {
  switch (t.kind()) {
    case Tree::Kind::none: out = Tree(); return;
    case Tree::Kind::leaf: out = Tree(f(prefix, t.leaf())); return;
    case Tree::Kind::list: {
      Tree::List items(t.size());
      for (size_t i = 0; i < t.size(); ++i) map_paths(t[i], join(prefix, std::to_string(i)), f, items[i]);
      out = Tree(std::move(items));
      return;
    }
    case Tree::Kind::dict: {
      Tree::Dict items;
      for (const auto& [k, c] : t.entries()) {
        items.emplace_back(k, Tree());
        map_paths(c, join(prefix, k), f, items.back().second);
      }
      out = Tree::dict(std::move(items));
      return;
    }
  }
}

}  // namespace

std::vector<std::string> tree_paths(const Tree& tree) {
  std::vector<std::string> out;
  collect_paths(tree, "", out);
  return out;
}

std::string tree_structure_diff(const Tree& a, const Tree& b) { return diff(a, b, ""); }

void check_same_structure(const Tree& a, const Tree& b, const std::string& what) {
  std::string d = diff(a, b, "");
  PAX_CHECK(d.empty(), what, ": tree structures differ ", d, "; got ", a.str(), " and ", b.str());
}

Tree tree_map(const std::function<Array(const Array&)>& f, const Tree& tree) {
  auto [leaves, def] = tree_flatten(tree);
  for (Array& x : leaves) x = f(x);
  return tree_unflatten(def, leaves);
}

Tree tree_map(const std::function<Array(const Array&, const Array&)>& f, const Tree& a, const Tree& b) {
  check_same_structure(a, b, "tree_map");
  auto [la, def] = tree_flatten(a);
  std::vector<Array> lb = tree_leaves(b);
  for (size_t i = 0; i < la.size(); ++i) la[i] = f(la[i], lb[i]);
  return tree_unflatten(def, la);
}

Tree tree_map_n(const std::function<Array(std::span<const Array>)>& f, std::span<const Tree> trees) {
  PAX_CHECK(!trees.empty(), "tree_map_n: needs at least one tree");
  for (size_t i = 1; i < trees.size(); ++i) check_same_structure(trees[0], trees[i], "tree_map_n");
  auto [first, def] = tree_flatten(trees[0]);
  std::vector<std::vector<Array>> all{first};
  for (size_t i = 1; i < trees.size(); ++i) all.push_back(tree_leaves(trees[i]));
  std::vector<Array> out(first.size());
  std::vector<Array> args(trees.size());
  for (size_t leaf = 0; leaf < first.size(); ++leaf) {
    for (size_t t = 0; t < trees.size(); ++t) args[t] = all[t][leaf];
    out[leaf] = f(args);
  }
  return tree_unflatten(def, out);
}

Tree tree_map_with_path(const std::function<Array(const std::string&, const Array&)>& f, const Tree& tree) {
  Tree out;
  map_paths(tree, "", f, out);
  return out;
}

}  // namespace pax

// masked, multi_transform and apply_if_finite (see wrappers.h).
#include "pax/optim/wrappers.h"

#include <memory>
#include <utility>
#include <vector>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"

namespace pax::optim {

namespace {

// The tree the leaf selection reads: the params, or the updates without them.
const Tree& selection_source(const std::string& op, const Tree& updates, const Tree& params) {
  if (params.is_none()) return updates;
  check_structure(op, updates, params, "params");
  return params;
}

// `tree` with the leaves not selected (flatten order) replaced by None.
Tree keep_selected(const Tree& tree, const std::vector<bool>& selected, size_t& next) {
  switch (tree.kind()) {
    case Tree::Kind::none: return Tree();
    case Tree::Kind::leaf: return selected[next++] ? tree : Tree();
    case Tree::Kind::list: {
      Tree::List items;
      for (const Tree& c : tree.items()) items.push_back(keep_selected(c, selected, next));
      return Tree::list(std::move(items));
    }
    case Tree::Kind::dict: {
      Tree::Dict items;
      for (const auto& [k, c] : tree.entries()) items.emplace_back(k, keep_selected(c, selected, next));
      return Tree::dict(std::move(items));
    }
  }
  return Tree();
}

Tree keep_selected(const Tree& tree, const std::vector<bool>& selected) {
  size_t next = 0;
  return keep_selected(tree, selected, next);
}

// `original` with its selected leaves taken from `inner` (which has the
// structure keep_selected gives).
Tree merge_selected(const Tree& original, const Tree& inner, const std::vector<bool>& selected, size_t& next) {
  switch (original.kind()) {
    case Tree::Kind::none: return Tree();
    case Tree::Kind::leaf: return selected[next++] ? inner : original;
    case Tree::Kind::list: {
      Tree::List items;
      for (size_t i = 0; i < original.size(); ++i)
        items.push_back(merge_selected(original[i], inner[i], selected, next));
      return Tree::list(std::move(items));
    }
    case Tree::Kind::dict: {
      Tree::Dict items;
      for (const auto& [k, c] : original.entries()) items.emplace_back(k, merge_selected(c, inner[k], selected, next));
      return Tree::dict(std::move(items));
    }
  }
  return Tree();
}

// Runs `inner` on the selected leaves; the others pass through.
std::pair<Tree, Tree> update_selected(const std::string& op, const GradientTransformation& inner,
                                      const std::vector<bool>& selected, const Tree& updates, const Tree& inner_state,
                                      const Tree& params) {
  Tree sub_updates = keep_selected(updates, selected);
  Tree sub_params = params.is_none() ? Tree() : keep_selected(params, selected);
  auto [new_updates, new_state] = inner.update(sub_updates, inner_state, sub_params);
  check_structure(op, sub_updates, new_updates, "updates the inner transformation returned");
  size_t next = 0;
  return {merge_selected(updates, new_updates, selected, next), std::move(new_state)};
}

std::vector<bool> select_leaves(const Tree& source, const Mask& mask) {
  std::vector<Array> leaves = tree_leaves(source);
  std::vector<std::string> paths = tree_paths(source);
  std::vector<bool> selected(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) selected[i] = mask(paths[i], leaves[i]);
  return selected;
}

}  // namespace

GradientTransformation masked(GradientTransformation inner, Mask mask) {
  check_transformation(inner, "masked", "the inner transformation");
  PAX_CHECK(static_cast<bool>(mask), "masked: the mask is an empty function");
  auto in = std::make_shared<const GradientTransformation>(std::move(inner));
  GradientTransformation t;
  t.init = [in, mask](const Tree& params) {
    return Tree::dict({{"inner_state", in->init(keep_selected(params, select_leaves(params, mask)))}});
  };
  t.update = [in, mask](const Tree& updates, const Tree& state, const Tree& params) {
    const std::string op = "masked";
    const Tree& inner_state = state_entry(op, state, "inner_state");
    std::vector<bool> selected = select_leaves(selection_source(op, updates, params), mask);
    auto [out, new_inner] = update_selected(op, *in, selected, updates, inner_state, params);
    return std::make_pair(out, Tree::dict({{"inner_state", new_inner}}));
  };
  return t;
}

namespace {

// The label of every leaf (flatten order); each must name a transformation.
std::vector<std::string> label_leaves(const Tree& source, const Labeler& labeler,
                                      const std::map<std::string, GradientTransformation>& transforms) {
  std::vector<Array> leaves = tree_leaves(source);
  std::vector<std::string> paths = tree_paths(source);
  std::vector<std::string> labels(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    labels[i] = labeler(paths[i], leaves[i]);
    if (!transforms.count(labels[i])) {
      std::string valid;
      for (const auto& [k, v] : transforms) valid += (valid.empty() ? "'" : ", '") + k + "'";
      PAX_FAIL("multi_transform: the leaf '", paths[i], "' is labelled '", labels[i],
               "', which has no transformation; valid labels: ", valid);
    }
  }
  return labels;
}

std::vector<bool> with_label(const std::vector<std::string>& labels, const std::string& label) {
  std::vector<bool> selected(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) selected[i] = labels[i] == label;
  return selected;
}

}  // namespace

GradientTransformation multi_transform(std::map<std::string, GradientTransformation> transforms, Labeler labeler) {
  PAX_CHECK(!transforms.empty(), "multi_transform: needs at least one labelled transformation");
  PAX_CHECK(static_cast<bool>(labeler), "multi_transform: the labeler is an empty function");
  for (const auto& [label, tx] : transforms) check_transformation(tx, "multi_transform", "'" + label + "'");
  auto txs = std::make_shared<const std::map<std::string, GradientTransformation>>(std::move(transforms));
  GradientTransformation t;
  t.init = [txs, labeler](const Tree& params) {
    std::vector<std::string> labels = label_leaves(params, labeler, *txs);
    Tree::Dict states;
    for (const auto& [label, tx] : *txs) {
      states.emplace_back(label, tx.init(keep_selected(params, with_label(labels, label))));
    }
    return Tree::dict(std::move(states));
  };
  t.update = [txs, labeler](const Tree& updates, const Tree& state, const Tree& params) {
    const std::string op = "multi_transform";
    std::vector<std::string> labels = label_leaves(selection_source(op, updates, params), labeler, *txs);
    Tree out = updates;
    Tree::Dict states;
    for (const auto& [label, tx] : *txs) {
      auto [next, s] = update_selected(op, tx, with_label(labels, label), out, state_entry(op, state, label), params);
      out = std::move(next);
      states.emplace_back(label, std::move(s));
    }
    return std::make_pair(out, Tree::dict(std::move(states)));
  };
  return t;
}

GradientTransformation apply_if_finite(GradientTransformation inner, int max_consecutive_errors) {
  const char* op = "apply_if_finite";
  check_transformation(inner, op, "the inner transformation");
  check_hyper(max_consecutive_errors >= 0, op, "max_consecutive_errors", max_consecutive_errors, ">= 0");
  auto in = std::make_shared<const GradientTransformation>(std::move(inner));
  GradientTransformation t;
  t.init = [in](const Tree& params) {
    return Tree::dict({{"notfinite_count", zero_count()},
                       {"last_finite", scalar(1.0, DType::bool_)},
                       {"total_notfinite", zero_count()},
                       {"inner_state", in->init(params)}});
  };
  t.update = [in, op, max_consecutive_errors](const Tree& updates, const Tree& state, const Tree& params) {
    const Tree& inner_state = state_entry(op, state, "inner_state");
    const Array& notfinite = state_entry(op, state, "notfinite_count").leaf();
    const Array& total = state_entry(op, state, "total_notfinite").leaf();
    Array finite = scalar(1.0, DType::bool_);
    for (const Array& x : tree_leaves(updates)) finite = logical_and(finite, all(isfinite(x)));
    Array count = where(finite, 0, safe_increment(notfinite)).astype(notfinite.dtype());
    Array apply = logical_or(finite, count > max_consecutive_errors);
    // Both outcomes are computed and selected, so this traces; a skipped
    // update's NaNs never reach the outputs.
    auto [new_updates, new_inner] = in->update(updates, inner_state, params);
    Tree out = tree_map([&](const Array& u) { return where(apply, u, 0.0).astype(u.dtype()); }, new_updates);
    Tree kept = tree_select(apply, new_inner, inner_state, "apply_if_finite: the inner state");
    return std::make_pair(
        out, Tree::dict({{"notfinite_count", count},
                         {"last_finite", finite},
                         {"total_notfinite", where(finite, total, safe_increment(total)).astype(total.dtype())},
                         {"inner_state", kept}}));
  };
  return t;
}

}  // namespace pax::optim

// TrainState: creation, the gradient step, and the tree form used by jit and
// checkpoints.
#include "pax/train/train_state.h"

#include <string>
#include <utility>
#include <vector>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::train {

namespace {

constexpr const char* kKeys[] = {"step", "params", "opt_state", "extra"};

void check_tx(const optim::GradientTransformation& tx, const char* fn) {
  PAX_CHECK(tx.init && tx.update, fn, ": the GradientTransformation has no init or update function");
}

// Same structure and, leaf by leaf, the same shape: a gradient of the wrong
// shape would otherwise surface as a broadcasting error deep in the optimizer.
void check_grads_match(const Tree& params, const Tree& grads) {
  const char* what = "TrainState::apply_gradients: grads must have the structure of params";
  check_same_structure(params, grads, what);
  std::vector<std::string> paths = tree_paths(params);
  std::vector<Array> p = tree_leaves(params), g = tree_leaves(grads);
  for (size_t i = 0; i < p.size(); ++i) {
    PAX_CHECK(g[i].defined() && g[i].shape() == p[i].shape(), what, ": at ", paths[i], " the parameter is ",
              p[i].aval().str(), " but the gradient is ", g[i].defined() ? g[i].aval().str() : "an empty Array");
  }
}

}  // namespace

TrainState TrainState::create(Tree params, const optim::GradientTransformation& tx, Tree extra) {
  check_tx(tx, "TrainState::create");
  TrainState s;
  s.step = scalar<int32_t>(0);
  s.opt_state = tx.init(params);
  s.params = std::move(params);
  s.extra = std::move(extra);
  s.tx = tx;
  return s;
}

TrainState TrainState::create(ApplyFn apply_fn, Tree params, const optim::GradientTransformation& tx, Tree extra) {
  PAX_CHECK(apply_fn, "TrainState::create: apply_fn is empty; pass the model's apply function");
  TrainState s = create(std::move(params), tx, std::move(extra));
  s.apply_fn = std::move(apply_fn);
  return s;
}

TrainState TrainState::apply_gradients(const optim::GradientTransformation& tx, const Tree& grads,
                                       std::optional<Tree> new_extra) const {
  check_tx(tx, "TrainState::apply_gradients");
  PAX_CHECK(step.defined(), "TrainState::apply_gradients: the state has no step; build it with TrainState::create");
  check_grads_match(params, grads);
  auto [updates, new_opt_state] = tx.update(grads, opt_state, params);
  TrainState s = *this;  // the static fields stay
  s.step = (step + 1).astype(step.dtype());
  s.params = optim::apply_updates(params, updates);
  s.opt_state = std::move(new_opt_state);
  if (new_extra) s.extra = std::move(*new_extra);
  return s;
}

TrainState TrainState::apply_gradients(const Tree& grads, std::optional<Tree> new_extra) const {
  PAX_CHECK(tx.init && tx.update,
            "TrainState::apply_gradients(grads): the state holds no optimizer (a state rebuilt from a tree, as jit "
            "and checkpoints return it, has none): pass it, apply_gradients(tx, grads), or replace({.tx = tx})");
  return apply_gradients(tx, grads, std::move(new_extra));
}

TrainState TrainState::replace(Replacement fields) const {
  TrainState s = *this;
  if (fields.step) s.step = std::move(*fields.step);
  if (fields.params) s.params = std::move(*fields.params);
  if (fields.opt_state) s.opt_state = std::move(*fields.opt_state);
  if (fields.extra) s.extra = std::move(*fields.extra);
  if (fields.apply_fn) s.apply_fn = std::move(*fields.apply_fn);
  if (fields.tx) s.tx = std::move(*fields.tx);
  return s;
}

Tree TrainState::to_tree() const {
  return Tree::dict({{kKeys[0], Tree(step)}, {kKeys[1], params}, {kKeys[2], opt_state}, {kKeys[3], extra}});
}

TrainState TrainState::from_tree(const Tree& tree) {
  bool ok = tree.is_dict() && tree.size() == 4;
  for (const char* key : kKeys) ok = ok && tree.contains(key);
  PAX_CHECK(ok, "TrainState::from_tree: expected a dict with keys {step, params, opt_state, extra}, got ", tree.str());
  PAX_CHECK(tree["step"].is_leaf(), "TrainState::from_tree: 'step' must be a scalar array, got ", tree["step"].str());
  TrainState s;
  s.step = tree["step"].leaf();
  s.params = tree["params"];
  s.opt_state = tree["opt_state"];
  s.extra = tree["extra"];
  return s;
}

}  // namespace pax::train

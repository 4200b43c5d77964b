// TrainState: flax.training.train_state.TrainState for one optimizer — the
// step counter, the parameters, the optimizer state and other variable
// collections (batch_stats, ...), as one value that a jitted training step
// takes and returns.
//
//   GradientTransformation tx = ...;
//   TrainState state = TrainState::create(variables["params"], tx);
//   auto train_step = pax::jit([&tx](const TrainState& s, const Tree& batch) {
//     Tree grads = pax::grad(loss)(s.params, batch);
//     return s.apply_gradients(tx, grads);
//   });
//   state = train_step(state, batch);
//
// As flax's, the state also holds the model's apply function and the
// optimizer as static fields (flax's pytree_node=False): create() takes them,
// apply_gradients(grads) uses the held optimizer, replace() swaps fields:
//
//   TrainState state = TrainState::create(apply_fn, params, optim::adam(1e-3));
//   Tree out = state.apply_fn(Tree::dict({{"params", state.params}}), x);
//   state = state.apply_gradients(grads);
//   state = state.replace({.params = other_params});
//
// The static fields are not arrays: to_tree() leaves them out, so a state
// that comes back from jit (or a checkpoint) has none; a jitted step captures
// the optimizer and passes it to apply_gradients(tx, grads), as above.
#pragma once

#include <functional>
#include <optional>

#include "pax/api/tree_convert.h"
#include "pax/core/tree.h"
#include "pax/optim/gradient_transformation.h"

namespace pax::train {

// flax's apply_fn: the model's apply, (variables {params: ...}, inputs) -> outputs.
using ApplyFn = std::function<Tree(const Tree& variables, const Tree& inputs)>;

struct TrainState {
  Array step;      // i32 scalar: the number of apply_gradients calls so far
  Tree params;     // updated by the optimizer
  Tree opt_state;  // the optimizer's state (tx.init(params))
  Tree extra;      // other variable collections (batch_stats, ...); None when unused
  // Static fields, not part of to_tree() (see the file comment).
  ApplyFn apply_fn;                  // empty unless given to create() or replace()
  optim::GradientTransformation tx;  // create()'s optimizer

  // step = 0, opt_state = tx.init(params); tx is held.
  static TrainState create(Tree params, const optim::GradientTransformation& tx, Tree extra = Tree());
  // flax's TrainState.create(apply_fn=..., params=..., tx=...).
  static TrainState create(ApplyFn apply_fn, Tree params, const optim::GradientTransformation& tx, Tree extra = Tree());

  // tx.update(grads, opt_state, params), then apply_updates; step + 1, and
  // extra replaced by new_extra when given. grads must have the structure and
  // leaf shapes of params (pax::Error naming the difference otherwise).
  TrainState apply_gradients(const optim::GradientTransformation& tx, const Tree& grads,
                             std::optional<Tree> new_extra = std::nullopt) const;
  // The same with the held optimizer (flax's apply_gradients(grads=...));
  // pax::Error when the state holds none (one that came back from jit).
  TrainState apply_gradients(const Tree& grads, std::optional<Tree> new_extra = std::nullopt) const;

  // flax's replace(**kwargs): a copy with the given fields swapped.
  struct Replacement {
    std::optional<Array> step;
    std::optional<Tree> params, opt_state, extra;
    std::optional<ApplyFn> apply_fn;
    std::optional<optim::GradientTransformation> tx;
  };
  TrainState replace(Replacement fields) const;

  // {"step", "params", "opt_state", "extra"}: for checkpoints and transforms.
  Tree to_tree() const;
  // The inverse of to_tree(); pax::Error when keys are missing or step is not a leaf.
  static TrainState from_tree(const Tree& tree);
};

}  // namespace pax::train

namespace pax {

// jit / grad / vmap accept and return TrainState as the tree above.
template <>
struct TreeConvert<train::TrainState> {
  static constexpr bool is_tree = true;
  static Tree to(const train::TrainState& s) { return s.to_tree(); }
  static train::TrainState from(const Tree& t) { return train::TrainState::from_tree(t); }
};

}  // namespace pax

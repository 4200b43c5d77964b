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
// flax keeps the optimizer (and apply_fn) as static fields of the pytree; a
// C++ struct cannot carry static fields through the tree conversion, so the
// optimizer is passed to create() and apply_gradients() instead (capture it
// in the jitted lambda), and the model is called directly.
#pragma once

#include <optional>

#include "pax/api/tree_convert.h"
#include "pax/core/tree.h"
#include "pax/optim/gradient_transformation.h"

namespace pax::train {

struct TrainState {
  Array step;      // i32 scalar: the number of apply_gradients calls so far
  Tree params;     // updated by the optimizer
  Tree opt_state;  // the optimizer's state (tx.init(params))
  Tree extra;      // other variable collections (batch_stats, ...); None when unused

  // step = 0, opt_state = tx.init(params).
  static TrainState create(Tree params, const optim::GradientTransformation& tx, Tree extra = Tree());

  // tx.update(grads, opt_state, params), then apply_updates; step + 1, and
  // extra replaced by new_extra when given. grads must have the structure and
  // leaf shapes of params (pax::Error naming the difference otherwise).
  TrainState apply_gradients(const optim::GradientTransformation& tx, const Tree& grads,
                             std::optional<Tree> new_extra = std::nullopt) const;

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

// GradientTransformation: optax's (init, update) pair over trees. init(params)
// returns the transformation's state (a Tree, so it can be passed through jit
// and saved in checkpoints); update(updates, state, params) maps gradients to
// updates and returns the new state. Transformations compose with chain(),
// and the whole update runs inside a jitted training step: everything is
// written with pax ops, counters are i32 scalars in the state, and nothing
// depends on the values of traced arrays.
//
//   GradientTransformation tx = chain({clip_by_global_norm(1.0), scale_by_adam(),
//                                      add_decayed_weights(1e-4), scale_by_learning_rate(schedule)});
//   Tree opt_state = tx.init(params);
//   auto [updates, new_state] = tx.update(grads, opt_state, params);
//   params = apply_updates(params, updates);
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "pax/core/tree.h"

namespace pax::optim {

// The value of a hyperparameter as a function of the step count (an integer
// scalar Array, possibly traced), as an f32 scalar Array.
using Schedule = std::function<Array(const Array& count)>;

// A hyperparameter given as a constant or as a schedule (optax's
// ScalarOrSchedule). Constants convert implicitly: scale_by_learning_rate(1e-3).
class ScalarOrSchedule {
 public:
  ScalarOrSchedule(double value);       // NOLINT(google-explicit-constructor)
  ScalarOrSchedule(Schedule schedule);  // NOLINT(google-explicit-constructor)
  // Any callable Array(const Array&) is a schedule: adam([](const Array& c) { ... }).
  template <class F>
  requires(std::is_invocable_r_v<Array, F&, const Array&> && !std::is_same_v<std::decay_t<F>, Schedule> &&
           !std::is_same_v<std::decay_t<F>, ScalarOrSchedule>)
      ScalarOrSchedule(F&& f)  // NOLINT(google-explicit-constructor)
      : ScalarOrSchedule(Schedule(std::forward<F>(f))) {}
  // The value at step `count` (f32 scalar).
  Array operator()(const Array& count) const;
  bool is_schedule() const { return static_cast<bool>(schedule_); }
  // The constant (throws pax::Error for a schedule).
  double constant() const;
  // The constant's storage, which a config edits (throws for a schedule).
  double& constant_storage();

 private:
  double value_ = 0;
  Schedule schedule_;
};

struct GradientTransformation {
  // params -> state
  std::function<Tree(const Tree& params)> init;
  // (updates, state, params) -> (new updates, new state). params may be None
  // for transformations that do not read them.
  std::function<std::pair<Tree, Tree>(const Tree& updates, const Tree& state, const Tree& params)> update;
};

// params + updates, leaf by leaf (updates are cast to each parameter's dtype).
Tree apply_updates(const Tree& params, const Tree& updates);

// The transformations applied in order; the state is the list of their states.
GradientTransformation chain(std::vector<GradientTransformation> transforms);

}  // namespace pax::optim

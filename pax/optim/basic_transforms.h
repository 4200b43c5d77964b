// The basic gradient transformations of optax: identity, scaling (by a
// constant, the learning rate or a schedule), momentum (trace), clipping (per
// value and by global norm) and decoupled weight decay. Each returns a
// GradientTransformation to be combined with chain():
//
//   auto tx = chain({clip_by_global_norm(1.0), trace(0.9), scale_by_learning_rate(0.1)});
#pragma once

#include <functional>
#include <string>

#include "pax/optim/gradient_transformation.h"

namespace pax::optim {

// Selects leaves by their path ("params/lm/w", as tree_paths gives) and value
// (the parameter, or the update when no parameters are passed). Used by
// masked(), add_decayed_weights() and the aliases' weight-decay masks.
using Mask = std::function<bool(const std::string& path, const Array& param)>;

// Passes the updates through; no state.
GradientTransformation identity();

// updates * step_size; no state.
GradientTransformation scale(double step_size);

// updates * -learning_rate (or * learning_rate when flip_sign is false). A
// constant gives scale(); a schedule gives scale_by_schedule(), whose state
// counts the steps.
GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate, bool flip_sign = true);

// updates * step_size_fn(count), count = 0, 1, 2, ... State {"count"}.
GradientTransformation scale_by_schedule(Schedule step_size_fn);

// Momentum: trace = updates + decay * trace; the output is the trace, or with
// nesterov updates + decay * trace (the new one). decay in [0, 1].
// State {"trace"} (moment dtype, see tree_utils.h).
GradientTransformation trace(double decay, bool nesterov = false);

// Clips each value to [-max_delta, max_delta] (max_delta >= 0); no state.
GradientTransformation clip(double max_delta);

// Scales all updates by max_norm / global_norm when the global norm (over the
// whole tree) exceeds max_norm > 0; no state.
GradientTransformation clip_by_global_norm(double max_norm);

// updates + weight_decay * params (decoupled weight decay), on the leaves
// `mask` selects (all when empty). Needs the params. With a schedule the
// state is {"count"}, otherwise None.
GradientTransformation add_decayed_weights(ScalarOrSchedule weight_decay = 0.0, Mask mask = nullptr);

}  // namespace pax::optim

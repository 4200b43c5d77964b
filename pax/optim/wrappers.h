// Transformations that wrap others: masking and partitioning the parameters
// (masked, multi_transform), skipping non-finite updates (apply_if_finite),
// gradient accumulation (multi_steps), moving averages of the updates (ema)
// and of the parameters (with_param_ema), and hyperparameters that follow
// schedules and are kept in the state for logging (inject_hyperparams).
// Every decision on array values is a where/select, so they run under jit.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "pax/optim/gradient_transformation.h"
#include "pax/optim/basic_transforms.h"

namespace pax::optim {

// The label of a leaf, from its path and the parameter (see Mask).
using Labeler = std::function<std::string(const std::string& path, const Array& param)>;

// Applies `inner` to the leaves `mask` selects; the other leaves pass through
// unchanged. The inner transformation sees the updates and params with the
// unselected leaves replaced by None (tree_map skips None), so its state only
// holds the selected leaves. The mask reads the params (the updates when no
// params are passed). State {"inner_state"}.
GradientTransformation masked(GradientTransformation inner, Mask mask);

// Applies transforms[label] to the leaves `labeler` labels so, each as a
// masked() transformation. A label without a transformation is a pax::Error
// listing the valid ones. State {label: inner state}.
GradientTransformation multi_transform(std::map<std::string, GradientTransformation> transforms, Labeler labeler);

// optax's apply_if_finite: when any update is NaN or infinite the updates
// become zeros and the inner state is kept; after more than
// max_consecutive_errors consecutive such steps the update is applied anyway.
// State {"notfinite_count" (consecutive), "last_finite", "total_notfinite", "inner_state"}.
GradientTransformation apply_if_finite(GradientTransformation inner, int max_consecutive_errors);

// optax's MultiSteps: accumulates the mean (or with use_grad_mean false the
// sum) of every_k >= 1 successive updates, returns zeros k - 1 times, and on
// the k-th step returns inner's update of the accumulated gradient (the
// inner state only advances then). The accumulator is in the moment dtype.
// State {"mini_step", "gradient_step", "inner_state", "acc_grads"}.
GradientTransformation multi_steps(GradientTransformation inner, int every_k, bool use_grad_mean = true);
// True (a boolean scalar) when the last update of a multi_steps state applied
// the inner transformation.
Array multi_steps_has_updated(const Tree& state);

// Exponential moving average of the updates: ema = decay * ema + (1 - decay)
// * updates, returned divided by 1 - decay^t when debias. decay in [0, 1].
// State {"count", "ema"}.
GradientTransformation ema(double decay, bool debias = true);

// Keeps an exponential moving average of the parameters in the optimizer
// state (as Praxis does), after inner's update: ema = decay * ema + (1 - decay)
// * (params + updates), starting from the initial parameters. The updates are
// inner's. Needs the params. decay in [0, 1]. State {"inner_state", "ema"}.
GradientTransformation with_param_ema(GradientTransformation inner, double decay);
// The parameter EMA held in an optimizer state (searched for, so the state of
// a chain or wrapper holding a with_param_ema state works too).
Tree param_ema(const Tree& opt_state);

// optax's inject_hyperparams. `factory` builds the transformation from
// hyperparameter values; each update evaluates the schedules among
// `hyperparams` at the step count and builds the inner transformation with
// them (passed as ScalarOrSchedule values holding the evaluated scalars),
// while constants are passed as they are, so the factory may use them for
// structural choices and checks. All values are recorded in the state as f32
// scalars so a training loop can log them (see hyperparam()). Unlike optax,
// editing a recorded constant in the state does not change the optimizer.
// State {"count", "hyperparams": {name: f32 scalar}, "inner_state"}.
using HyperparamFactory =
    std::function<GradientTransformation(const std::map<std::string, ScalarOrSchedule>& hyperparams)>;
GradientTransformation inject_hyperparams(HyperparamFactory factory,
                                          std::map<std::string, ScalarOrSchedule> hyperparams);
// The value (f32 scalar) of hyperparameter `name` recorded by the last update
// (or init) in an optimizer state holding an inject_hyperparams state.
Array hyperparam(const Tree& opt_state, const std::string& name);

}  // namespace pax::optim

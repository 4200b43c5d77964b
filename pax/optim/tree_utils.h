// Building blocks shared by the gradient transformations: the dtype of
// optimizer moments, tree-wide norms and selects, step counters, scalar
// hyperparameters evaluated inside update(), and the checks that turn a
// mismatched state or a bad hyperparameter into a pax::Error naming the
// transformation. Everything here is written with pax ops so it traces.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/optim/gradient_transformation.h"

namespace pax::optim {

// A transformation without state: update maps (updates, params) to the new updates.
GradientTransformation stateless(std::function<Tree(const Tree& updates, const Tree& params)> f);
// Throws "op: what has no init or update" unless t has both.
void check_transformation(const GradientTransformation& t, const std::string& op, const std::string& what);

// The dtype of a moment (mu, nu, trace, accumulators) kept for a parameter of
// `param_dtype`: the parameter's own dtype, except that 16-bit floats keep
// their moments in f32 (optax's mu_dtype=float32 choice for mixed precision).
DType moment_dtype(DType param_dtype);
// Zeros / a constant shaped like each leaf, in its moment dtype (None stays None).
Tree zeros_like_moments(const Tree& params);
Tree full_like_moments(const Tree& params, double value);
// zeros_like of each leaf, same dtype.
Tree tree_zeros_like(const Tree& tree);

// sqrt(sum of squares of every leaf), computed in f32 or wider (f64 when a
// leaf is f64). A tree without leaves has norm 0 (f32).
Array global_norm(const Tree& tree);
// Leaf by leaf where(pred, on_true, on_false), in on_false's dtype; pred is a
// boolean scalar. The trees must have the same structure.
Tree tree_select(const Array& pred, const Tree& on_true, const Tree& on_false, const std::string& what);

// Step counters: i32 scalars.
Array zero_count();
// count + 1, saturating at the largest i32 (optax's safe_increment).
Array safe_increment(const Array& count);
// 1 - decay^count, in `dtype` (the denominator of Adam-style bias correction).
Array bias_correction(const Array& decay, const Array& count, DType dtype);

// A scalar hyperparameter as a 0-d array of `dtype`: the constant converted
// exactly, or the schedule evaluated at `count`.
Array hyper(const ScalarOrSchedule& h, const Array& count, DType dtype);

// Throws pax::Error "<op>: <name> must be <valid>, got <value>" unless `ok`.
// Schedules are not checked (their values are only known inside update()).
void check_hyper(bool ok, const std::string& op, const char* name, double value, const char* valid);
void check_hyper(const ScalarOrSchedule& h, bool (*ok)(double), const std::string& op, const char* name,
                 const char* valid);

// Throws pax::Error naming `op` unless `updates` and `other` (described by
// `what`, e.g. "state 'mu'" or "params") have the same tree structure.
void check_structure(const std::string& op, const Tree& updates, const Tree& other, const std::string& what);
// The params, which `op` needs: throws pax::Error when they are None, and
// when their structure differs from the updates'.
const Tree& require_params(const std::string& op, const Tree& updates, const Tree& params);
// state[key] of a dict state; throws pax::Error naming `op` and the key when
// the state is not such a dict (e.g. the state of another transformation).
const Tree& state_entry(const std::string& op, const Tree& state, const std::string& key);

// The first dict (pre-order) holding all of `keys`, or nullptr.
const Tree* find_dict_with_keys(const Tree& tree, std::initializer_list<const char*> keys);

}  // namespace pax::optim

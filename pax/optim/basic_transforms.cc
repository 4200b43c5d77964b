// The basic gradient transformations (see basic_transforms.h).
#include "pax/optim/basic_transforms.h"

#include <cmath>
#include <memory>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"
#include "pax/optim/wrappers.h"

namespace pax::optim {

namespace {

bool is_finite(double v) { return std::isfinite(v); }

}  // namespace

GradientTransformation identity() {
  return stateless([](const Tree& updates, const Tree&) { return updates; });
}

GradientTransformation scale(double step_size) {
  check_hyper(std::isfinite(step_size), "scale", "step_size", step_size, "finite");
  return stateless([step_size](const Tree& updates, const Tree&) {
    return tree_map([step_size](const Array& g) { return g * step_size; }, updates);
  });
}

GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate, bool flip_sign) {
  check_hyper(learning_rate, is_finite, "scale_by_learning_rate", "learning_rate", "finite");
  const double m = flip_sign ? -1.0 : 1.0;
  if (!learning_rate.is_schedule()) return scale(m * learning_rate.constant());
  return scale_by_schedule([learning_rate, m](const Array& count) { return learning_rate(count) * m; });
}

GradientTransformation scale_by_schedule(Schedule step_size_fn) {
  PAX_CHECK(static_cast<bool>(step_size_fn), "scale_by_schedule: the schedule is an empty function");
  GradientTransformation t;
  t.init = [](const Tree&) { return Tree::dict({{"count", zero_count()}}); };
  t.update = [fn = std::move(step_size_fn)](const Tree& updates, const Tree& state, const Tree&) {
    const Array& count = state_entry("scale_by_schedule", state, "count").leaf();
    Array step = fn(count);
    PAX_CHECK(step.ndim() == 0, "scale_by_schedule: the schedule must return a scalar, got ", step.aval().str());
    Tree out = tree_map([&step](const Array& g) { return g * step.astype(g.dtype()); }, updates);
    return std::make_pair(out, Tree::dict({{"count", safe_increment(count)}}));
  };
  return t;
}

GradientTransformation trace(double decay, bool nesterov) {
  check_hyper(decay >= 0 && decay <= 1, "trace", "decay", decay, "in [0, 1]");
  GradientTransformation t;
  t.init = [](const Tree& params) { return Tree::dict({{"trace", zeros_like_moments(params)}}); };
  t.update = [decay, nesterov](const Tree& updates, const Tree& state, const Tree&) {
    const Tree& old = state_entry("trace", state, "trace");
    check_structure("trace", updates, old, "state 'trace'");
    auto accumulate = [decay](const Array& g, const Array& tr) { return g.astype(tr.dtype()) + tr * decay; };
    Tree new_trace = tree_map(accumulate, updates, old);
    Tree out = nesterov ? tree_map(accumulate, updates, new_trace) : new_trace;
    return std::make_pair(out, Tree::dict({{"trace", new_trace}}));
  };
  return t;
}

GradientTransformation clip(double max_delta) {
  check_hyper(max_delta >= 0, "clip", "max_delta", max_delta, ">= 0");
  return stateless([max_delta](const Tree& updates, const Tree&) {
    return tree_map([max_delta](const Array& g) { return pax::clip(g, -max_delta, max_delta); }, updates);
  });
}

GradientTransformation clip_by_global_norm(double max_norm) {
  check_hyper(max_norm > 0, "clip_by_global_norm", "max_norm", max_norm, "> 0");
  return stateless([max_norm](const Tree& updates, const Tree&) {
    Array g_norm = global_norm(updates);
    Array keep = g_norm < max_norm;
    return tree_map(
        [&](const Array& g) {
          Array clipped = (g / g_norm.astype(g.dtype())) * max_norm;
          return where(keep, g, clipped).astype(g.dtype());
        },
        updates);
  });
}

GradientTransformation add_decayed_weights(ScalarOrSchedule weight_decay, Mask mask) {
  check_hyper(weight_decay, is_finite, "add_decayed_weights", "weight_decay", "finite");
  const bool scheduled = weight_decay.is_schedule();
  // A constant rate of 0 (optimizers built without weight decay) adds nothing:
  // no p * 0 over every parameter in every step.
  const bool zero = !scheduled && weight_decay.constant() == 0;
  GradientTransformation t;
  t.init = [scheduled](const Tree&) { return scheduled ? Tree::dict({{"count", zero_count()}}) : Tree(); };
  t.update = [weight_decay, scheduled, zero](const Tree& updates, const Tree& state, const Tree& params) {
    const char* op = "add_decayed_weights";
    require_params(op, updates, params);
    Array count = scheduled ? state_entry(op, state, "count").leaf() : zero_count();
    Tree out = tree_map(
        [&](const Array& g, const Array& p) {
          DType dt = promote_types(g.dtype(), p.dtype());
          return zero ? g.astype(dt) : g.astype(dt) + p.astype(dt) * hyper(weight_decay, count, dt);
        },
        updates, params);
    return std::make_pair(out, scheduled ? Tree::dict({{"count", safe_increment(count)}}) : state);
  };
  return mask ? masked(std::move(t), std::move(mask)) : t;
}

}  // namespace pax::optim

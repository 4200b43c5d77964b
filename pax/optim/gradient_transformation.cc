// GradientTransformation basics: hyperparameter values, apply_updates, chain.
#include "pax/optim/gradient_transformation.h"

#include <memory>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::optim {

ScalarOrSchedule::ScalarOrSchedule(double value) : value_(value) {}

ScalarOrSchedule::ScalarOrSchedule(Schedule schedule) : schedule_(std::move(schedule)) {
  PAX_CHECK(static_cast<bool>(schedule_), "ScalarOrSchedule: the schedule is an empty function");
}

Array ScalarOrSchedule::operator()(const Array& count) const {
  if (!schedule_) return scalar(value_, DType::f32);
  return schedule_(count).astype(DType::f32);
}

double ScalarOrSchedule::constant() const {
  PAX_CHECK(!schedule_, "ScalarOrSchedule: the value is a schedule, not a constant");
  return value_;
}

double& ScalarOrSchedule::constant_storage() {
  PAX_CHECK(!schedule_, "ScalarOrSchedule: the value is a schedule, which a config cannot hold");
  return value_;
}

Tree apply_updates(const Tree& params, const Tree& updates) {
  check_same_structure(params, updates, "apply_updates(params, updates)");
  return tree_map([](const Array& p, const Array& u) { return (p + u.astype(p.dtype())).astype(p.dtype()); }, params,
                  updates);
}

GradientTransformation chain(std::vector<GradientTransformation> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i)
    PAX_CHECK(transforms[i].init && transforms[i].update, "chain: transformation ", i, " has no init or update");
  auto shared = std::make_shared<const std::vector<GradientTransformation>>(std::move(transforms));
  GradientTransformation out;
  out.init = [shared](const Tree& params) {
    Tree::List states;
    for (const GradientTransformation& t : *shared) states.push_back(t.init(params));
    return Tree::list(std::move(states));
  };
  out.update = [shared](const Tree& updates, const Tree& state, const Tree& params) {
    PAX_CHECK(state.is_list() && state.size() == shared->size(), "chain: the state must be a list of ", shared->size(),
              " states (one per transformation), got ", state.str());
    Tree u = updates;
    Tree::List states;
    for (size_t i = 0; i < shared->size(); ++i) {
      auto [next, s] = (*shared)[i].update(u, state[i], params);
      u = std::move(next);
      states.push_back(std::move(s));
    }
    return std::make_pair(u, Tree::list(std::move(states)));
  };
  return out;
}

}  // namespace pax::optim

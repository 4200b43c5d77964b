// Shared building blocks of the gradient transformations (see tree_utils.h).
#include "pax/optim/tree_utils.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::optim {

DType moment_dtype(DType param_dtype) {
  return (param_dtype == DType::bf16 || param_dtype == DType::f16) ? DType::f32 : param_dtype;
}

Tree zeros_like_moments(const Tree& params) { return full_like_moments(params, 0.0); }

Tree full_like_moments(const Tree& params, double value) {
  return tree_map([value](const Array& p) { return full(p.shape(), value, moment_dtype(p.dtype())); }, params);
}

Tree tree_zeros_like(const Tree& tree) {
  return tree_map([](const Array& x) { return zeros_like(x); }, tree);
}

Array global_norm(const Tree& tree) {
  Array total;
  for (const Array& x : tree_leaves(tree)) {
    DType dt = promote_types(moment_dtype(x.dtype()), DType::f32);
    Array s = sum(square(x.astype(dt)));
    total = total.defined() ? total + s : s;
  }
  if (!total.defined()) return scalar(0.0, DType::f32);
  return sqrt(total);
}

Tree tree_select(const Array& pred, const Tree& on_true, const Tree& on_false, const std::string& what) {
  check_same_structure(on_true, on_false, what);
  return tree_map([&pred](const Array& t, const Array& f) { return where(pred, t, f).astype(f.dtype()); }, on_true,
                  on_false);
}

Array zero_count() { return scalar(0.0, DType::i32); }

Array safe_increment(const Array& count) {
  return where(count < std::numeric_limits<int32_t>::max(), count + 1, count).astype(count.dtype());
}

Array bias_correction(const Array& decay, const Array& count, DType dtype) {
  return 1.0 - power(decay.astype(dtype), count.astype(dtype));
}

Array hyper(const ScalarOrSchedule& h, const Array& count, DType dtype) {
  return h.is_schedule() ? h(count).astype(dtype) : scalar(h.constant(), dtype);
}

GradientTransformation stateless(std::function<Tree(const Tree& updates, const Tree& params)> f) {
  GradientTransformation t;
  t.init = [](const Tree&) { return Tree(); };
  t.update = [f = std::move(f)](const Tree& updates, const Tree& state, const Tree& params) {
    return std::make_pair(f(updates, params), state);
  };
  return t;
}

void check_transformation(const GradientTransformation& t, const std::string& op, const std::string& what) {
  PAX_CHECK(t.init && t.update, op, ": ", what, " has no init or update");
}

void check_hyper(bool ok, const std::string& op, const char* name, double value, const char* valid) {
  PAX_CHECK(ok, op, ": ", name, " must be ", valid, ", got ", value);
}

void check_hyper(const ScalarOrSchedule& h, bool (*ok)(double), const std::string& op, const char* name,
                 const char* valid) {
  if (!h.is_schedule()) check_hyper(ok(h.constant()), op, name, h.constant(), valid);
}

void check_structure(const std::string& op, const Tree& updates, const Tree& other, const std::string& what) {
  std::string d = tree_structure_diff(updates, other);
  PAX_CHECK(d.empty(), op, ": the updates and the ", what, " have different tree structures (", d, "); updates ",
            updates.str(), ", ", what, " ", other.str(),
            ". Was the state made by this transformation's init() for these parameters?");
}

const Tree& require_params(const std::string& op, const Tree& updates, const Tree& params) {
  PAX_CHECK(!params.is_none() || updates.is_none(), op,
            ": needs the parameters; pass them as the third argument of update()");
  check_structure(op, updates, params, "params");
  return params;
}

const Tree& state_entry(const std::string& op, const Tree& state, const std::string& key) {
  PAX_CHECK(state.is_dict() && state.contains(key), op, ": the state must be a dict with an entry '", key, "', got ",
            state.str(), ". Was it made by this transformation's init()?");
  return state[key];
}

const Tree* find_dict_with_keys(const Tree& tree, std::initializer_list<const char*> keys) {
  if (tree.is_dict()) {
    bool all = true;
    for (const char* k : keys) all = all && tree.contains(k);
    if (all) return &tree;
    for (const auto& [k, child] : tree.entries()) {
      if (const Tree* found = find_dict_with_keys(child, keys)) return found;
    }
  } else if (tree.is_list()) {
    for (const Tree& child : tree.items()) {
      if (const Tree* found = find_dict_with_keys(child, keys)) return found;
    }
  }
  return nullptr;
}

}  // namespace pax::optim

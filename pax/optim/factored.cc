// Adafactor's pieces: the factored second-moment estimate, clipping by block
// RMS and scaling by the parameters' block RMS (declared in adaptive.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/optim/adaptive.h"
#include "pax/optim/tree_utils.h"

namespace pax::optim {

namespace {

constexpr const char* kFactoredOp = "scale_by_factored_rms";

// The two axes to factor over, (d1, d0) with d0 the largest dimension and d1
// the second largest (ties keep axis order, like numpy's argsort on small
// shapes), or nullopt when the leaf keeps a full second moment.
std::optional<std::pair<int64_t, int64_t>> factored_dims(const Shape& shape, const FactoredRmsOptions& o) {
  if (!o.factored || shape.rank() < 2) return std::nullopt;
  std::vector<int64_t> order(size_t(shape.rank()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return shape[a] < shape[b]; });
  int64_t d1 = order[order.size() - 2], d0 = order.back();
  if (shape[d1] < o.min_dim_size_to_factor) return std::nullopt;
  return std::make_pair(d1, d0);
}

Shape without_axis(const Shape& shape, int64_t axis) {
  std::vector<int64_t> dims = shape.dims();
  dims.erase(dims.begin() + axis);
  return Shape(std::move(dims));
}

// The state shapes of one leaf: v_row, v_col, v ([1] where unused).
struct FactoredShapes {
  Shape v_row{1}, v_col{1}, v{1};
};

FactoredShapes factored_shapes(const Shape& shape, const FactoredRmsOptions& o) {
  FactoredShapes s;
  if (auto dims = factored_dims(shape, o)) {
    s.v_row = without_axis(shape, dims->second);
    s.v_col = without_axis(shape, dims->first);
  } else {
    s.v = shape;
  }
  return s;
}

void check_state_shape(const std::string& path, const char* key, const Array& have, const Shape& want) {
  PAX_CHECK(have.shape() == want, kFactoredOp, ": state '", key, "' for '", path, "' has shape ", have.shape(),
            " but the update's shape needs ", want, ". Was the state made for other parameters?");
}

}  // namespace

GradientTransformation scale_by_factored_rms(const FactoredRmsOptions& options) {
  const FactoredRmsOptions o = options;
  check_hyper(std::isfinite(o.decay_rate) && o.decay_rate >= 0, kFactoredOp, "decay_rate", o.decay_rate,
              "finite and >= 0");
  check_hyper(o.epsilon >= 0, kFactoredOp, "epsilon", o.epsilon, ">= 0");
  check_hyper(o.min_dim_size_to_factor >= 0, kFactoredOp, "min_dim_size_to_factor", double(o.min_dim_size_to_factor),
              ">= 0");
  GradientTransformation t;
  t.init = [o](const Tree& params) {
    auto make = [&](Shape FactoredShapes::*field) {
      return tree_map(
          [&](const Array& p) { return zeros(factored_shapes(p.shape(), o).*field, moment_dtype(p.dtype())); }, params);
    };
    return Tree::dict({{"count", zero_count()},
                       {"v_row", make(&FactoredShapes::v_row)},
                       {"v_col", make(&FactoredShapes::v_col)},
                       {"v", make(&FactoredShapes::v)}});
  };
  t.update = [o](const Tree& updates, const Tree& state, const Tree&) {
    const Array& count = state_entry(kFactoredOp, state, "count").leaf();
    std::vector<Tree> trees = {updates};
    for (const char* key : {"v_row", "v_col", "v"}) {
      trees.push_back(state_entry(kFactoredOp, state, key));
      check_structure(kFactoredOp, updates, trees.back(), std::string("state '") + key + "'");
    }
    auto [grads, def] = tree_flatten(updates);
    std::vector<std::string> paths = tree_paths(updates);
    std::vector<Array> v_rows = tree_leaves(trees[1]), v_cols = tree_leaves(trees[2]), vs = tree_leaves(trees[3]);
    std::vector<Array> out(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const Shape& shape = grads[i].shape();
      FactoredShapes want = factored_shapes(shape, o);
      check_state_shape(paths[i], "v_row", v_rows[i], want.v_row);
      check_state_shape(paths[i], "v_col", v_cols[i], want.v_col);
      check_state_shape(paths[i], "v", vs[i], want.v);
      DType dt = vs[i].dtype();
      Array g = grads[i].astype(dt);
      // decay_t = 1 - (t + 1)^-decay_rate: 0 at the first step, so the
      // statistics start from the first gradient.
      Array step = (count - o.step_offset).astype(dt) + 1.0;
      Array decay_t = 1.0 - power(step, -o.decay_rate);
      Array grad_sqr = square(g) + o.epsilon;
      if (auto dims = factored_dims(shape, o)) {
        auto [d1, d0] = *dims;
        v_rows[i] = decay_t * v_rows[i] + (1.0 - decay_t) * mean(grad_sqr, d0);
        v_cols[i] = decay_t * v_cols[i] + (1.0 - decay_t) * mean(grad_sqr, d1);
        int64_t reduced_d1 = d1 > d0 ? d1 - 1 : d1;
        Array row_col_mean = mean(v_rows[i], reduced_d1, true);
        Array row_factor = rsqrt(v_rows[i] / row_col_mean);
        Array col_factor = rsqrt(v_cols[i]);
        out[i] = g * expand_dims(row_factor, {d0}) * expand_dims(col_factor, {d1});
      } else {
        vs[i] = decay_t * vs[i] + (1.0 - decay_t) * grad_sqr;
        out[i] = g * rsqrt(vs[i]);
      }
    }
    Tree new_state = Tree::dict({{"count", safe_increment(count)},
                                 {"v_row", tree_unflatten(tree_structure(trees[1]), v_rows)},
                                 {"v_col", tree_unflatten(tree_structure(trees[2]), v_cols)},
                                 {"v", tree_unflatten(tree_structure(trees[3]), vs)}});
    return std::make_pair(tree_unflatten(def, out), new_state);
  };
  return t;
}

GradientTransformation clip_by_block_rms(double threshold) {
  check_hyper(threshold > 0, "clip_by_block_rms", "threshold", threshold, "> 0");
  return stateless([threshold](const Tree& updates, const Tree&) {
    return tree_map(
        [threshold](const Array& u) {
          Array uu = u.astype(moment_dtype(u.dtype()));
          Array denom = maximum(1.0, sqrt(mean(square(uu))) / threshold);
          return uu / denom;
        },
        updates);
  });
}

GradientTransformation scale_by_param_block_rms(double min_scale) {
  const char* op = "scale_by_param_block_rms";
  check_hyper(min_scale >= 0, op, "min_scale", min_scale, ">= 0");
  return stateless([op, min_scale](const Tree& updates, const Tree& params) {
    require_params(op, updates, params);
    return tree_map(
        [min_scale](const Array& u, const Array& p) {
          DType dt = promote_types(moment_dtype(u.dtype()), moment_dtype(p.dtype()));
          Array rms = sqrt(mean(square(p.astype(dt))));
          return u.astype(dt) * where(rms <= min_scale, min_scale, rms).astype(dt);
        },
        updates, params);
  });
}

}  // namespace pax::optim

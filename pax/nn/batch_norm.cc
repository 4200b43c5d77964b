// BatchNorm and GroupNorm.
#include "pax/nn/batch_norm.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

namespace {

// Statistics in at least f32.
Array stats_dtype(const Array& x) { return x.dtype() == DType::f64 ? x : x.astype(DType::f32); }

}  // namespace

void BatchNorm::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dim > 0, "BatchNorm '", path(), "': dim must be > 0, got ", hp.dim);
  PAX_CHECK(hp.decay >= 0 && hp.decay <= 1, "BatchNorm '", path(), "': decay must be in [0, 1], got ", hp.decay);
  PAX_CHECK(hp.epsilon >= 0, "BatchNorm '", path(), "': epsilon must be >= 0, got ", hp.epsilon);
  if (hp.use_scale) create_variable("gamma", WeightHParams{Shape{hp.dim}, WeightInit::constant(1.0)});
  if (hp.use_bias) create_variable("beta", WeightHParams{Shape{hp.dim}, WeightInit::constant(0.0)});
  create_variable("moving_mean", WeightHParams{Shape{hp.dim}, WeightInit::constant(0.0), std::nullopt, "batch_stats"});
  create_variable("moving_variance",
                  WeightHParams{Shape{hp.dim}, WeightInit::constant(1.0), std::nullopt, "batch_stats"});
}

Array BatchNorm::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(x.ndim() >= 1 && x.dim(-1) == hp.dim, "BatchNorm '", path(), "': input ", x.aval().str(),
            " must end in dim = ", hp.dim);
  PAX_CHECK(is_floating(x.dtype()), "BatchNorm '", path(), "': input ", x.aval().str(), " must be floating");
  Array xf = stats_dtype(x);                                           // (..., D)
  Array moving_mean = variable("batch_stats", "moving_mean");          // (D,)
  Array moving_variance = variable("batch_stats", "moving_variance");  // (D,)
  Array m, v;
  if (is_training() && !hp.use_running_average) {
    Ints axes;
    for (int64_t a = 0; a + 1 < xf.ndim(); ++a) axes.push_back(a);
    // Two passes (mean, then the mean square deviation) rather than
    // E[x^2] - E[x]^2, which cancels badly when |mean| >> std.
    m = axes.empty() ? xf : mean(xf, axes);  // (D,)
    if (!hp.axis_name.empty()) m = lax::pmean(m, hp.axis_name);
    Array centered = xf - m;
    v = axes.empty() ? centered * centered : mean(centered * centered, axes);
    if (!hp.axis_name.empty()) v = lax::pmean(v, hp.axis_name);
    if (!is_initializing()) {
      auto blend = [&](const Array& old, const Array& batch) {
        return (stats_dtype(old) * hp.decay + batch * (1.0 - hp.decay)).astype(old.dtype());
      };
      moving_mean = blend(moving_mean, m);
      moving_variance = blend(moving_variance, v);
      update_variable("batch_stats", "moving_mean", moving_mean);
      update_variable("batch_stats", "moving_variance", moving_variance);
    }
    if (hp.use_moving_avg_in_training) {
      m = stats_dtype(moving_mean);
      v = stats_dtype(moving_variance);
    }
  } else {
    m = stats_dtype(moving_mean);
    v = stats_dtype(moving_variance);
  }
  Array y = to_fprop_dtype((xf - m) * rsqrt(v + hp.epsilon));
  if (hp.use_scale) y = y * theta("gamma");
  if (hp.use_bias) y = y + theta("beta");
  return y;
}

void GroupNorm::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.dim > 0, "GroupNorm '", path(), "': dim must be > 0, got ", hp.dim);
  PAX_CHECK(hp.num_groups > 0 && hp.dim % hp.num_groups == 0, "GroupNorm '", path(), "': num_groups = ", hp.num_groups,
            " must be positive and divide dim = ", hp.dim);
  PAX_CHECK(hp.epsilon >= 0, "GroupNorm '", path(), "': epsilon must be >= 0, got ", hp.epsilon);
  if (hp.use_scale) create_variable("gamma", WeightHParams{Shape{hp.dim}, WeightInit::constant(1.0)});
  if (hp.use_bias) create_variable("beta", WeightHParams{Shape{hp.dim}, WeightInit::constant(0.0)});
}

Array GroupNorm::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(x.ndim() >= 2 && x.dim(-1) == hp.dim, "GroupNorm '", path(), "': input ", x.aval().str(),
            " must be (batch, ..., dim = ", hp.dim, ") with rank >= 2");
  PAX_CHECK(is_floating(x.dtype()), "GroupNorm '", path(), "': input ", x.aval().str(), " must be floating");
  const int64_t r = x.ndim();
  Ints grouped = x.shape().dims();
  grouped.back() = hp.num_groups;
  grouped.push_back(hp.dim / hp.num_groups);
  Array xg = reshape(stats_dtype(x), grouped);  // (B, ..., G, D / G)
  Ints axes;                                    // every axis but the batch and the group axis
  for (int64_t a = 1; a < r - 1; ++a) axes.push_back(a);
  axes.push_back(r);
  Array m = mean(xg, axes, true);  // (B, 1..., G, 1)
  Array centered = xg - m;
  Array v = mean(centered * centered, axes, true);
  Array y = to_fprop_dtype(reshape(centered * rsqrt(v + hp.epsilon), x.shape().dims()));
  if (hp.use_scale) y = y * theta("gamma");
  if (hp.use_bias) y = y + theta("beta");
  return y;
}

PAX_REGISTER_LAYER(BatchNorm);
PAX_REGISTER_LAYER(GroupNorm);

}  // namespace pax::nn

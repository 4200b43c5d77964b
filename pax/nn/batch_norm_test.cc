// BatchNorm (training / evaluation formulas, moving statistics after one and
// two steps, immutability, vmap with a named axis, gradients, jit) and
// GroupNorm against direct formulas.
#include "pax/nn/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

const ApplyOptions kTrain{.mutable_collections = {"batch_stats"}, .train = true};

// Per-channel mean and biased variance of x viewed as (rows, d).
struct Moments {
  std::vector<double> mean, var;
};
Moments moments(const std::vector<double>& x, int64_t d) {
  const size_t rows = x.size() / size_t(d);
  Moments m{std::vector<double>(size_t(d)), std::vector<double>(size_t(d))};
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < size_t(d); ++c) m.mean[c] += x[r * size_t(d) + c] / double(rows);
  }
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < size_t(d); ++c) {
      const double e = x[r * size_t(d) + c] - m.mean[c];
      m.var[c] += e * e / double(rows);
    }
  }
  return m;
}

// (x - mean) / sqrt(var + eps) * gamma + beta per channel.
std::vector<double> normalized(const std::vector<double>& x, const Moments& m, const std::vector<double>& gamma,
                               const std::vector<double>& beta, double eps) {
  const size_t d = m.mean.size();
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = i % d;
    y[i] = (x[i] - m.mean[c]) / std::sqrt(m.var[c] + eps) * gamma[c] + beta[c];
  }
  return y;
}

std::vector<double> blend(const std::vector<double>& old, const std::vector<double>& batch, double decay) {
  std::vector<double> out(old.size());
  for (size_t i = 0; i < old.size(); ++i) out[i] = decay * old[i] + (1 - decay) * batch[i];
  return out;
}

struct BatchNormFixture {
  std::unique_ptr<BatchNorm> layer;
  Tree vars;
  std::vector<double> gamma, beta;
};

BatchNormFixture make_batch_norm(BatchNorm::HParams hp) {
  hp.dtype = hp.fprop_dtype = DType::f64;
  BatchNormFixture f{build<BatchNorm>(hp), Tree(), {}, {}};
  f.vars = init(*f.layer, random::key(0));
  f.vars["params"]["gamma"] = testing::random_array({hp.dim}, DType::f64, 11, 0.5, 2);
  f.vars["params"]["beta"] = testing::random_array({hp.dim}, DType::f64, 12);
  f.gamma = f.vars["params"]["gamma"].leaf().to_vector<double>();
  f.beta = f.vars["params"]["beta"].leaf().to_vector<double>();
  return f;
}

TEST(BatchNorm, InitDeclaresParamsAndStatistics) {
  BatchNorm::HParams hp;
  hp.dim = 3;
  auto bn = build<BatchNorm>(hp);
  Tree vars = init(*bn, random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/gamma", "params/beta", "batch_stats/moving_mean",
                                                        "batch_stats/moving_variance"}));
  EXPECT_TRUE(all_close(vars.at_path("params/gamma").leaf(), {1, 1, 1}, 0, 0));
  EXPECT_TRUE(all_close(vars.at_path("params/beta").leaf(), {0, 0, 0}, 0, 0));
  EXPECT_TRUE(all_close(vars.at_path("batch_stats/moving_mean").leaf(), {0, 0, 0}, 0, 0));
  EXPECT_TRUE(all_close(vars.at_path("batch_stats/moving_variance").leaf(), {1, 1, 1}, 0, 0));
  // Running the forward pass in training during init keeps the initial statistics (as Flax).
  Array x = testing::random_array({4, 3}, DType::f32, 1, 2, 5);
  Tree run = init_with(*bn, random::key(0), [&](const BatchNorm& l) { return l.fprop(x); }, {.train = true});
  EXPECT_TRUE(all_close(run.at_path("batch_stats/moving_mean").leaf(), {0, 0, 0}, 0, 0));
  hp.use_scale = hp.use_bias = false;
  EXPECT_EQ(tree_paths(init(*build<BatchNorm>(hp), random::key(0))),
            (std::vector<std::string>{"batch_stats/moving_mean", "batch_stats/moving_variance"}));
}

TEST(BatchNorm, TrainingUsesBatchStatisticsAndUpdatesMovingAverages) {
  BatchNorm::HParams hp;
  hp.dim = 4;
  hp.decay = 0.9;
  hp.epsilon = 1e-3;
  auto f = make_batch_norm(hp);
  Array x1 = testing::random_array({2, 3, 4}, DType::f64, 1, -1, 3);
  Array x2 = testing::random_array({5, 4}, DType::f64, 2, 2, 6);
  std::vector<double> v1 = x1.to_vector<double>(), v2 = x2.to_vector<double>();
  Moments m1 = moments(v1, 4), m2 = moments(v2, 4);

  // Step 1: normalised with the batch moments; moving = 0.9 * init + 0.1 * batch.
  auto step1 = apply(*f.layer, f.vars, kTrain, x1);
  EXPECT_TRUE(all_close(step1.output, normalized(v1, m1, f.gamma, f.beta, 1e-3), 1e-12, 1e-12));
  std::vector<double> mean1 = blend({0, 0, 0, 0}, m1.mean, 0.9), var1 = blend({1, 1, 1, 1}, m1.var, 0.9);
  EXPECT_EQ(tree_paths(step1.updates),
            (std::vector<std::string>{"batch_stats/moving_mean", "batch_stats/moving_variance"}));
  EXPECT_TRUE(all_close(step1.updates.at_path("batch_stats/moving_mean").leaf(), mean1, 1e-12, 1e-14));
  EXPECT_TRUE(all_close(step1.updates.at_path("batch_stats/moving_variance").leaf(), var1, 1e-12, 1e-14));

  // Step 2 from the updated statistics.
  Tree vars2 = f.vars;
  vars2["batch_stats"] = step1.updates["batch_stats"];
  auto step2 = apply(*f.layer, vars2, kTrain, x2);
  EXPECT_TRUE(all_close(step2.output, normalized(v2, m2, f.gamma, f.beta, 1e-3), 1e-12, 1e-12));
  std::vector<double> mean2 = blend(mean1, m2.mean, 0.9), var2 = blend(var1, m2.var, 0.9);
  EXPECT_TRUE(all_close(step2.updates.at_path("batch_stats/moving_mean").leaf(), mean2, 1e-12, 1e-14));
  EXPECT_TRUE(all_close(step2.updates.at_path("batch_stats/moving_variance").leaf(), var2, 1e-12, 1e-14));

  // Evaluation normalises with the moving statistics and updates nothing.
  Tree vars3 = f.vars;
  vars3["batch_stats"] = step2.updates["batch_stats"];
  auto eval = apply(*f.layer, vars3, x1);
  EXPECT_TRUE(all_close(eval.output, normalized(v1, Moments{mean2, var2}, f.gamma, f.beta, 1e-3), 1e-12, 1e-12));
  EXPECT_TRUE(eval.updates.entries().empty());
  EXPECT_TRUE(
      apply(*f.layer, vars3, ApplyOptions{.mutable_collections = {"batch_stats"}}, x1).updates.entries().empty());
}

TEST(BatchNorm, RunningAverageAndMovingAverageInTraining) {
  BatchNorm::HParams hp;
  hp.dim = 3;
  hp.use_moving_avg_in_training = true;
  auto f = make_batch_norm(hp);
  f.vars["batch_stats"]["moving_mean"] = array<double>({0.5, -1, 2});
  f.vars["batch_stats"]["moving_variance"] = array<double>({2, 0.5, 3});
  Array x = testing::random_array({6, 3}, DType::f64, 3, -2, 2);
  std::vector<double> xv = x.to_vector<double>();
  Moments batch = moments(xv, 3);
  Moments moved{blend({0.5, -1, 2}, batch.mean, 0.99), blend({2, 0.5, 3}, batch.var, 0.99)};
  // use_moving_avg_in_training: the just-updated moving statistics normalise.
  auto out = apply(*f.layer, f.vars, kTrain, x);
  EXPECT_TRUE(all_close(out.output, normalized(xv, moved, f.gamma, f.beta, 1e-3), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out.updates.at_path("batch_stats/moving_mean").leaf(), moved.mean, 1e-12, 1e-14));
  // use_running_average: evaluation behaviour even in training; nothing is updated.
  hp.use_moving_avg_in_training = false;
  hp.use_running_average = true;
  auto frozen = make_batch_norm(hp);
  frozen.vars["batch_stats"] = f.vars["batch_stats"];
  auto run = apply(*frozen.layer, frozen.vars, kTrain, x);
  EXPECT_TRUE(all_close(run.output, normalized(xv, Moments{{0.5, -1, 2}, {2, 0.5, 3}}, frozen.gamma, frozen.beta, 1e-3),
                        1e-12, 1e-12));
  EXPECT_TRUE(run.updates.entries().empty());
}

TEST(BatchNorm, TrainingNeedsMutableBatchStats) {
  BatchNorm::HParams hp;
  hp.dim = 2;
  auto bn = build<BatchNorm>(hp);
  Tree vars = init(*bn, random::key(0));
  EXPECT_PAX_ERROR(apply(*bn, vars, ApplyOptions{.train = true}, ones({3, 2})),
                   "BatchNorm '': cannot update variable 'moving_mean' of collection 'batch_stats', which is not "
                   "mutable in this apply; pass mutable_collections = {\"batch_stats\"}");
}

TEST(BatchNorm, GradientsInTrainingAndEvaluation) {
  BatchNorm::HParams hp;
  hp.dim = 3;
  auto f = make_batch_norm(hp);
  Array x = testing::random_array({4, 2, 3}, DType::f64, 5, -2, 2);
  // Training: the gradient flows through the batch statistics too.
  testing::ArrayFn train = [&](const std::vector<Array>& a) {
    Tree vars = f.vars;
    vars["params"]["gamma"] = a[0];
    vars["params"]["beta"] = a[1];
    return apply(*f.layer, vars, kTrain, a[2]).output;
  };
  EXPECT_TRUE(testing::check_vjp(train, {f.vars["params"]["gamma"].leaf(), f.vars["params"]["beta"].leaf(), x}));
  f.vars["batch_stats"]["moving_mean"] = array<double>({0.1, 0.2, -0.3});
  EXPECT_TRUE(testing::check_layer_vjp(
      *f.layer, f.vars, {x}, [](const BatchNorm& l, const std::vector<Array>& in) { return l.fprop(in[0]); }));
}

TEST(BatchNorm, VmapWithAxisNameEqualsTheBatchComputation) {
  BatchNorm::HParams hp;
  hp.dim = 3;
  hp.decay = 0.8;
  auto whole = make_batch_norm(hp);
  hp.axis_name = "batch";
  auto mapped = make_batch_norm(hp);
  Array x = testing::random_array({5, 2, 3}, DType::f64, 7, -1, 4);  // 5 examples of (2, 3)
  auto want = apply(*whole.layer, whole.vars, kTrain, x);
  auto per_example = [&](const Array& xi) {  // xi: (2, 3)
    auto out = apply(*mapped.layer, mapped.vars, kTrain, xi);
    return std::make_pair(out.output, out.updates);
  };
  auto [y, updates] = vmap(per_example, {.axis_name = "batch"})(x);
  EXPECT_TRUE(all_close(y, want.output, 1e-12, 1e-12));
  // The statistics are shared by every member of the axis (stacked by vmap).
  for (const char* name : {"moving_mean", "moving_variance"}) {
    Array stats = updates["batch_stats"][name].leaf();
    ASSERT_EQ(stats.shape(), (Shape{5, 3}));
    Array w = want.updates["batch_stats"][name].leaf();
    for (int64_t i = 0; i < 5; ++i)
      EXPECT_TRUE(all_close(reshape(slice_along(stats, 0, i, i + 1), {3}), w, 1e-12, 1e-14));
  }
  // Gradients through pmean equal those of the batch computation.
  Array r = testing::random_array({5, 2, 3}, DType::f64, 8);
  Array gx = grad([&](const Array& xs) {
    return sum(vmap([&](const Array& xi) { return apply(*mapped.layer, mapped.vars, kTrain, xi).output; },
                    {.axis_name = "batch"})(xs) *
               r);
  })(x);
  Array gx_want = grad([&](const Array& xs) { return sum(apply(*whole.layer, whole.vars, kTrain, xs).output * r); })(x);
  EXPECT_TRUE(all_close(gx, gx_want, 1e-10, 1e-12));
  // Per-example vectors (no axis to reduce inside the example).
  Array rows = testing::random_array({6, 3}, DType::f64, 9, -1, 4);
  auto [y_rows, up_rows] = vmap(per_example, {.axis_name = "batch"})(rows);
  auto want_rows = apply(*whole.layer, whole.vars, kTrain, rows);
  EXPECT_TRUE(all_close(y_rows, want_rows.output, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(reshape(slice_along(up_rows["batch_stats"]["moving_variance"].leaf(), 0, 5, 6), {3}),
                        want_rows.updates["batch_stats"]["moving_variance"].leaf(), 1e-12, 1e-14));
  // Without a vmap of that name there is no axis to average over.
  EXPECT_PAX_ERROR(apply(*mapped.layer, mapped.vars, kTrain, x), "unbound axis name 'batch'");
}

TEST(BatchNorm, MixedPrecisionAndJit) {
  BatchNorm::HParams hp;
  hp.dim = 4;
  hp.fprop_dtype = DType::bf16;
  auto bn = build<BatchNorm>(hp);
  Tree vars = init(*bn, random::key(0));
  Array x = testing::random_array({8, 4}, DType::f32, 9, 10, 12);  // |mean| >> std
  auto out = apply(*bn, vars, kTrain, x.astype(DType::bf16));
  EXPECT_EQ(out.output.dtype(), DType::bf16);
  EXPECT_EQ(out.updates.at_path("batch_stats/moving_mean").leaf().dtype(), DType::f32);
  std::vector<double> xv = x.astype(DType::bf16).to_vector<double>();
  Moments m = moments(xv, 4);
  EXPECT_TRUE(all_close(out.output, normalized(xv, m, {1, 1, 1, 1}, {0, 0, 0, 0}, 1e-3), 2e-2, 2e-2));
  EXPECT_TRUE(
      all_close(out.updates.at_path("batch_stats/moving_mean").leaf(), blend({0, 0, 0, 0}, m.mean, 0.99), 1e-5, 1e-5));
  // jit(apply) equals apply, output and updated statistics.
  auto step = [&](const Tree& v, const Array& xs) {
    auto o = apply(*bn, v, kTrain, xs);
    return std::make_pair(o.output, o.updates);
  };
  auto [y, up] = jit(step)(vars, x);
  auto [y_eager, up_eager] = step(vars, x);
  EXPECT_TRUE(all_close(y, y_eager, 0, 0));
  EXPECT_TRUE(all_close(up.at_path("batch_stats/moving_variance").leaf(),
                        up_eager.at_path("batch_stats/moving_variance").leaf(), 1e-7, 1e-7));
}

TEST(BatchNorm, Errors) {
  BatchNorm::HParams hp;
  EXPECT_PAX_ERROR(build<BatchNorm>(hp), "BatchNorm '': dim must be > 0, got 0");
  hp.dim = 3;
  hp.decay = 1.5;
  EXPECT_PAX_ERROR(build<BatchNorm>(hp), "decay must be in [0, 1], got 1.5");
  hp.decay = 0.9;
  hp.epsilon = -1;
  EXPECT_PAX_ERROR(build<BatchNorm>(hp), "epsilon must be >= 0, got -1");
  hp.epsilon = 1e-3;
  auto bn = build<BatchNorm>(hp);
  Tree vars = init(*bn, random::key(0));
  EXPECT_PAX_ERROR(apply(*bn, vars, ones({2, 4})), "BatchNorm '': input f32[2,4] must end in dim = 3");
  EXPECT_PAX_ERROR(apply(*bn, vars, ones({2, 3}, DType::i32)), "must be floating");
  Tree missing = vars;
  missing["batch_stats"] = Tree::dict();
  EXPECT_PAX_ERROR(apply(*bn, missing, ones({2, 3})), "variable 'batch_stats/moving_mean' is missing");
}

// ---------------------------------------------------------------------------
// GroupNorm

TEST(GroupNorm, MatchesFormulaAndGradients) {
  GroupNorm::HParams hp;
  hp.dim = 6;
  hp.num_groups = 3;
  hp.epsilon = 1e-4;
  hp.dtype = hp.fprop_dtype = DType::f64;
  auto gn = build<GroupNorm>(hp);
  Tree vars = init(*gn, random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/gamma", "params/beta"}));
  vars["params"]["gamma"] = testing::random_array({6}, DType::f64, 1, 0.5, 2);
  vars["params"]["beta"] = testing::random_array({6}, DType::f64, 2);
  std::vector<double> g = vars["params"]["gamma"].leaf().to_vector<double>(),
                      b = vars["params"]["beta"].leaf().to_vector<double>();
  // (B, H, W, C) and (B, T, C): statistics per example and group of 2 channels.
  for (const Shape& shape : {Shape{2, 3, 2, 6}, Shape{3, 5, 6}, Shape{2, 6}}) {
    Array x = testing::random_array(shape, DType::f64, 3, -2, 3);
    std::vector<double> xv = x.to_vector<double>(), want(xv.size());
    const size_t per_example = size_t(shape.numel() / shape[0]);
    for (size_t e = 0; e < size_t(shape[0]); ++e) {
      for (size_t grp = 0; grp < 3; ++grp) {
        double m = 0, v = 0, n = double(per_example) / 3;
        for (size_t i = 0; i < per_example; ++i) {
          if ((i % 6) / 2 == grp) m += xv[e * per_example + i] / n;
        }
        for (size_t i = 0; i < per_example; ++i) {
          if ((i % 6) / 2 == grp) v += (xv[e * per_example + i] - m) * (xv[e * per_example + i] - m) / n;
        }
        for (size_t i = 0; i < per_example; ++i) {
          const size_t k = e * per_example + i;
          if ((i % 6) / 2 == grp) want[k] = (xv[k] - m) / std::sqrt(v + 1e-4) * g[i % 6] + b[i % 6];
        }
      }
    }
    EXPECT_TRUE(all_close(apply(*gn, vars, x).output, want, 1e-12, 1e-12)) << shape;
  }
  Array x = testing::random_array({2, 3, 6}, DType::f64, 4);
  EXPECT_TRUE(testing::check_layer_vjp(
      *gn, vars, {x}, [](const GroupNorm& l, const std::vector<Array>& in) { return l.fprop(in[0]); }));
  auto f = [&](const Tree& v, const Array& xs) { return apply(*gn, v, xs).output; };
  EXPECT_TRUE(all_close(jit(f)(vars, x), f(vars, x), 1e-14, 1e-14));
}

TEST(GroupNorm, MixedPrecisionAndErrors) {
  GroupNorm::HParams hp;
  hp.dim = 8;
  hp.num_groups = 2;
  hp.fprop_dtype = DType::bf16;
  auto gn = build<GroupNorm>(hp);
  Tree vars = init(*gn, random::key(0));
  Array x = testing::random_array({2, 4, 8}, DType::f32, 5, 100, 101);
  Array y = apply(*gn, vars, x.astype(DType::bf16)).output;
  EXPECT_EQ(y.dtype(), DType::bf16);
  // Statistics in f32: the output is standardised despite the large mean.
  std::vector<double> yv = y.to_vector<double>();
  double mean_abs = 0;
  for (double e : yv) mean_abs += std::fabs(e) / double(yv.size());
  EXPECT_GT(mean_abs, 0.5);
  EXPECT_LT(mean_abs, 1.2);
  EXPECT_PAX_ERROR(apply(*gn, vars, ones({8})),
                   "GroupNorm '': input f32[8] must be (batch, ..., dim = 8) with rank >= 2");
  EXPECT_PAX_ERROR(apply(*gn, vars, ones({2, 7})), "must be (batch, ..., dim = 8)");
  hp.num_groups = 3;
  EXPECT_PAX_ERROR(build<GroupNorm>(hp), "GroupNorm '': num_groups = 3 must be positive and divide dim = 8");
  hp.num_groups = 0;
  EXPECT_PAX_ERROR(build<GroupNorm>(hp), "num_groups = 0 must be positive");
  hp.dim = 0;
  EXPECT_PAX_ERROR(build<GroupNorm>(hp), "GroupNorm '': dim must be > 0, got 0");
}

}  // namespace
}  // namespace pax::nn

// Embedding layers against direct formulas: lookups (clamped ids), tied
// logits with bias and soft cap, sinusoids computed here, gradients as hand
// scatter-adds, init statistics, jit and vmap against eager, error paths.
#include "pax/nn/embedding.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

std::vector<double> values(const Tree& t) { return t.leaf().to_vector<double>(); }

// jit(apply) equals apply, with the variables traced.
template <class L, class F>
::testing::AssertionResult jit_matches_eager(const L& layer, const Tree& vars, const Array& x, F call, double tol = 0) {
  auto run = [&layer, call](const Tree& v, const Array& in) {
    return apply_with(layer, v, [&](const L& l) { return call(l, in); }).output;
  };
  Array want = run(vars, x);
  Array got = jit(run)(vars, x);
  if (got.dtype() != want.dtype()) return ::testing::AssertionFailure() << "jit gives " << got.aval().str();
  return all_close(got, want, tol, tol);
}

// mean and standard deviation of an array's values.
std::pair<double, double> moments(const Array& x) {
  std::vector<double> v = x.to_vector<double>();
  double m = 0, s = 0;
  for (double e : v) m += e / double(v.size());
  for (double e : v) s += (e - m) * (e - m) / double(v.size());
  return {m, std::sqrt(s)};
}

// The sinusoid of position p, channel c, written from the definition:
// timescales min * (max / min)^(i / (n - 1)), sin on the first n channels,
// cos on the next n, zero on a last odd channel.
double sinusoid(double p, int64_t c, int64_t dims, double min_ts = 1.0, double max_ts = 1e4) {
  const int64_t n = dims / 2;
  if (c >= 2 * n) return 0.0;
  const int64_t i = c % n;
  const double ts = min_ts * std::pow(max_ts / min_ts, double(i) / double(std::max<int64_t>(n - 1, 1)));
  return c < n ? std::sin(p / ts) : std::cos(p / ts);
}

std::vector<double> sinusoids(const std::vector<double>& positions, int64_t dims, double min_ts = 1.0,
                              double max_ts = 1e4) {
  std::vector<double> out;
  for (double p : positions) {
    for (int64_t c = 0; c < dims; ++c) out.push_back(sinusoid(p, c, dims, min_ts, max_ts));
  }
  return out;
}

// HParams of an Embedding (or SharedEmbeddingSoftmax) with an (n, d) table.
template <class L = Embedding>
typename L::HParams table_hp(int64_t n, int64_t d, DType dtype = DType::f32) {
  typename L::HParams hp;
  hp.num_classes = n;
  hp.input_dims = d;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

// The rows of a (rows, d) table t, flattened, times scale.
std::vector<double> rows_of(const std::vector<double>& t, int64_t d, const std::vector<int>& rows, double scale = 1.0) {
  std::vector<double> out;
  for (int r : rows) {
    for (int64_t c = 0; c < d; ++c) out.push_back(scale * t[size_t(r * d + c)]);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Embedding

TEST(Embedding, LookupReturnsRowsAndClampsOutOfRangeIds) {
  auto emb = build<Embedding>(table_hp(5, 3));
  Tree vars = init(*emb, random::key(0));
  EXPECT_EQ(vars["params"]["emb_var"].leaf().shape(), (Shape{5, 3}));
  const std::vector<double> t = values(vars["params"]["emb_var"]);
  // -3 and -1 clamp to row 0, 5 and 100 to row 4.
  const std::vector<int> ids = {2, -1, 5, 0, 4, 100, 1, 1, -3};
  const std::vector<int> rows = {2, 0, 4, 0, 4, 4, 1, 1, 0};
  Array out = apply(*emb, vars, array(ids, Shape{3, 3})).output;
  EXPECT_EQ(out.shape(), (Shape{3, 3, 3}));
  EXPECT_TRUE(all_close(out, rows_of(t, 3, rows), 0, 0));
  // Every integer dtype, a 0-d id and zero-size ids.
  for (DType d : {DType::u8, DType::u32, DType::i64}) {
    Array o = apply(*emb, vars, array(std::vector<int>{2, 0, 4, 1}, Shape{4}).astype(d)).output;
    EXPECT_TRUE(all_close(o, rows_of(t, 3, {2, 0, 4, 1}), 0, 0)) << dtype_name(d);
  }
  Array scalar_out = apply(*emb, vars, scalar(3)).output;
  EXPECT_EQ(scalar_out.shape(), (Shape{3}));
  EXPECT_TRUE(all_close(scalar_out, rows_of(t, 3, {3}), 0, 0));
  EXPECT_EQ(apply(*emb, vars, zeros({0, 2}, DType::i32)).output.shape(), (Shape{0, 2, 3}));
}

TEST(Embedding, ScaleSqrtDepthAndMixedPrecision) {
  auto hp = table_hp(7, 4);
  hp.scale_sqrt_depth = true;
  auto emb = build<Embedding>(hp);
  Tree vars = init(*emb, random::key(1));
  const std::vector<double> t = values(vars["params"]["emb_var"]);
  Array ids = array(std::vector<int>{6, 3}, Shape{2});
  const std::vector<double> want = rows_of(t, 4, {6, 3}, 2.0);
  EXPECT_TRUE(all_close(apply(*emb, vars, ids).output, want, 1e-6, 1e-7));
  hp.fprop_dtype = DType::bf16;
  auto emb16 = build<Embedding>(hp);
  Array y = apply(*emb16, vars, ids).output;
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y, want, 1e-2, 1e-2));
  Array logits = apply_with(*emb16, vars, [](const Embedding& l) { return l.attend(ones({2, 4})); }).output;
  EXPECT_EQ(logits.dtype(), DType::bf16);
  EXPECT_EQ(logits.shape(), (Shape{2, 7}));
}

TEST(Embedding, AttendProjectsOnTheTable) {
  auto emb = build<Embedding>(table_hp(4, 3, DType::f64));
  Tree vars = init(*emb, random::key(2));
  vars["params"]["emb_var"] = testing::random_array({4, 3}, DType::f64, 3);
  Array x = testing::random_array({2, 2, 3}, DType::f64, 4);
  const std::vector<double> t = values(vars["params"]["emb_var"]), xv = x.to_vector<double>();
  std::vector<double> want;
  for (int p = 0; p < 4; ++p) {
    for (int n = 0; n < 4; ++n) {
      double s = 0;
      for (int d = 0; d < 3; ++d) s += xv[size_t(p * 3 + d)] * t[size_t(n * 3 + d)];
      want.push_back(s);
    }
  }
  auto attend = [](const Embedding& l, const std::vector<Array>& in) { return l.attend(in[0]); };
  Array got = apply_with(*emb, vars, [&](const Embedding& l) { return l.attend(x); }).output;
  EXPECT_EQ(got.shape(), (Shape{2, 2, 4}));
  EXPECT_TRUE(all_close(got, want, 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(*emb, vars, {x}, attend));
}

TEST(Embedding, TableGradientIsAScatterAddOverRepeatedIds) {
  auto hp = table_hp(5, 3, DType::f64);
  hp.scale_sqrt_depth = true;
  auto emb = build<Embedding>(hp);
  Tree vars = init(*emb, random::key(3));
  // Repeated ids, and 9 / -2 that clamp onto rows 4 / 0.
  const std::vector<int> ids = {1, 3, 1, 9, 4, 1, -2, 0};
  const std::vector<int> rows = {1, 3, 1, 4, 4, 1, 0, 0};
  Array id_array = array(ids, Shape{2, 4});
  Array w = testing::random_array({2, 4, 3}, DType::f64, 5);
  Tree g = grad([&](const Tree& v) { return sum(apply(*emb, v, id_array).output * w); })(vars);
  const std::vector<double> wv = w.to_vector<double>();
  std::vector<double> want(15, 0.0);
  for (size_t p = 0; p < rows.size(); ++p) {
    for (size_t c = 0; c < 3; ++c) want[size_t(rows[p]) * 3 + c] += std::sqrt(3.0) * wv[p * 3 + c];
  }
  EXPECT_TRUE(all_close(g["params"]["emb_var"].leaf(), want, 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(
      *emb, vars, {id_array}, [](const Embedding& l, const std::vector<Array>& in) { return l.fprop(in[0]); }));
}

TEST(Embedding, DefaultInitIsGaussianWithStddevOneOverSqrtDepth) {
  auto emb = build<Embedding>(table_hp(256, 64));
  auto [m, s] = moments(init(*emb, random::key(4))["params"]["emb_var"].leaf());
  EXPECT_NEAR(m, 0.0, 0.004);
  EXPECT_NEAR(s, 1.0 / 8.0, 0.03 / 8.0);
  // With scale_sqrt_depth the embeddings have unit variance.
  auto hp = table_hp(256, 64);
  hp.scale_sqrt_depth = true;
  auto scaled = build<Embedding>(hp);
  Tree vars = init(*scaled, random::key(5));
  Array all_rows = apply(*scaled, vars, arange(256)).output;
  EXPECT_NEAR(moments(all_rows).second, 1.0, 0.03);
  // params_init overrides the default.
  hp.params_init = WeightInit::gaussian(0.02);
  auto custom = build<Embedding>(hp);
  EXPECT_NEAR(moments(init(*custom, random::key(6))["params"]["emb_var"].leaf()).second, 0.02, 0.02 * 0.03);
}

TEST(Embedding, JitAndVmapMatchEager) {
  auto emb = build<Embedding>(table_hp(11, 6));
  Tree vars = init(*emb, random::key(7));
  Array ids = array(std::vector<int>{0, 10, 3, 3, 7, 12, -1, 5}, Shape{2, 4});
  EXPECT_TRUE(jit_matches_eager(*emb, vars, ids, [](const Embedding& l, const Array& x) { return l.fprop(x); }));
  EXPECT_TRUE(jit_matches_eager(
      *emb, vars, testing::random_array({3, 6}, DType::f32, 8),
      [](const Embedding& l, const Array& x) { return l.attend(x); }, 1e-6));
  Array batched = vmap([&](const Array& row) { return apply(*emb, vars, row).output; })(ids);
  EXPECT_TRUE(all_close(batched, apply(*emb, vars, ids).output, 0, 0));
}

TEST(Embedding, Errors) {
  EXPECT_PAX_ERROR(build<Embedding>(table_hp(0, 3)),
                   "Embedding '': num_classes and input_dims must be > 0, got 0 and 3");
  EXPECT_PAX_ERROR(build<Embedding>(table_hp(4, -1)), "must be > 0, got 4 and -1");
  auto emb = build<Embedding>(table_hp(4, 3));
  Tree vars = init(*emb, random::key(0));
  EXPECT_PAX_ERROR(apply(*emb, vars, ones({2, 2})), "ids must have an integer dtype (u8, u32, i32, i64), got f32[2,2]");
  EXPECT_PAX_ERROR(apply(*emb, vars, ones({2}, DType::bool_)), "ids must have an integer dtype");
  auto attend = [&](const Array& x) {
    return apply_with(*emb, vars, [&](const Embedding& l) { return l.attend(x); }).output;
  };
  EXPECT_PAX_ERROR(attend(ones({2, 4})), "input f32[2,4] must be floating and end in input_dims = 3");
  EXPECT_PAX_ERROR(attend(ones({2, 3}, DType::i32)), "must be floating");
  EXPECT_PAX_ERROR(attend(scalar(1.0f)), "must be floating and end in input_dims");
}

// ---------------------------------------------------------------------------
// SharedEmbeddingSoftmax

TEST(SharedEmbeddingSoftmax, LogitsWithBiasAndSoftCap) {
  auto hp = table_hp<SharedEmbeddingSoftmax>(5, 3, DType::f64);
  hp.soft_cap_logits = 2.5;
  auto sm = build<SharedEmbeddingSoftmax>(hp);
  Tree vars = init(*sm, random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/emb_var", "params/bias"}));
  EXPECT_TRUE(all_close(vars["params"]["bias"].leaf(), std::vector<double>(5, 0.0), 0, 0));
  vars["params"]["bias"] = testing::random_array({5}, DType::f64, 1, -3, 3);
  vars["params"]["emb_var"] = testing::random_array({5, 3}, DType::f64, 2, -2, 2);
  Array x = testing::random_array({2, 3}, DType::f64, 3, -2, 2);
  const std::vector<double> t = values(vars["params"]["emb_var"]), b = values(vars["params"]["bias"]),
                            xv = x.to_vector<double>();
  std::vector<double> capped, raw;
  for (int p = 0; p < 2; ++p) {
    for (int n = 0; n < 5; ++n) {
      double s = b[size_t(n)];
      for (int d = 0; d < 3; ++d) s += xv[size_t(p * 3 + d)] * t[size_t(n * 3 + d)];
      raw.push_back(s);
      capped.push_back(2.5 * std::tanh(s / 2.5));
    }
  }
  EXPECT_TRUE(all_close(apply(*sm, vars, x).output, capped, 1e-12, 1e-12));
  auto logits = [](const SharedEmbeddingSoftmax& l, const std::vector<Array>& in) { return l.get_logits(in[0]); };
  EXPECT_TRUE(testing::check_layer_vjp(*sm, vars, {x}, logits));
  hp.soft_cap_logits = 0;
  auto uncapped = build<SharedEmbeddingSoftmax>(hp);
  EXPECT_TRUE(all_close(apply(*uncapped, vars, x).output, raw, 1e-12, 1e-12));
  hp.has_bias = false;
  auto no_bias = build<SharedEmbeddingSoftmax>(hp);
  Tree nb_vars = init(*no_bias, random::key(0));
  EXPECT_EQ(tree_paths(nb_vars), (std::vector<std::string>{"params/emb_var"}));
  nb_vars["params"]["emb_var"] = vars["params"]["emb_var"];
  std::vector<double> want = raw;
  for (size_t i = 0; i < want.size(); ++i) want[i] -= b[i % 5];
  EXPECT_TRUE(all_close(apply(*no_bias, nb_vars, x).output, want, 1e-12, 1e-12));
}

TEST(SharedEmbeddingSoftmax, LookupUsesTheSameTable) {
  auto hp = table_hp<SharedEmbeddingSoftmax>(6, 4);
  hp.scale_sqrt_depth = true;
  auto sm = build<SharedEmbeddingSoftmax>(hp);
  Tree vars = init(*sm, random::key(1));
  const std::vector<double> t = values(vars["params"]["emb_var"]);
  Array ids = array(std::vector<int>{5, 0, 2, 7}, Shape{2, 2});  // 7 clamps to 5
  const std::vector<double> want = rows_of(t, 4, {5, 0, 2, 5}, 2.0);
  Array e = apply_with(*sm, vars, [&](const SharedEmbeddingSoftmax& l) { return l.emb_lookup(ids); }).output;
  EXPECT_EQ(e.shape(), (Shape{2, 2, 4}));
  EXPECT_TRUE(all_close(e, want, 1e-6, 1e-7));
  auto [m, s] = moments(init(*build<SharedEmbeddingSoftmax>(table_hp<SharedEmbeddingSoftmax>(300, 100)),
                             random::key(2))["params"]["emb_var"]
                            .leaf());
  EXPECT_NEAR(m, 0.0, 0.003);
  EXPECT_NEAR(s, 0.1, 0.003);
}

// The gradient of a loss through both emb_lookup and get_logits adds both
// contributions into the one table.
TEST(SharedEmbeddingSoftmax, TiedGradientAccumulatesLookupAndLogits) {
  constexpr int N = 5, D = 3, P = 6;
  auto hp = table_hp<SharedEmbeddingSoftmax>(N, D, DType::f64);
  hp.scale_sqrt_depth = true;
  auto sm = build<SharedEmbeddingSoftmax>(hp);
  Tree vars = init(*sm, random::key(3));
  vars["params"]["bias"] = testing::random_array({N}, DType::f64, 4);
  const std::vector<int> ids = {4, 1, 4, 0, 2, 4};
  Array id_array = array(ids, Shape{2, 3});
  Array c = testing::random_array({2, 3, N}, DType::f64, 5);
  auto both = [&](const SharedEmbeddingSoftmax& l) { return l.get_logits(l.emb_lookup(id_array)); };
  Tree g = grad([&](const Tree& v) { return sum(apply_with(*sm, v, both).output * c); })(vars);
  // By hand: E = s T[ids], logits = E T^T + b.
  const double s = std::sqrt(double(D));
  const std::vector<double> t = values(vars["params"]["emb_var"]), cv = c.to_vector<double>();
  std::vector<double> dt(N * D, 0.0), db(N, 0.0);
  for (int p = 0; p < P; ++p) {
    for (int n = 0; n < N; ++n) {
      const double cpn = cv[size_t(p * N + n)];
      db[size_t(n)] += cpn;
      for (int d = 0; d < D; ++d) {
        dt[size_t(n * D + d)] += cpn * s * t[size_t(ids[size_t(p)] * D + d)];  // through the logits
        dt[size_t(ids[size_t(p)] * D + d)] += s * cpn * t[size_t(n * D + d)];  // through the lookup
      }
    }
  }
  EXPECT_TRUE(all_close(g["params"]["emb_var"].leaf(), dt, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(g["params"]["bias"].leaf(), db, 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(
      *sm, vars, {}, [&](const SharedEmbeddingSoftmax& l, const std::vector<Array>&) { return both(l); }));
}

TEST(SharedEmbeddingSoftmax, JitMatchesEagerAndErrors) {
  auto hp = table_hp<SharedEmbeddingSoftmax>(9, 4);
  hp.soft_cap_logits = 3.0;
  auto sm = build<SharedEmbeddingSoftmax>(hp);
  Tree vars = init(*sm, random::key(6));
  EXPECT_TRUE(jit_matches_eager(
      *sm, vars, testing::random_array({2, 3, 4}, DType::f32, 7),
      [](const SharedEmbeddingSoftmax& l, const Array& x) { return l.get_logits(x); }, 1e-6));
  EXPECT_TRUE(jit_matches_eager(*sm, vars, array(std::vector<int>{8, 0, 4}, Shape{3}),
                                [](const SharedEmbeddingSoftmax& l, const Array& ids) { return l.emb_lookup(ids); }));
  EXPECT_PAX_ERROR(build<SharedEmbeddingSoftmax>(table_hp<SharedEmbeddingSoftmax>(0, 4)),
                   "num_classes and input_dims must be > 0");
  hp.soft_cap_logits = -1;
  EXPECT_PAX_ERROR(build<SharedEmbeddingSoftmax>(hp), "soft_cap_logits must be >= 0 (0 disables it), got -1");
  EXPECT_PAX_ERROR(apply(*sm, vars, ones({2, 5})),
                   "SharedEmbeddingSoftmax '': input f32[2,5] must be floating and end in input_dims = 4");
  EXPECT_PAX_ERROR(apply_with(*sm, vars, [](const SharedEmbeddingSoftmax& l) { return l.emb_lookup(ones({3})); }),
                   "ids must have an integer dtype");
}

TEST(SharedEmbeddingSoftmax, ConfigKeepsTheDefaultInitThroughJson) {
  auto cfg = Config::make("SharedEmbeddingSoftmax");
  cfg.apply_overrides({"num_classes=10", "input_dims=4", "soft_cap_logits=30"});
  Config loaded = Config::from_json(cfg.to_json());
  auto sm = build<SharedEmbeddingSoftmax>(loaded);
  const auto& hp = sm->hparams<SharedEmbeddingSoftmax::HParams>();
  EXPECT_EQ(hp.params_init.method, InitMethod::gaussian_sqrt_fan_in);
  EXPECT_EQ(hp.soft_cap_logits, 30.0);
  EXPECT_EQ(hp.num_classes, 10);
}

// ---------------------------------------------------------------------------
// PositionalEmbedding

PositionalEmbedding::HParams positional_hp(int64_t dims, DType dtype = DType::f32) {
  PositionalEmbedding::HParams hp;
  hp.embedding_dims = dims;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

TEST(PositionalEmbedding, SinusoidsOfASequence) {
  for (int64_t dims : {1, 2, 5, 8}) {
    auto pe = build<PositionalEmbedding>(positional_hp(dims, DType::f64));
    Tree vars = init(*pe, random::key(0));
    EXPECT_EQ(tree_paths(vars).size(), 0u);
    Array out = apply(*pe, vars, int64_t{6}).output;
    EXPECT_EQ(out.shape(), (Shape{1, 6, dims}));
    EXPECT_EQ(out.dtype(), DType::f64);
    EXPECT_TRUE(all_close(out, sinusoids({0, 1, 2, 3, 4, 5}, dims), 1e-12, 1e-12)) << dims;
  }
  // f32: positions up to 40 lose ~1e-5 to the rounding of the scaled time.
  auto pe = build<PositionalEmbedding>(positional_hp(16));
  std::vector<double> pos(40);
  for (int i = 0; i < 40; ++i) pos[size_t(i)] = i;
  Array out = apply(*pe, Tree(), int64_t{40}).output;
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_TRUE(all_close(out, sinusoids(pos, 16), 0, 2e-5));
  EXPECT_EQ(apply(*pe, Tree(), int64_t{0}).output.shape(), (Shape{1, 0, 16}));
}

TEST(PositionalEmbedding, ExplicitPositionsTimescalesAndDtypes) {
  auto hp = positional_hp(6, DType::f64);
  hp.min_timescale = 2;
  hp.max_timescale = 500;
  auto pe = build<PositionalEmbedding>(hp);
  const std::vector<double> pos = {3, 0, 17, 9, 250, 4};
  std::vector<int> ipos(pos.begin(), pos.end());
  Array out = apply(*pe, Tree(), array(ipos, Shape{2, 3})).output;
  EXPECT_EQ(out.shape(), (Shape{2, 3, 6}));
  EXPECT_TRUE(all_close(out, sinusoids(pos, 6, 2, 500), 1e-12, 1e-12));
  // Fractional positions and other index dtypes.
  EXPECT_TRUE(all_close(apply(*pe, Tree(), array(std::vector<double>{0.5, 2.25}, Shape{1, 2})).output,
                        sinusoids({0.5, 2.25}, 6, 2, 500), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(apply(*pe, Tree(), array(ipos, Shape{3, 2}).astype(DType::i64)).output,
                        sinusoids(pos, 6, 2, 500), 1e-12, 1e-12));
  // bf16 output, computed in f32.
  auto hp16 = positional_hp(8);
  hp16.fprop_dtype = DType::bf16;
  Array y = apply(*build<PositionalEmbedding>(hp16), Tree(), array(std::vector<int>{1, 7}, Shape{1, 2})).output;
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y, sinusoids({1, 7}, 8), 0, 8e-3));
}

TEST(PositionalEmbedding, SequenceEqualsArangePositionsAndJitMatchesEager) {
  auto pe = build<PositionalEmbedding>(positional_hp(10));
  Array positions = array(std::vector<int>{0, 1, 2, 3, 4}, Shape{1, 5});
  EXPECT_TRUE(all_close(apply(*pe, Tree(), int64_t{5}).output, apply(*pe, Tree(), positions).output, 0, 0));
  auto call = [](const PositionalEmbedding& l, const Array& p) { return l.fprop(p); };
  Array batch = array(std::vector<int>{5, 1, 9, 30, 2, 2}, Shape{2, 3});
  EXPECT_TRUE(jit_matches_eager(*pe, Tree(), batch, call, 1e-6));
  auto seq = jit([&](const Array& anchor, int64_t t) { return apply(*pe, Tree(), t).output + anchor; });
  EXPECT_TRUE(all_close(seq(zeros({}), int64_t{7}), apply(*pe, Tree(), int64_t{7}).output, 1e-6, 1e-6));
}

TEST(PositionalEmbedding, Errors) {
  EXPECT_PAX_ERROR(build<PositionalEmbedding>(positional_hp(0)),
                   "PositionalEmbedding '': embedding_dims must be > 0, got 0");
  auto hp = positional_hp(4);
  hp.min_timescale = 0;
  EXPECT_PAX_ERROR(build<PositionalEmbedding>(hp), "timescales need 0 < min_timescale <= max_timescale");
  hp.min_timescale = 10;
  hp.max_timescale = 5;
  EXPECT_PAX_ERROR(build<PositionalEmbedding>(hp), "got 10 and 5");
  auto pe = build<PositionalEmbedding>(positional_hp(4));
  EXPECT_PAX_ERROR(apply(*pe, Tree(), int64_t{-1}), "seq_length must be >= 0, got -1");
  EXPECT_PAX_ERROR(apply(*pe, Tree(), zeros({3}, DType::i32)), "positions i32[3] must have shape (B, T)");
  EXPECT_PAX_ERROR(apply(*pe, Tree(), zeros({1, 3}, DType::bool_)), "must have an integer or floating dtype");
}

// ---------------------------------------------------------------------------
// TrainablePositionalEmbedding

TrainablePositionalEmbedding::HParams trainable_hp(int64_t max_len, int64_t dims, DType dtype = DType::f32) {
  TrainablePositionalEmbedding::HParams hp;
  hp.max_seq_length = max_len;
  hp.embedding_dims = dims;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

TEST(TrainablePositionalEmbedding, RowsOfTheTable) {
  auto pe = build<TrainablePositionalEmbedding>(trainable_hp(8, 3));
  Tree vars = init(*pe, random::key(0));
  EXPECT_EQ(vars["params"]["emb_var"].leaf().shape(), (Shape{8, 3}));
  const std::vector<double> t = values(vars["params"]["emb_var"]);
  Array first = apply(*pe, vars, int64_t{5}).output;
  EXPECT_EQ(first.shape(), (Shape{1, 5, 3}));
  EXPECT_TRUE(all_close(first, rows_of(t, 3, {0, 1, 2, 3, 4}), 0, 0));
  EXPECT_EQ(apply(*pe, vars, int64_t{8}).output.shape(), (Shape{1, 8, 3}));
  const std::vector<int> pos = {7, 0, 3, 3, 1, 6};
  Array out = apply(*pe, vars, array(pos, Shape{2, 3})).output;
  EXPECT_EQ(out.shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(all_close(out, rows_of(t, 3, pos), 0, 0));
  EXPECT_EQ(apply(*pe, vars, zeros({2, 0}, DType::i32)).output.shape(), (Shape{2, 0, 3}));
}

TEST(TrainablePositionalEmbedding, GradientsInitAndJit) {
  auto pe = build<TrainablePositionalEmbedding>(trainable_hp(6, 2, DType::f64));
  Tree vars = init(*pe, random::key(1));
  const std::vector<int> pos = {2, 5, 2, 2};
  Array positions = array(pos, Shape{2, 2});
  Array w = testing::random_array({2, 2, 2}, DType::f64, 2);
  Tree g = grad([&](const Tree& v) { return sum(apply(*pe, v, positions).output * w); })(vars);
  const std::vector<double> wv = w.to_vector<double>();
  std::vector<double> want(12, 0.0);
  for (size_t p = 0; p < pos.size(); ++p) {
    for (size_t c = 0; c < 2; ++c) want[size_t(pos[p]) * 2 + c] += wv[p * 2 + c];
  }
  EXPECT_TRUE(all_close(g["params"]["emb_var"].leaf(), want, 1e-12, 1e-12));
  auto by_positions = [](const TrainablePositionalEmbedding& l, const std::vector<Array>& in) {
    return l.fprop(in[0]);
  };
  EXPECT_TRUE(testing::check_layer_vjp(*pe, vars, {positions}, by_positions));
  EXPECT_TRUE(testing::check_layer_vjp(
      *pe, vars, {},
      [](const TrainablePositionalEmbedding& l, const std::vector<Array>&) { return l.fprop(int64_t{4}); }));
  EXPECT_TRUE(jit_matches_eager(*pe, vars, positions,
                                [](const TrainablePositionalEmbedding& l, const Array& p) { return l.fprop(p); }));
  auto seq = jit([&](const Tree& v, int64_t t) { return apply(*pe, v, t).output; });
  EXPECT_TRUE(all_close(seq(vars, int64_t{3}), apply(*pe, vars, int64_t{3}).output, 0, 0));
  // Traced positions cannot be checked: out-of-range ones are clamped.
  auto traced = jit([&](const Tree& v, const Array& p) { return apply(*pe, v, p).output; });
  Array clamped = traced(vars, array(std::vector<int>{9, -4}, Shape{1, 2}));
  EXPECT_TRUE(all_close(clamped, rows_of(values(vars["params"]["emb_var"]), 2, {5, 0}), 0, 0));
  auto big = build<TrainablePositionalEmbedding>(trainable_hp(512, 49));
  auto [m, s] = moments(init(*big, random::key(3))["params"]["emb_var"].leaf());
  EXPECT_NEAR(m, 0.0, 0.003);
  EXPECT_NEAR(s, 1.0 / 7.0, 0.03 / 7.0);
}

TEST(TrainablePositionalEmbedding, Errors) {
  EXPECT_PAX_ERROR(build<TrainablePositionalEmbedding>(trainable_hp(0, 4)),
                   "max_seq_length and embedding_dims must be > 0, got 0 and 4");
  EXPECT_PAX_ERROR(build<TrainablePositionalEmbedding>(trainable_hp(4, 0)), "got 4 and 0");
  auto pe = build<TrainablePositionalEmbedding>(trainable_hp(4, 2));
  Tree vars = init(*pe, random::key(0));
  EXPECT_PAX_ERROR(apply(*pe, vars, int64_t{5}), "seq_length 5 exceeds max_seq_length = 4");
  EXPECT_PAX_ERROR(apply(*pe, vars, int64_t{-2}), "seq_length must be >= 0");
  EXPECT_PAX_ERROR(apply(*pe, vars, array(std::vector<int>{0, 4}, Shape{1, 2})),
                   "positions i32[1,2] range over [0, 4], outside [0, max_seq_length = 4)");
  EXPECT_PAX_ERROR(apply(*pe, vars, array(std::vector<int>{-1, 2}, Shape{1, 2})), "range over [-1, 2]");
  EXPECT_PAX_ERROR(apply(*pe, vars, zeros({1, 2})), "positions must have an integer dtype");
  EXPECT_PAX_ERROR(apply(*pe, vars, zeros({1, 2, 1}, DType::i32)), "must have shape (B, T)");
}

}  // namespace
}  // namespace pax::nn

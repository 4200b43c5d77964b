// LSTMCell against the gate equations written out, paddings, gradients, and
// the cell inside pax::scan under grad and jit against an unrolled loop.
#include "pax/nn/rnn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/control_flow.h"
#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

double sig(double v) { return 1 / (1 + std::exp(-v)); }

// The new (c, m) of a batch of rows, from the gate equations.
std::pair<std::vector<double>, std::vector<double>> reference_step(const LSTMCell::HParams& hp, const Tree& params,
                                                                   const Array& x, const Array& c, const Array& m) {
  const int64_t in = hp.num_input_nodes, n = hp.num_output_nodes, rows = x.size() / in;
  std::vector<double> w = params["w"].leaf().to_vector<double>(), b = params["b"].leaf().to_vector<double>();
  std::vector<double> xv = x.to_vector<double>(), cv = c.to_vector<double>(), mv = m.to_vector<double>();
  std::vector<double> new_c, new_m;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> xm(xv.begin() + r * in, xv.begin() + (r + 1) * in);
    xm.insert(xm.end(), mv.begin() + r * n, mv.begin() + (r + 1) * n);
    std::vector<double> g(size_t(4 * n));
    for (int64_t j = 0; j < 4 * n; ++j) {
      g[size_t(j)] = b[size_t(j)];
      for (size_t k = 0; k < xm.size(); ++k) g[size_t(j)] += xm[k] * w[k * size_t(4 * n) + size_t(j)];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double i_i = g[size_t(j)], i_g = g[size_t(n + j)], f_g = g[size_t(2 * n + j)], o_g = g[size_t(3 * n + j)];
      double cc = sig(f_g + hp.forget_gate_bias) * cv[size_t(r * n + j)] + sig(i_g) * std::tanh(i_i);
      if (hp.cell_value_cap) cc = std::clamp(cc, -*hp.cell_value_cap, *hp.cell_value_cap);
      new_c.push_back(cc);
      new_m.push_back(sig(o_g) * (hp.output_nonlinearity ? std::tanh(cc) : cc));
    }
  }
  return {new_c, new_m};
}

LSTMCell::HParams cell_hparams(int64_t in, int64_t out) {
  LSTMCell::HParams hp;
  hp.num_input_nodes = in;
  hp.num_output_nodes = out;
  hp.dtype = hp.fprop_dtype = DType::f64;
  return hp;
}

Tree random_state(const Shape& shape, uint32_t seed) {
  return Tree::dict({{"c", testing::random_array(shape, DType::f64, seed, -2, 2)},
                     {"m", testing::random_array(shape, DType::f64, seed + 1)}});
}

TEST(LSTMCell, MatchesGateEquations) {
  for (int variant = 0; variant < 3; ++variant) {
    LSTMCell::HParams hp = cell_hparams(4, 5);
    if (variant == 1) {
      hp.forget_gate_bias = 1.0;
      hp.cell_value_cap = 0.6;  // clips: |c| reaches 2 in the random state
    }
    if (variant == 2) {
      hp.cell_value_cap = std::nullopt;
      hp.output_nonlinearity = false;
    }
    auto cell = build<LSTMCell>(hp);
    Tree vars = init(*cell, random::key(0));
    EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/w", "params/b"}));
    EXPECT_EQ(vars.at_path("params/w").leaf().shape(), (Shape{9, 20}));
    EXPECT_TRUE(all_close(vars.at_path("params/b").leaf(), std::vector<double>(20, 0.0), 0, 0));
    vars["params"]["b"] = testing::random_array({20}, DType::f64, 3);
    Tree state = random_state({3, 5}, 4);
    Array x = testing::random_array({3, 4}, DType::f64, 6, -2, 2);
    auto [want_c, want_m] = reference_step(hp, vars["params"], x, state["c"].leaf(), state["m"].leaf());
    Tree next = apply(*cell, vars, state, x).output;
    EXPECT_TRUE(all_close(next["c"].leaf(), want_c, 1e-12, 1e-12)) << "variant " << variant;
    EXPECT_TRUE(all_close(next["m"].leaf(), want_m, 1e-12, 1e-12)) << "variant " << variant;
    // Extra leading axes are batch axes too.
    Tree state3 =
        Tree::dict({{"c", reshape(state["c"].leaf(), {3, 1, 5})}, {"m", reshape(state["m"].leaf(), {3, 1, 5})}});
    Tree next3 = apply(*cell, vars, state3, reshape(x, {3, 1, 4})).output;
    EXPECT_TRUE(all_close(next3["m"].leaf(), want_m, 1e-12, 1e-12));
  }
}

TEST(LSTMCell, InitStatesPaddingsAndMixedPrecision) {
  LSTMCell::HParams hp = cell_hparams(3, 2);
  auto cell = build<LSTMCell>(hp);
  Tree zero = cell->init_states(4);
  EXPECT_EQ(zero["c"].leaf().shape(), (Shape{4, 2}));
  EXPECT_EQ(zero["m"].leaf().dtype(), DType::f64);
  EXPECT_TRUE(all_close(zero["m"].leaf(), std::vector<double>(8, 0.0), 0, 0));
  Tree vars = init(*cell, random::key(1));
  Tree state = random_state({4, 2}, 7);
  Array x = testing::random_array({4, 3}, DType::f64, 8);
  Tree stepped = apply(*cell, vars, state, x).output;
  // Rows 1 and 3 are padded: their state is carried over unchanged.
  for (const Array& pads : {array<double>({0, 1, 0, 1}), array<double>({0, 1, 0, 1}, Shape{4, 1})}) {
    Tree next = apply(*cell, vars, state, x, pads).output;
    for (const char* k : {"c", "m"}) {
      std::vector<double> got = next[k].leaf().to_vector<double>(), a = stepped[k].leaf().to_vector<double>(),
                          old = state[k].leaf().to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], (i / 2) % 2 == 1 ? old[i] : a[i]) << k << i;
    }
  }
  // bf16 compute from f32 weights.
  hp.dtype = DType::f32;
  hp.fprop_dtype = DType::bf16;
  auto cell16 = build<LSTMCell>(hp);
  Tree v32 = init(*cell16, random::key(1));
  Tree s16 = cell16->init_states(4);
  EXPECT_EQ(s16["c"].leaf().dtype(), DType::bf16);
  Tree next16 = apply(*cell16, v32, s16, x.astype(DType::f32)).output;
  EXPECT_EQ(next16["m"].leaf().dtype(), DType::bf16);
  Tree v64 = Tree::dict({{"params", Tree::dict({{"w", v32.at_path("params/w").leaf().astype(DType::f64)},
                                                {"b", v32.at_path("params/b").leaf().astype(DType::f64)}})}});
  Tree next64 = apply(*cell, v64, cell->init_states(4), x).output;
  EXPECT_TRUE(all_close(next16["m"].leaf(), next64["m"].leaf(), 2e-2, 2e-2));
}

TEST(LSTMCell, Gradients) {
  LSTMCell::HParams hp = cell_hparams(3, 4);
  hp.forget_gate_bias = 0.5;
  hp.cell_value_cap = std::nullopt;  // clip is not differentiable at the cap
  auto cell = build<LSTMCell>(hp);
  Tree vars = init(*cell, random::key(2));
  vars["params"]["b"] = testing::random_array({16}, DType::f64, 3);
  Tree state = random_state({2, 4}, 5);
  Array x = testing::random_array({2, 3}, DType::f64, 6);
  EXPECT_TRUE(testing::check_layer_vjp(*cell, vars, {x, state["c"].leaf(), state["m"].leaf()},
                                       [](const LSTMCell& l, const std::vector<Array>& in) {
                                         Tree next = l.fprop(Tree::dict({{"c", in[1]}, {"m", in[2]}}), in[0]);
                                         return concatenate({next["c"].leaf(), next["m"].leaf()}, -1);
                                       }));
}

TEST(LSTMCell, ScanUnderGradAndJitEqualsAnUnrolledLoop) {
  LSTMCell::HParams hp = cell_hparams(3, 4);
  hp.forget_gate_bias = 1.0;
  auto cell = build<LSTMCell>(hp);
  Tree vars = init(*cell, random::key(3));
  const int64_t steps = 6, batch = 2;
  Array xs = testing::random_array({steps, batch, 3}, DType::f64, 7, -2, 2);  // (T, B, in)
  Array target = testing::random_array({steps, batch, 4}, DType::f64, 8);
  // (loss, last state) over the sequence, with scan or with a C++ loop.
  auto scanned = [&](const Tree& params, const Array& seq) {
    Tree v = Tree::dict({{"params", params}});
    return apply_with(*cell, v,
                      [&](const LSTMCell& l) {
                        auto [last, ms] = scan(
                            [&](const Tree& s, const Array& x) {
                              Tree next = l.fprop(s, x);
                              return std::make_pair(next, next["m"].leaf());
                            },
                            l.init_states(batch), seq);
                        return std::make_pair(sum(ms * target), last);
                      })
        .output;
  };
  auto unrolled = [&](const Tree& params, const Array& seq) {
    Tree v = Tree::dict({{"params", params}});
    return apply_with(*cell, v,
                      [&](const LSTMCell& l) {
                        Tree s = l.init_states(batch);
                        Array loss = zeros({}, DType::f64);
                        for (int64_t t = 0; t < steps; ++t) {
                          s = l.fprop(s, reshape(slice_along(seq, 0, t, t + 1), {batch, 3}));
                          loss = loss + sum(s["m"].leaf() * reshape(slice_along(target, 0, t, t + 1), {batch, 4}));
                        }
                        return std::make_pair(loss, s);
                      })
        .output;
  };
  auto [loss, last] = jit(scanned)(vars["params"], xs);
  auto [loss_want, last_want] = unrolled(vars["params"], xs);
  EXPECT_TRUE(all_close(loss, loss_want, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(last["c"].leaf(), last_want["c"].leaf(), 1e-12, 1e-12));
  auto scan_loss = [&](const Tree& p, const Array& seq) { return scanned(p, seq).first; };
  auto loop_loss = [&](const Tree& p, const Array& seq) { return unrolled(p, seq).first; };
  auto [gp, gx] = jit(grad<0, 1>(scan_loss))(vars["params"], xs);
  auto [gp_want, gx_want] = grad<0, 1>(loop_loss)(vars["params"], xs);
  EXPECT_TRUE(all_close(gp["w"].leaf(), gp_want["w"].leaf(), 1e-10, 1e-12));
  EXPECT_TRUE(all_close(gp["b"].leaf(), gp_want["b"].leaf(), 1e-10, 1e-12));
  EXPECT_TRUE(all_close(gx, gx_want, 1e-10, 1e-12));
  // Eager grad of the scan agrees too.
  EXPECT_TRUE(all_close(grad(scan_loss)(vars["params"], xs)["w"].leaf(), gp_want["w"].leaf(), 1e-10, 1e-12));
}

TEST(LSTMCell, Errors) {
  LSTMCell::HParams hp;
  EXPECT_PAX_ERROR(build<LSTMCell>(hp), "LSTMCell '': num_input_nodes and num_output_nodes must be > 0, got 0 and 0");
  hp.num_input_nodes = 3;
  hp.num_output_nodes = 2;
  hp.cell_value_cap = 0.0;
  EXPECT_PAX_ERROR(build<LSTMCell>(hp), "cell_value_cap must be > 0, got 0");
  hp.cell_value_cap = 5.0;
  auto cell = build<LSTMCell>(hp);
  Tree vars = init(*cell, random::key(0));
  Tree state = cell->init_states(2);
  EXPECT_PAX_ERROR(apply(*cell, vars, state, ones({2, 4})),
                   "LSTMCell '': inputs f32[2,4] must be floating and end in num_input_nodes = 3");
  EXPECT_PAX_ERROR(apply(*cell, vars, state, ones({2, 3}, DType::i32)), "must be floating");
  EXPECT_PAX_ERROR(apply(*cell, vars, state, ones({3, 3})),
                   "state c f32[2,2] and m f32[2,2] must both be (3, 2) for inputs f32[3,3]");
  EXPECT_PAX_ERROR(apply(*cell, vars, Tree::dict({{"c", ones({2, 2})}}), ones({2, 3})),
                   "state must be a dict {c, m} of arrays (see init_states)");
  EXPECT_PAX_ERROR(apply(*cell, vars, state, ones({2, 3}), ones({2, 2})),
                   "paddings f32[2,2] must be (2,) or (2, 1) for inputs f32[2,3]");
  EXPECT_PAX_ERROR(cell->init_states(-1), "init_states batch_size must be >= 0, got -1");
}

}  // namespace
}  // namespace pax::nn

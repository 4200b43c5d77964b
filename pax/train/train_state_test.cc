// Tests for TrainState: creation, gradient steps against hand values (SGD with
// momentum written here), a jitted train step taking and returning TrainState
// against the eager one, extra collections, the tree form and its errors.
#include "pax/train/train_state.h"

#include <gtest/gtest.h>

#include <vector>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/optim/aliases.h"
#include "pax/optim/schedules.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

using optim::GradientTransformation;
using optim::ScalarOrSchedule;
using pax::testing::all_close;

// SGD with heavy-ball momentum: trace = beta * trace + g; update = -lr(count) * trace.
GradientTransformation momentum_sgd(ScalarOrSchedule learning_rate, double beta) {
  GradientTransformation tx;
  tx.init = [](const Tree& params) {
    return Tree::dict({{"count", scalar<int32_t>(0)}, {"trace", tree_map(zeros_like, params)}});
  };
  tx.update = [learning_rate, beta](const Tree& grads, const Tree& state, const Tree&) {
    Tree trace = tree_map([beta](const Array& t, const Array& g) { return t * beta + g; }, state["trace"], grads);
    Array count = state["count"].leaf();
    Array rate = learning_rate(count);
    Tree updates = tree_map([rate](const Array& t) { return -(t * rate); }, trace);
    return std::make_pair(updates, Tree::dict({{"count", count + 1}, {"trace", trace}}));
  };
  return tx;
}

Tree make_params() { return Tree::dict({{"w", array<float>({1.0f, -2.0f, 0.5f})}, {"b", scalar<float>(0.25f)}}); }

// Mean squared error of a linear model.
Array loss(const Tree& params, const Array& x, const Array& y) {
  Array pred = matmul(x, params["w"].leaf()) + params["b"].leaf();
  return mean(square(pred - y));
}

// replace swaps the named fields and keeps the others; a state rebuilt from
// its tree (as jit returns it) holds no optimizer and says how to pass one.
TEST(TrainState, ReplaceAndStaticFields) {
  const Tree params = Tree::dict({{"w", array<float>({1, 2})}});
  const TrainState state = TrainState::create(params, optim::sgd(0.5));
  const TrainState other = state.replace({.params = Tree::dict({{"w", array<float>({3, 4})}})});
  EXPECT_TRUE(all_close(other.params["w"].leaf(), std::vector<double>{3, 4}));
  EXPECT_TRUE(all_close(state.params["w"].leaf(), std::vector<double>{1, 2}));
  EXPECT_EQ(other.step.item<int32_t>(), 0);
  const Tree g = Tree::dict({{"w", array<float>({1, 1})}});
  EXPECT_TRUE(all_close(other.apply_gradients(g).params["w"].leaf(), std::vector<double>{2.5, 3.5}));
  const TrainState rebuilt = TrainState::from_tree(state.to_tree());
  EXPECT_PAX_ERROR(rebuilt.apply_gradients(g), "the state holds no optimizer");
  EXPECT_TRUE(all_close(rebuilt.replace({.tx = optim::sgd(1.0)}).apply_gradients(g).params["w"].leaf(),
                        std::vector<double>{0, 1}));
  EXPECT_PAX_ERROR(TrainState::create(ApplyFn(), params, optim::sgd(0.5)), "apply_fn is empty");
  // apply_fn travels with the state through apply_gradients and replace.
  const ApplyFn twice = [](const Tree& v, const Tree& x) { return Tree(x.leaf() * v["params"]["w"].leaf()); };
  const TrainState with_fn = TrainState::create(twice, params, optim::sgd(0.5)).apply_gradients(g);
  EXPECT_TRUE(all_close(with_fn.apply_fn(Tree::dict({{"params", with_fn.params}}), Tree(array<float>({2, 2}))).leaf(),
                        std::vector<double>{1, 3}));
  EXPECT_TRUE(bool(with_fn.replace({.step = scalar<int32_t>(7)}).apply_fn));
}

TEST(TrainState, Create) {
  GradientTransformation tx = momentum_sgd(0.1, 0.9);
  TrainState s = TrainState::create(make_params(), tx);
  EXPECT_EQ(s.step.dtype(), DType::i32);
  EXPECT_EQ(s.step.ndim(), 0);
  EXPECT_EQ(s.step.item<int32_t>(), 0);
  EXPECT_EQ(tree_structure_diff(s.opt_state, tx.init(make_params())), "");
  EXPECT_TRUE(all_close(s.opt_state["trace"]["w"].leaf(), std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(s.extra.is_none());
  TrainState with_extra = TrainState::create(make_params(), tx, Tree::dict({{"batch_stats", zeros({2})}}));
  EXPECT_EQ(with_extra.extra.str(), "{'batch_stats': f32[2]}");
}

TEST(TrainState, ApplyGradientsMatchesHandValues) {
  GradientTransformation tx = momentum_sgd(0.1, 0.9);
  TrainState s0 = TrainState::create(make_params(), tx);
  Tree grads = Tree::dict({{"w", array<float>({1.0f, 2.0f, -4.0f})}, {"b", scalar<float>(0.5f)}});
  TrainState s1 = s0.apply_gradients(tx, grads);
  TrainState s2 = s1.apply_gradients(tx, grads);
  EXPECT_EQ(s1.step.item<int32_t>(), 1);
  EXPECT_EQ(s2.step.item<int32_t>(), 2);
  EXPECT_EQ(s2.step.dtype(), DType::i32);
  // Step 1: p - 0.1 g. Step 2: trace = 0.9 g + g, p - 0.1 * 1.9 g.
  std::vector<double> w0{1, -2, 0.5}, g{1, 2, -4}, w1, w2;
  for (size_t i = 0; i < 3; ++i) {
    w1.push_back(w0[i] - 0.1 * g[i]);
    w2.push_back(w1.back() - 0.1 * 1.9 * g[i]);
  }
  EXPECT_TRUE(all_close(s1.params["w"].leaf(), w1));
  EXPECT_TRUE(all_close(s2.params["w"].leaf(), w2));
  EXPECT_TRUE(all_close(s2.params["b"].leaf(), std::vector<double>{0.25 - 0.05 - 0.095}));
  EXPECT_EQ(s2.opt_state["count"].leaf().item<int32_t>(), 2);
  // The state is a value: s0 is unchanged.
  EXPECT_EQ(s0.step.item<int32_t>(), 0);
  EXPECT_TRUE(all_close(s0.params["w"].leaf(), w0));
}

TEST(TrainState, JittedTrainStepEqualsEager) {
  // A scheduled learning rate: the optimizer's count is traced inside jit.
  GradientTransformation tx = momentum_sgd(optim::linear_schedule(0.2, 0.05, 4), 0.5);
  Array x = pax::testing::random_array({8, 3}, DType::f32, 1);
  Array y = pax::testing::random_array({8}, DType::f32, 2);
  auto step_fn = [&tx](const TrainState& s, const Array& xb, const Array& yb) {
    Tree grads = pax::grad(loss)(s.params, xb, yb);
    return s.apply_gradients(tx, grads);
  };
  auto jitted = pax::jit(step_fn);
  TrainState eager = TrainState::create(make_params(), tx);
  TrainState traced = eager;
  double first_loss = loss(eager.params, x, y).item<double>();
  for (int i = 0; i < 6; ++i) {
    eager = step_fn(eager, x, y);
    traced = jitted(traced, x, y);
    EXPECT_EQ(traced.step.item<int32_t>(), i + 1);
    EXPECT_EQ(traced.step.dtype(), DType::i32);
  }
  EXPECT_EQ(jitted.num_traces(), 1u);
  EXPECT_EQ(eager.step.item<int32_t>(), 6);
  for (const char* key : {"w", "b"}) {
    EXPECT_TRUE(all_close(traced.params[key].leaf(), eager.params[key].leaf(), 1e-5, 1e-6)) << key;
    EXPECT_TRUE(all_close(traced.opt_state["trace"][key].leaf(), eager.opt_state["trace"][key].leaf(), 1e-5, 1e-6));
  }
  EXPECT_EQ(traced.opt_state["count"].leaf().item<int32_t>(), 6);
  EXPECT_LT(loss(traced.params, x, y).item<double>(), first_loss);

  // With the state donated, as a training loop runs it.
  auto donating = pax::jit(step_fn, {.donate_argnums = {0}});
  TrainState donated = TrainState::create(make_params(), tx);
  for (int i = 0; i < 6; ++i) donated = donating(std::move(donated), x, y);
  EXPECT_EQ(donated.step.item<int32_t>(), 6);
  EXPECT_TRUE(all_close(donated.params["w"].leaf(), eager.params["w"].leaf(), 1e-5, 1e-6));
}

TEST(TrainState, ExtraCollectionsThroughJit) {
  GradientTransformation tx = momentum_sgd(0.1, 0.0);
  Tree extra = Tree::dict({{"batch_stats", Tree::dict({{"mean", zeros({3})}})}});
  TrainState s = TrainState::create(make_params(), tx, extra);
  Array x = pax::testing::random_array({4, 3}, DType::f32, 3);
  Array y = zeros({4});
  // A running mean of the inputs, kept beside the parameters as BatchNorm does.
  auto jitted = pax::jit([&tx](const TrainState& st, const Array& xb, const Array& yb) {
    Tree grads = pax::grad(loss)(st.params, xb, yb);
    Array m = st.extra["batch_stats"]["mean"].leaf() * 0.5 + mean(xb, 0) * 0.5;
    return st.apply_gradients(tx, grads, Tree::dict({{"batch_stats", Tree::dict({{"mean", m}})}}));
  });
  TrainState s1 = jitted(s, x, y);
  std::vector<double> xs = x.to_vector<double>(), want(3, 0.0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) want[size_t(c)] += 0.5 * xs[size_t(r * 3 + c)] / 4;
  EXPECT_TRUE(all_close(s1.extra["batch_stats"]["mean"].leaf(), want, 1e-5, 1e-6));
  // Without new_extra the collections are kept as they are.
  TrainState s2 = s1.apply_gradients(tx, pax::grad(loss)(s1.params, x, y));
  EXPECT_TRUE(all_close(s2.extra["batch_stats"]["mean"].leaf(), want, 1e-5, 1e-6));
  // A state with no extra (None) also passes through jit.
  TrainState plain = TrainState::create(make_params(), tx);
  auto identity = pax::jit([](const TrainState& st) { return st; });
  EXPECT_TRUE(identity(plain).extra.is_none());
}

TEST(TrainState, TreeForm) {
  GradientTransformation tx = momentum_sgd(0.1, 0.9);
  TrainState s = TrainState::create(make_params(), tx);
  Tree t = to_tree(s);
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"step", "params", "opt_state", "extra"}));
  TrainState back = from_tree<TrainState>(t);
  EXPECT_EQ(back.step.item<int32_t>(), 0);
  EXPECT_EQ(tree_structure_diff(back.params, s.params), "");
  EXPECT_EQ(tree_structure_diff(back.opt_state, s.opt_state), "");
  // The state is usable as a non-differentiated argument of grad.
  auto g = pax::grad([](const Tree& params, const TrainState& st) {
    return sum(params["w"].leaf() * st.params["w"].leaf());
  })(s.params, s);
  EXPECT_TRUE(all_close(g["w"].leaf(), std::vector<double>{1, -2, 0.5}));
  // ... and comes back as the auxiliary output of grad.
  auto [grads, next] = pax::grad(
      [&tx](const Tree& params, const TrainState& st) {
        Array l = sum(square(params["w"].leaf()));
        return std::make_pair(l, st.apply_gradients(tx, tree_map(zeros_like, st.params)));
      },
      pax::has_aux)(s.params, s);
  EXPECT_TRUE(all_close(grads["w"].leaf(), std::vector<double>{2, -4, 1}));
  EXPECT_EQ(next.step.item<int32_t>(), 1);

  Tree missing = Tree::dict({{"step", scalar<int32_t>(0)}, {"params", make_params()}});
  EXPECT_PAX_ERROR(TrainState::from_tree(missing), "expected a dict with keys {step, params, opt_state, extra}");
  Tree bad_step = t;
  bad_step.set("step", Tree::list({}));
  EXPECT_PAX_ERROR(TrainState::from_tree(bad_step), "'step' must be a scalar array");
  EXPECT_PAX_ERROR(TrainState::from_tree(Tree(scalar<int32_t>(0))), "TrainState::from_tree");
}

TEST(TrainState, StructureErrors) {
  GradientTransformation tx = momentum_sgd(0.1, 0.9);
  TrainState s = TrainState::create(make_params(), tx);
  Tree missing_b = Tree::dict({{"w", zeros({3})}});
  EXPECT_PAX_ERROR(s.apply_gradients(tx, missing_b), "TrainState::apply_gradients: grads must have the structure");
  EXPECT_PAX_ERROR(s.apply_gradients(tx, missing_b), "missing 'b'");
  Tree renamed = Tree::dict({{"w", zeros({3})}, {"bias", zeros({})}});
  EXPECT_PAX_ERROR(s.apply_gradients(tx, renamed), "unexpected 'bias'");
  Tree wrong_shape = Tree::dict({{"w", zeros({4})}, {"b", zeros({})}});
  EXPECT_PAX_ERROR(s.apply_gradients(tx, wrong_shape), "at w the parameter is f32[3] but the gradient is f32[4]");
  GradientTransformation broken;
  EXPECT_PAX_ERROR(TrainState::create(make_params(), broken), "TrainState::create: the GradientTransformation has no");
  EXPECT_PAX_ERROR(s.apply_gradients(broken, make_params()), "TrainState::apply_gradients: the Gradient");
  EXPECT_PAX_ERROR(TrainState().apply_gradients(tx, make_params()), "the state has no step");
}

}  // namespace
}  // namespace pax::train

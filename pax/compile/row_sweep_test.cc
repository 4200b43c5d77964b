// Row sweeps: which loops run one tile of rows at a time, and that their
// results have the bits of eager execution (softmax forward and backward,
// a log-softmax cross-entropy whose max is a reduction step of its own and
// whose loops are separated by steps that move around the sweep; rows that
// are not a multiple of a tile; sweep-local values; views that broadcast a
// row value along another axis, which end a sweep); a softmax backward that
// reads the stored probabilities; the cross entropy loss's exponentials
// computed once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/compile/row_sweep.h"
#include "pax/nn/losses.h"
#include "pax/ops/lax.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::random_array;

// Equal bits, a NaN matching any NaN.
::testing::AssertionResult same_bits(const Array& got, const Array& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got.aval().str() << ", want " << want.aval().str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::memcmp(&g[i], &w[i], sizeof(double)) == 0 || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << w[i];
  }
  return ::testing::AssertionSuccess();
}

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

int sweeps_in(const std::string& program) { return count_of(program, "# row sweep"); }

// Compiles `jaxpr`, expects `sweeps` row sweeps in its schedule, and
// compares every output with eager evaluation, bit for bit.
void check(const JaxprPtr& jaxpr, const std::vector<Array>& args, int sweeps) {
  auto exe = compile(jaxpr);
  EXPECT_EQ(sweeps_in(exe->str()), sweeps) << exe->str();
  const std::vector<Array> want = eval_jaxpr(*jaxpr, args), got = exe->run(args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(same_bits(got[i], want[i])) << "output " << i << "\n" << exe->str();
}

// Masked softmax over the last axis, its probabilities and the gradient of
// a weighted sum of them.
std::pair<Array, Array> masked_softmax_and_grad(const Array& x, const Array& mask, const Array& g) {
  auto probs = [&](const Array& l) { return nn::softmax(where(mask, l, full_like(l, -1e30)), -1); };
  auto [p, back] = vjp(probs, x);
  return {p, back(g)};
}

// A softmax whose backward uses its output alone (as attention's does): the
// probabilities are an output, stored anyway, and the backward reads them
// rather than dividing the exponentials by their sums a second time.
TEST(RowSweep, SoftmaxBackwardReadsTheStoredProbabilities) {
  const auto probs = custom_vjp([](const Array& l) { return nn::softmax(l, -1); },
                                [](const Array& l) {
                                  Array p = nn::softmax(l, -1);
                                  return std::make_pair(p, p);
                                },
                                [](const Array& p, const Array& g) {
                                  const Array gp = g * p;
                                  return gp - p * sum(gp, {-1}, true);
                                });
  auto f = [&](const Array& x, const Array& g) {
    auto [p, back] = vjp(probs, x);
    return std::make_pair(p, back(g));
  };
  Array x = random_array({67, 256}, DType::f32, 7, -4, 4), g = random_array({67, 256}, DType::f32, 9);
  auto jaxpr = make_jaxpr(f)(x, g);
  EXPECT_EQ(count_of(compile(jaxpr)->str(), " = div "), 1) << compile(jaxpr)->str();
  check(jaxpr, {x, g}, 1);
}

TEST(RowSweep, SoftmaxForwardAndBackwardAreOneSweepWithEagerBits) {
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{3, 37}, {67, 256}, {5, 1000}, {130, 64}}) {
    Array x = random_array({rows, len}, DType::f32, 1, -4, 4);
    Array mask = random_array({1, len}, DType::f32, 2) > -0.5;
    Array g = random_array({rows, len}, DType::f32, 3);
    auto jaxpr = make_jaxpr(masked_softmax_and_grad)(x, mask, g);
    check(jaxpr, {x, mask, g}, 1);
  }
}

TEST(RowSweep, CrossEntropyTakesItsMaxStepAndMovesOtherStepsAside) {
  // The max of the logits is a reduction step; the loss's gather and mean
  // sit between the forward's loops and the gradient's loop in the program.
  auto loss = [](const Array& logits, const Array& labels) {
    const Array lp = nn::log_softmax(logits, -1);
    return -mean(squeeze(take_along_axis(lp, expand_dims(labels, {-1}), -1), {-1}));
  };
  Array logits = random_array({2, 9, 700}, DType::f32, 4, -6, 6);
  Array labels = random_array({2, 9}, DType::i32, 5, 0, 699);
  auto jaxpr = make_jaxpr(value_and_grad<0>(loss))(logits, labels);
  auto exe = compile(jaxpr);
  ASSERT_EQ(sweeps_in(exe->str()), 1) << exe->str();
  // The sweep starts at the max and ends at the gradient's loop.
  const std::string s = exe->str();
  const size_t at = s.find("# row sweep");
  EXPECT_NE(s.find("reduce_max", at), std::string::npos);
  EXPECT_LT(s.find("reduce_max", at), s.find("fusion[", at)) << s;
  check(jaxpr, {logits, labels}, 1);
}

// nn::softmax_cross_entropy_with_integer_labels: its gradient computes
// exp(logits - max) as the loss does, so the program has one exp, kept inside
// the sweep from the max to the gradient.
TEST(RowSweep, CrossEntropyLossComputesItsExponentialsOnce) {
  auto loss = [](const Array& logits, const Array& labels) {
    return mean(nn::softmax_cross_entropy_with_integer_labels(logits, labels));
  };
  Array logits = random_array({2, 9, 700}, DType::f32, 10, -6, 6);
  Array labels = random_array({2, 9}, DType::i32, 11, 0, 699);
  auto jaxpr = make_jaxpr(value_and_grad<0>(loss))(logits, labels);
  const std::string s = compile(jaxpr)->str();
  EXPECT_EQ(count_of(s, " = exp "), 1) << s;
  check(jaxpr, {logits, labels}, 1);
}

TEST(RowSweep, ARowValueBroadcastAlongAnotherAxisEndsTheSweep) {
  // m holds one value per row; y reads it by column (a square matrix, so the
  // sizes agree): y cannot run a tile of rows at a time.
  auto f = [](const Array& x) {
    Array m = max(x, {1});                   // (n,)
    Array e = exp(x - expand_dims(m, {1}));  // rows
    Array y = e / sum(e, {1}, true);         // rows: joins
    Array z = y * expand_dims(m, {0});       // m along the columns: does not
    return std::make_pair(y, sum(z, {1}));
  };
  Array x = random_array({96, 96}, DType::f32, 6, -3, 3);
  check(make_jaxpr(f)(x), {x}, 1);
}

TEST(RowSweep, RowBroadcastViews) {
  // (rows = 6, row_len = 20): element (r, l) at r.
  EXPECT_TRUE(is_row_broadcast({6, 20}, {1, 0}, 6, 20));
  EXPECT_TRUE(is_row_broadcast({2, 3, 4, 5}, {3, 1, 0, 0}, 6, 20));
  EXPECT_TRUE(is_row_broadcast({2, 1, 3, 20}, {3, 7, 1, 0}, 6, 20));
  EXPECT_FALSE(is_row_broadcast({6, 20}, {0, 1}, 6, 20));        // along the row
  EXPECT_FALSE(is_row_broadcast({6, 20}, {2, 0}, 6, 20));        // every other element
  EXPECT_FALSE(is_row_broadcast({3, 40}, {1, 0}, 6, 20));        // rows of 40
  EXPECT_FALSE(is_row_broadcast({2, 3, 20}, {1, 2, 0}, 6, 20));  // rows transposed
}

}  // namespace
}  // namespace pax

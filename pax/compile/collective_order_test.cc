// The order of collectives in a compiled schedule (collective_order.h): a
// reduction starts once its operand exists, ahead of independent work, and
// an all_gather is fetched one use ahead, never more. One process: the
// collectives return their inputs, so the results also check that the
// reordered program computes the same values.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

// The schedule's lines that name `what`, by position: the i-th line holding
// it is at result[i].
std::vector<int> lines_with(const std::string& schedule, const std::string& what) {
  std::istringstream in(schedule);
  std::vector<int> at;
  std::string line;
  for (int i = 0; std::getline(in, line); ++i)
    if (line.find(what) != std::string::npos) at.push_back(i);
  return at;
}

TEST(CollectiveOrder, AReductionStartsBeforeIndependentWork) {
  auto f = [](const Array& x, const Array& w) {
    Array h = tanh(matmul(x, w));                         // [64, 64], independent of the psum
    Array s = lax::psum(sum(x, {0}) * 3.0, "processes");  // [64]
    return h + s;
  };
  Array x = random_array({64, 64}, DType::f32, 1), w = random_array({64, 64}, DType::f32, 2);
  auto exe = compile(make_jaxpr(f)(x, w));
  const std::string s = exe->str();
  const std::vector<int> psum = lines_with(s, "psum"), dot = lines_with(s, "dot_general");
  ASSERT_EQ(psum.size(), 1u) << s;
  ASSERT_EQ(dot.size(), 1u) << s;
  EXPECT_LT(psum[0], dot[0]) << s;
  EXPECT_TRUE(all_close(exe->run({x, w})[0], f(x, w), 1e-6, 1e-6));
}

TEST(CollectiveOrder, TheGradientReductionOverlapsTheRestOfTheBackwardPass) {
  // Two layers: the last layer's gradient exists before the first layer's
  // backward product, so its psum starts ahead of that product.
  auto loss = [](const Array& w1, const Array& w2, const Array& x) {
    return sum(square(matmul(tanh(matmul(x, w1)), w2)));
  };
  auto step = [&](const Array& w1, const Array& w2, const Array& x) {
    auto [g1, g2] = grad<0, 1>(loss)(w1, w2, x);
    return std::make_pair(lax::psum(g1, "processes"), lax::psum(g2, "processes"));
  };
  Array w1 = random_array({32, 48}, DType::f32, 3), w2 = random_array({48, 16}, DType::f32, 4);
  Array x = random_array({8, 32}, DType::f32, 5);
  auto exe = compile(make_jaxpr(step)(w1, w2, x));
  const std::string s = exe->str();
  const std::vector<int> psum = lines_with(s, "psum"), dot = lines_with(s, "dot_general");
  ASSERT_EQ(psum.size(), 2u) << s;
  // The psum of w2's gradient comes before the last product (w1's gradient).
  EXPECT_LT(psum[0], dot.back()) << s;
  auto [g1, g2] = step(w1, w2, x);
  std::vector<Array> got = exe->run({w1, w2, x});
  EXPECT_TRUE(all_close(got[0], g1, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[1], g2, 1e-5, 1e-5));
}

TEST(CollectiveOrder, AnAllGatherIsFetchedOneUseAhead) {
  // Three layers whose weights are gathered before use.
  auto f = [](const Array& x, const Array& w1, const Array& w2, const Array& w3) {
    Array y = x;
    for (const Array* w : {&w1, &w2, &w3}) y = tanh(matmul(y, lax::all_gather(*w, "processes", 0, true)));
    return y;
  };
  Array x = random_array({8, 16}, DType::f32, 6);
  Array w1 = random_array({16, 16}, DType::f32, 7), w2 = random_array({16, 16}, DType::f32, 8),
        w3 = random_array({16, 16}, DType::f32, 9);
  auto exe = compile(make_jaxpr(f)(x, w1, w2, w3));
  const std::string s = exe->str();
  const std::vector<int> gather = lines_with(s, "all_gather"), dot = lines_with(s, "dot_general");
  ASSERT_EQ(gather.size(), 3u) << s;
  ASSERT_EQ(dot.size(), 3u) << s;
  // Layer k + 1's weights are fetched before layer k's product ...
  EXPECT_LT(gather[1], dot[0]) << s;
  EXPECT_LT(gather[2], dot[1]) << s;
  // ... and not earlier: at most two gathered weights wait for use.
  EXPECT_GT(gather[2], dot[0]) << s;
  EXPECT_TRUE(all_close(exe->run({x, w1, w2, w3})[0], f(x, w1, w2, w3), 1e-6, 1e-6));
}

}  // namespace
}  // namespace pax

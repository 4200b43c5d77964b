// partial_eval_by_shape: outputs that depend on no input come back concrete
// (equal to eager evaluation), the others as shapes; nothing that depends on
// an input is computed or allocated; it composes with grad and jit.
#include "pax/api/partial_eval.h"

#include <gtest/gtest.h>

#include <sstream>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/core/buffer.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;

std::string printed(const Array& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

TEST(PartialEvalByShape, InitByShapeGivesConcreteParamsAndOutputShapes) {
  // flax's init_by_shape: parameters from a key, no input data.
  const Array key = random::key(0);
  auto model = [&](const std::vector<Array>& in) {
    Array w = random::normal(key, {3, 4});
    Array b = zeros({4}) + 0.5;
    return Tree::dict({{"params", Tree::dict({{"w", w}, {"b", b}})}, {"out", matmul(in[0], w) + b}});
  };
  const Tree r = partial_eval_by_shape(model, {{{2, 3}}});
  ASSERT_TRUE(r["params"]["w"].leaf().is_concrete());
  EXPECT_EQ(r["params"]["w"].leaf().to_vector<float>(), random::normal(key, {3, 4}).to_vector<float>());
  EXPECT_TRUE(all_close(r["params"]["b"].leaf(), std::vector<double>(4, 0.5)));
  const Array out = r["out"].leaf();
  EXPECT_FALSE(out.is_concrete());
  EXPECT_EQ(printed(out), "ShapeDtypeStruct(shape=(2, 4), dtype=float32)");
}

TEST(PartialEvalByShape, EachOutputKnownOrNot) {
  auto fn = [](const std::vector<Array>& in) {
    Array c = arange(3).astype(DType::f32) * 2.0;  // no input: concrete
    return Tree::list({in[1],                      // an input itself: its shape
                       c, sum(in[0]) + sum(c),     // mixes an input in: a shape
                       in[1].astype(DType::f32)});
  };
  const Tree r = partial_eval_by_shape(fn, {{{5}}, {{2, 2}, DType::i32}});
  EXPECT_EQ(printed(r[0].leaf()), "ShapeDtypeStruct(shape=(2, 2), dtype=int32)");
  ASSERT_TRUE(r[1].leaf().is_concrete());
  EXPECT_TRUE(all_close(r[1].leaf(), {0, 2, 4}));
  EXPECT_EQ(printed(r[2].leaf()), "ShapeDtypeStruct(shape=(), dtype=float32)");
  EXPECT_EQ(printed(r[3].leaf()), "ShapeDtypeStruct(shape=(2, 2), dtype=float32)");
  EXPECT_PAX_ERROR(r[0].leaf() + 1, "eval_shape");
}

TEST(PartialEvalByShape, NothingThatDependsOnAnInputIsComputed) {
  // A 4 GB input and a product of it: never allocated.
  const size_t before = host_allocator_stats().bytes_in_use;
  const Tree r = partial_eval_by_shape(
      [](const std::vector<Array>& in) {
        return Tree::dict({{"y", matmul(in[0], ones({10000, 8}))}, {"n", scalar(3.0f) * 2.0}});
      },
      {{{100000, 10000}}});
  EXPECT_LT(host_allocator_stats().bytes_in_use, before + (size_t(1) << 20));
  EXPECT_EQ(r["y"].leaf().shape(), (Shape{100000, 8}));
  EXPECT_EQ(r["n"].leaf().item<float>(), 6.0f);
}

TEST(PartialEvalByShape, ComposesWithGradAndJit) {
  // The known part of a captured tracer stays a tracer of grad: d/dw sum(w*w) = 2w.
  auto f = [](const Array& w) {
    const Tree r = partial_eval_by_shape(
        [&](const std::vector<Array>& in) {
          return Tree::list({sum(w * w), in[0] * w});
        },
        {{{3}}});
    return r[0].leaf();
  };
  const Array w = array<float>({1.0f, -2.0f, 0.5f});
  EXPECT_TRUE(all_close(grad(f)(w), {2.0, -4.0, 1.0}));
  EXPECT_TRUE(all_close(jit(f)(w), {5.25}));
}

}  // namespace
}  // namespace pax

// The vmap interpreter (vmap.h) through jax.vmap's out_axes: None for an
// output that does not depend on the mapped axis, an entry per element or
// per leaf of a tree output, and the errors for a mapped output marked None
// and a wrong number of entries.
#include "pax/interp/vmap.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

// jax.vmap's out_axes: None for an output that does not depend on the
// mapped axis (the Flax state guide's updated batch statistics, averaged
// with pmean), one entry per element of a tuple or dict output, or per leaf.
TEST(Vmap, OutAxesNoneAndPerElement) {
  Array x = testing::random_array({4, 3}, DType::f64, 7);
  auto f = [](const Array& xi) {
    Array mean = lax::pmean(xi, "batch");  // (3,), the same for every member
    return std::make_pair(xi - mean, mean);
  };
  auto [centered, mean] = vmap(f, {.out_axes = {0, std::nullopt}, .axis_name = "batch"})(x);
  EXPECT_EQ(mean.shape(), (Shape{3}));
  EXPECT_TRUE(testing::all_close(mean, pax::mean(x, {0})));
  EXPECT_TRUE(testing::all_close(centered, x - pax::mean(x, {0}, true)));

  // Per element of a (array, dict) output: the dict's leaves all take entry 1.
  auto g = [](const Array& xi) {
    return std::make_pair(xi * 2.0, Tree::dict({{"a", Tree(xi + 1.0)}, {"b", Tree(xi * xi)}}));
  };
  auto [y, d] = vmap(g, {.out_axes = {0, 1}})(x);
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(d["a"].leaf().shape(), (Shape{3, 4}));
  EXPECT_TRUE(testing::all_close(d["b"].leaf(), transpose(x * x)));
  // Per leaf (three leaves), with a negative axis.
  auto [y2, d2] = vmap(g, {.out_axes = {1, -1, 0}})(x);
  EXPECT_EQ(y2.shape(), (Shape{3, 4}));
  EXPECT_EQ(d2["a"].leaf().shape(), (Shape{3, 4}));
  EXPECT_EQ(d2["b"].leaf().shape(), (Shape{4, 3}));
}

TEST(Vmap, OutAxesNoneOnAMappedOutputIsAnError) {
  Array x = testing::random_array({4, 3}, DType::f64, 9);
  auto f = [](const Array& xi) { return std::make_pair(xi * 2.0, xi + 1.0); };
  EXPECT_PAX_ERROR(vmap(f, {.out_axes = {0, std::nullopt}})(x),
                   "output 1 f64[3] has out_axes None but depends on the mapped axis");
  EXPECT_PAX_ERROR(vmap(f, {.out_axes = {0, 1, 0}})(x), "out_axes has 3 entries but the output");
}

}  // namespace
}  // namespace pax

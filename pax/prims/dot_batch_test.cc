// vmap of dot_general against a loop over the batch: contracting and batch
// dimensions in various places, only lhs / only rhs / both batched with the
// batch axis first, in the middle and last, nested vmap, bf16, and no copies
// when one operand is batched.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/ir/jaxpr.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using namespace testing;  // ArrayFn, Axis, check_vmap, random_array

struct DotCase {
  const char* name;
  Shape lhs, rhs;
  lax::DotDimensionNumbers dims;
};

std::vector<DotCase> dot_cases() {
  return {
      {"matmul", {2, 3}, {3, 4}, {{1}, {0}, {}, {}}},
      {"matmul_transposed_rhs", {2, 3}, {4, 3}, {{1}, {1}, {}, {}}},
      {"batched_matmul", {4, 3, 5}, {5, 2, 4}, {{2}, {0}, {0}, {2}}},
      {"two_contracting_dims", {3, 2, 4, 5}, {5, 3, 6, 4}, {{2, 3}, {3, 0}, {0}, {1}}},
      {"inner_product", {5}, {5}, {{0}, {0}, {}, {}}},
      {"outer_product", {3}, {4}, {{}, {}, {}, {}}},
      {"matvec", {3, 4}, {4}, {{1}, {0}, {}, {}}},
  };
}

ArrayFn dot_fn(const lax::DotDimensionNumbers& dims, std::optional<DType> preferred = std::nullopt) {
  return [dims, preferred](const std::vector<Array>& a) { return lax::dot_general(a[0], a[1], dims, preferred); };
}

// Batch axis positions worth testing for an operand of `rank`: none, first,
// middle and last.
std::vector<Axis> positions(int64_t rank) {
  std::vector<Axis> out{std::nullopt, 0};
  if (rank / 2 > 0 && rank / 2 < rank) out.push_back(rank / 2);
  if (rank > 0) out.push_back(rank);
  return out;
}

TEST(DotBatch, EveryBatchAxisPlacement) {
  for (const DotCase& c : dot_cases()) {
    const Array lhs = random_array(c.lhs, DType::f64, 1), rhs = random_array(c.rhs, DType::f64, 2);
    for (Axis la : positions(c.lhs.rank())) {
      for (Axis ra : positions(c.rhs.rank())) {
        if (!la && !ra) continue;
        EXPECT_TRUE(check_vmap(dot_fn(c.dims), {lhs, rhs}, {la, ra}, 3, 1e-12))
            << c.name << " lhs axis " << la.value_or(-1) << " rhs axis " << ra.value_or(-1);
      }
    }
  }
}

TEST(DotBatch, F32AndZeroSizedDimensions) {
  const lax::DotDimensionNumbers mm{{1}, {0}, {}, {}};
  const Array lhs = random_array({4, 6}, DType::f32, 3), rhs = random_array({6, 5}, DType::f32, 4);
  EXPECT_TRUE(check_vmap(dot_fn(mm), {lhs, rhs}, {1, std::nullopt}, 3, 1e-5));
  EXPECT_TRUE(check_vmap(dot_fn(mm), {lhs, rhs}, {std::nullopt, 2}, 3, 1e-5));
  EXPECT_TRUE(check_vmap(dot_fn(mm), {lhs, rhs}, {2, 0}, 3, 1e-5));
  // An empty contraction gives zeros; an empty free axis an empty result.
  const Array e0 = random_array({4, 0}, DType::f32, 5), e1 = random_array({0, 5}, DType::f32, 6);
  EXPECT_TRUE(check_vmap(dot_fn(mm), {e0, e1}, {0, 1}, 2));
  EXPECT_TRUE(check_vmap(dot_fn(mm), {random_array({0, 6}, DType::f32, 7), rhs}, {1, std::nullopt}, 2));
}

TEST(DotBatch, Bf16WithF32Output) {
  const lax::DotDimensionNumbers dims{{2}, {0}, {0}, {2}};
  const Array lhs = random_array({4, 3, 16}, DType::bf16, 8), rhs = random_array({16, 2, 4}, DType::bf16, 9);
  EXPECT_TRUE(check_vmap(dot_fn(dims), {lhs, rhs}, {1, 3}, 3, 1e-2));
  EXPECT_TRUE(check_vmap(dot_fn(dims), {lhs, rhs}, {3, std::nullopt}, 3, 1e-2));
  EXPECT_TRUE(check_vmap(dot_fn(dims, DType::f32), {lhs, rhs}, {std::nullopt, 1}, 3, 1e-5));
  EXPECT_TRUE(check_vmap(dot_fn(dims, DType::f32), {lhs, rhs}, {0, 0}, 3, 1e-5));
}

TEST(DotBatch, NestedVmap) {
  const lax::DotDimensionNumbers mm{{1}, {0}, {}, {}};
  const Array lhs = random_array({2, 3}, DType::f64, 10), rhs = random_array({3, 4}, DType::f64, 11);
  // The inner vmap batches one or both operands (its output keeps the batch
  // axis where the rule puts it: moving it would need the transpose rule);
  // the outer one batches either or both again.
  struct Placement {
    Axis lhs, rhs;
    int64_t out;
  };
  const std::vector<Placement> inner{{0, std::nullopt, 0}, {std::nullopt, 1, 1}, {2, 0, 0}, {1, 2, 0}};
  const std::vector<std::pair<Axis, Axis>> outer{{0, std::nullopt}, {std::nullopt, 1}, {2, 0}, {1, 2}, {3, 3}};
  for (const Placement& in : inner) {
    ArrayFn f = [mm, in](const std::vector<Array>& a) {
      FlatFn dot = [mm](std::span<const Array> xs) { return std::vector<Array>{lax::dot_general(xs[0], xs[1], mm)}; };
      const std::vector<Axis> in_axes{in.lhs, in.rhs};
      const std::vector<int64_t> out_axes{in.out};
      return vmap_flat(dot, a, in_axes, out_axes, "")[0];
    };
    // An inner batch of 2 on each batched operand.
    auto inner_arg = [](const Array& x, Axis ax, uint32_t seed) {
      return ax ? stack({x, random_array(x.shape(), x.dtype(), seed)}, *ax) : x;
    };
    const Array l2 = inner_arg(lhs, in.lhs, 12), r2 = inner_arg(rhs, in.rhs, 13);
    for (auto [ol, orr] : outer) {
      if ((ol && *ol > l2.ndim()) || (orr && *orr > r2.ndim())) continue;
      EXPECT_TRUE(check_vmap(f, {l2, r2}, {ol, orr}, 3, 1e-12))
          << "inner (" << in.lhs.value_or(-1) << ", " << in.rhs.value_or(-1) << ") outer (" << ol.value_or(-1) << ", "
          << orr.value_or(-1) << ")";
    }
  }
}

// With one operand batched, the batch axis is a free axis of the
// dot_general: the batched program is that single equation, no transpose.
TEST(DotBatch, OneBatchedOperandCopiesNothing) {
  const lax::DotDimensionNumbers dims{{2}, {0}, {0}, {2}};
  const Array lhs = random_array({4, 3, 7, 5}, DType::f32, 14);  // batch axis 2 of size 7
  const Array rhs = random_array({5, 2, 4}, DType::f32, 15);
  auto run = [&](int64_t out_axis) {
    return make_jaxpr([&](const Array& l, const Array& r) {
      FlatFn f = [&](std::span<const Array> xs) { return std::vector<Array>{lax::dot_general(xs[0], xs[1], dims)}; };
      std::vector<Axis> in_axes{2, std::nullopt};
      std::vector<int64_t> out_axes{out_axis};
      return vmap_flat(f, std::vector<Array>{l, r}, in_axes, out_axes, "")[0];
    })(lhs, rhs);
  };
  // Output axes: batch (4), lhs free (3, then the vmapped 7), rhs free (2).
  auto jaxpr = run(2);
  ASSERT_EQ(jaxpr->eqns.size(), 1u) << jaxpr->str();
  EXPECT_EQ(jaxpr->eqns[0].prim, Prim::dot_general);
  EXPECT_EQ(jaxpr->out_avals()[0].shape, Shape({4, 3, 7, 2}));
}

TEST(DotBatch, ErrorsNameTheUnbatchedOperands) {
  const lax::DotDimensionNumbers mm{{1}, {0}, {}, {}};
  const Array lhs = random_array({3, 2, 3}, DType::f32, 16), rhs = random_array({4, 5}, DType::f32, 17);
  auto f = [&](const Array& l, const Array& r) { return lax::dot_general(l, r, mm); };
  EXPECT_PAX_ERROR(vmap(f, {.in_axes = {0, std::nullopt}})(lhs, rhs), "dot_general");
}

}  // namespace
}  // namespace pax

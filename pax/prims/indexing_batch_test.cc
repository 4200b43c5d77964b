// vmap of gather and scatter_add against a loop over the batch, with
// different indices in every batch member: embedding lookups with per-example
// tables, take_along_axis forms, slices in clip and fill modes with
// out-of-range indices, offset / window axes before the batch axes, every
// combination of batched operands at the first, a middle and the last axis,
// narrow index dtypes, empty batches, and no copies where none are needed.
#include <gtest/gtest.h>

#include <functional>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/ir/jaxpr.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;
using testing::random_array;
using testing::random_values;
using Axis = std::optional<int64_t>;

// The arguments of batch member b (unmapped arguments are taken from b = 0).
using Example = std::function<std::vector<Array>(int64_t b)>;

// vmap(f) with the output batch axis at out_axis.
ArrayFn vmapped(const ArrayFn& f, const std::vector<Axis>& in_axes, int64_t out_axis) {
  return [f, in_axes, out_axis](const std::vector<Array>& a) {
    FlatFn flat = [f](std::span<const Array> xs) {
      return std::vector<Array>{f(std::vector<Array>(xs.begin(), xs.end()))};
    };
    return vmap_flat(flat, a, in_axes, std::vector<int64_t>{out_axis}, "")[0];
  };
}

// vmap(f) over members stacked at in_axes equals f applied to each member
// (check_vmap with per-member integer arguments too).
::testing::AssertionResult check_vmap_members(const ArrayFn& f, const Example& example,
                                              const std::vector<Axis>& in_axes, int64_t batch = 3) {
  std::vector<std::vector<Array>> members;
  for (int64_t b = 0; b < batch; ++b) members.push_back(example(b));
  std::vector<Array> batched = members[0];
  for (size_t i = 0; i < in_axes.size(); ++i) {
    std::vector<Array> items;
    for (auto& m : members) {
      if (!in_axes[i]) m[i] = members[0][i];
      items.push_back(m[i]);
    }
    if (in_axes[i]) batched[i] = stack(items, *in_axes[i]);
  }
  const Array got = vmapped(f, in_axes, 0)(batched);
  std::vector<Array> expected;
  for (const auto& m : members) expected.push_back(f(m));
  const Array want = stack(expected, 0);
  if (got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "vmap gives " << got.aval().str() << ", loop " << want.aval().str();
  }
  return testing::all_close(got, want, 1e-12, 1e-12);
}

// args with an empty batch axis inserted at in_axes.
std::vector<Array> empty_batch(std::vector<Array> args, const std::vector<Axis>& in_axes) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (!in_axes[i]) continue;
    Ints shape = args[i].shape().dims();
    shape.insert(shape.begin() + *in_axes[i], 0);
    args[i] = zeros(Shape(shape), args[i].dtype());
  }
  return args;
}

// Integers uniform in [lo, hi).
Array random_indices(const Shape& shape, int64_t lo, int64_t hi, uint32_t seed, DType dtype = DType::i32) {
  std::vector<double> v = random_values(shape.numel(), seed, double(lo), double(hi));
  for (double& x : v) x = std::floor(x);
  return array(v, shape).astype(dtype);
}

// Every placement of up to three arguments: not batched, first, middle, last.
std::vector<std::vector<Axis>> placements(const std::vector<int64_t>& ranks) {
  std::vector<std::vector<Axis>> out{{}};
  for (int64_t rank : ranks) {
    std::vector<Axis> options{std::nullopt, 0, rank};
    if (rank >= 2) options.push_back(1);
    std::vector<std::vector<Axis>> next;
    for (const auto& prefix : out) {
      for (Axis a : options) {
        next.push_back(prefix);
        next.back().push_back(a);
      }
    }
    out = next;
  }
  std::erase_if(out, [](const std::vector<Axis>& p) {
    return std::none_of(p.begin(), p.end(), [](Axis a) { return a.has_value(); });
  });
  return out;
}

std::string str(const std::vector<Axis>& axes) {
  std::string s;
  for (Axis a : axes) s += (s.empty() ? "" : ", ") + (a ? std::to_string(*a) : std::string("none"));
  return "in_axes (" + s + ")";
}

// ---------------------------------------------------------------------------
// gather

struct GatherCase {
  const char* name;
  Shape operand, indices;
  lax::GatherDimensionNumbers dims;
  Ints slice_sizes;
  int64_t index_lo, index_hi;  // random indices in [lo, hi)
  lax::GatherMode mode = lax::GatherMode::clip;
  double fill_value = 0.0;
  DType index_dtype = DType::i32;
};

std::vector<GatherCase> gather_cases() {
  using lax::GatherMode;
  return {
      // table[ids]: (6, 4) table, 5 ids -> (5, 4)
      {"embedding", {6, 4}, {5, 1}, {{1}, {0}, {0}}, {1, 4}, 0, 6},
      {"embedding_2d_ids", {6, 4}, {2, 3, 1}, {{2}, {0}, {0}}, {1, 4}, 0, 6},
      {"embedding_u8_ids", {6, 4}, {5, 1}, {{1}, {0}, {0}}, {1, 4}, 0, 6, GatherMode::clip, 0.0, DType::u8},
      // x[idx[i, j, 0], idx[i, j, 1]] for (row, column) pairs, as take_along_axis
      {"take_along_axis", {3, 5}, {3, 4, 2}, {{}, {0, 1}, {0, 1}}, {1, 1}, 0, 5},
      // (2, 3) windows at (row, column) starts, clamped into range
      {"slices_clip", {5, 6}, {3, 2}, {{1, 2}, {}, {0, 1}}, {2, 3}, -2, 8},
      {"slices_fill", {5, 6}, {3, 2}, {{1, 2}, {}, {0, 1}}, {2, 3}, -2, 8, GatherMode::fill, -7.0},
      {"points_fill_i64", {4, 5}, {6, 2}, {{}, {0, 1}, {0, 1}}, {1, 1}, -1, 6, GatherMode::fill, 2.5, DType::i64},
      // Columns: the offset axis comes before the batch axis of the indices.
      {"columns_offset_first", {4, 5}, {3, 1}, {{0}, {1}, {1}}, {4, 1}, 0, 5},
      // One index vector, no batch axes: a dynamic slice.
      {"dynamic_slice", {5, 6}, {2}, {{0, 1}, {}, {1, 0}}, {2, 3}, 0, 6},
      // Index vector maps axes out of order, one axis kept whole.
      {"partial_map", {3, 4, 5}, {2, 2}, {{1, 2}, {2}, {2, 0}}, {2, 4, 1}, 0, 4, GatherMode::fill, 1.0},
  };
}

ArrayFn gather_fn(const GatherCase& c) {
  return
      [c](const std::vector<Array>& a) { return lax::gather(a[0], a[1], c.dims, c.slice_sizes, c.mode, c.fill_value); };
}

Example gather_example(const GatherCase& c, DType dtype = DType::f64) {
  return [c, dtype](int64_t b) {
    return std::vector<Array>{random_array(c.operand, dtype, uint32_t(100 + b)),
                              random_indices(c.indices, c.index_lo, c.index_hi, uint32_t(200 + b), c.index_dtype)};
  };
}

TEST(GatherBatch, EveryCombinationAndPlacement) {
  for (const GatherCase& c : gather_cases()) {
    for (const auto& axes : placements({c.operand.rank(), c.indices.rank()})) {
      EXPECT_TRUE(check_vmap_members(gather_fn(c), gather_example(c), axes)) << c.name << " " << str(axes);
    }
  }
}

TEST(GatherBatch, Bf16AndIntegerOperands) {
  const GatherCase c = gather_cases()[4];
  EXPECT_TRUE(check_vmap_members(gather_fn(c), gather_example(c, DType::bf16), {1, 0}));
  Example ints = [c](int64_t b) {
    return std::vector<Array>{random_indices(c.operand, -50, 50, uint32_t(300 + b)),
                              random_indices(c.indices, -1, 7, uint32_t(400 + b))};
  };
  EXPECT_TRUE(check_vmap_members(gather_fn(c), ints, {2, 2}));
}

// u8 indices cannot count a batch of 300: the batch index column is wider.
TEST(GatherBatch, LongBatchWidensNarrowIndices) {
  const GatherCase c = gather_cases()[2];
  EXPECT_TRUE(check_vmap_members(gather_fn(c), gather_example(c), {2, 0}, 300));
}

TEST(GatherBatch, EmptyBatchAndEmptyDimensions) {
  const GatherCase c = gather_cases()[0];
  for (std::vector<Axis> in_axes : std::vector<std::vector<Axis>>{{0, 0}, {1, std::nullopt}, {std::nullopt, 2}}) {
    const std::vector<Array> args = empty_batch({zeros(c.operand), zeros(c.indices, DType::i32)}, in_axes);
    EXPECT_EQ(vmapped(gather_fn(c), in_axes, 0)(args).shape(), Shape({0, 5, 4})) << str(in_axes);
  }
  // No ids per member.
  GatherCase none = c;
  none.indices = Shape{0, 1};
  EXPECT_TRUE(check_vmap_members(gather_fn(none), gather_example(none), {1, 0}));
}

// Counts the equations of vmap(f) traced with the output batch axis where
// the batching rule leaves it.
size_t num_eqns(const ArrayFn& f, const std::vector<Array>& args, const std::vector<Axis>& in_axes, int64_t out_axis) {
  const ArrayFn g = vmapped(f, in_axes, out_axis);
  return make_jaxpr([&](const std::vector<Array>& xs) { return g(xs); })(args)->eqns.size();
}

TEST(GatherBatch, OneBatchedOperandCopiesNothing) {
  const GatherCase c = gather_cases()[0];
  const Array table = zeros({6, 3, 4}), ids = zeros({5, 1}, DType::i32);
  // Per-member tables batched in the middle: the output (5, 4) holds the
  // batch between ids and features.
  EXPECT_EQ(num_eqns(gather_fn(c), {table, ids}, {1, std::nullopt}, 1), 1u);
  // Batched ids (5, 3, 1): the batch follows the ids axis.
  EXPECT_EQ(num_eqns(gather_fn(c), {zeros({6, 4}), zeros({5, 3, 1}, DType::i32)}, {std::nullopt, 1}, 1), 1u);
}

TEST(GatherBatch, UnderJit) {
  const GatherCase c = gather_cases()[5];  // slices in fill mode
  const std::vector<Array> args{random_array({5, 3, 6}, DType::f32, 1), random_indices({3, 3, 2}, -2, 8, 2)};
  EXPECT_TRUE(testing::check_jit(vmapped(gather_fn(c), {1, 0}, 0), args));
}

TEST(GatherBatch, ErrorsNameTheUnbatchedOperands) {
  const GatherCase c = gather_cases()[0];
  auto f = [c](const Array& x, const Array& i) { return gather_fn(c)({x, i}); };
  EXPECT_PAX_ERROR(vmap(f)(zeros({3, 6, 4}), zeros({3, 5, 2}, DType::i32)),
                   "gather: operand f32[6,4], indices i32[5,2]: start_index_map");
}

// ---------------------------------------------------------------------------
// scatter_add

struct ScatterCase {
  const char* name;
  Shape operand, indices, updates;
  lax::ScatterDimensionNumbers dims;
  int64_t index_lo, index_hi;
};

std::vector<ScatterCase> scatter_cases() {
  return {
      // The gradient of an embedding lookup: rows added at ids (repeats add up,
      // out-of-range ids are dropped).
      {"embedding_rows", {6, 4}, {5, 1}, {5, 4}, {{1}, {0}, {0}}, -1, 7},
      {"embedding_rows_2d_ids", {6, 4}, {2, 3, 1}, {2, 3, 4}, {{2}, {0}, {0}}, 0, 6},
      // (2, 3) windows at (row, column) starts; those leaving the operand are dropped.
      {"windows", {5, 6}, {3, 2}, {3, 2, 3}, {{1, 2}, {}, {0, 1}}, -1, 5},
      // Columns: the window axis comes before the scatter axis of the updates.
      {"columns_window_first", {4, 5}, {3, 1}, {4, 3}, {{0}, {1}, {1}}, 0, 5},
      // Single elements at (row, column) pairs, index vector out of axis order.
      {"points", {3, 5}, {4, 2}, {4}, {{}, {0, 1}, {1, 0}}, 0, 3},
      // One window, no scatter axes: a dynamic update slice that adds.
      {"one_window", {5, 6}, {2}, {2, 3}, {{0, 1}, {}, {0, 1}}, 0, 4},
  };
}

ArrayFn scatter_fn(const ScatterCase& c) {
  return [c](const std::vector<Array>& a) { return lax::scatter_add(a[0], a[1], a[2], c.dims); };
}

Example scatter_example(const ScatterCase& c, DType dtype = DType::f64) {
  return [c, dtype](int64_t b) {
    return std::vector<Array>{random_array(c.operand, dtype, uint32_t(500 + b)),
                              random_indices(c.indices, c.index_lo, c.index_hi, uint32_t(600 + b)),
                              random_array(c.updates, dtype, uint32_t(700 + b))};
  };
}

TEST(ScatterAddBatch, EveryCombinationAndPlacement) {
  for (const ScatterCase& c : scatter_cases()) {
    for (const auto& axes : placements({c.operand.rank(), c.indices.rank(), c.updates.rank()})) {
      EXPECT_TRUE(check_vmap_members(scatter_fn(c), scatter_example(c), axes)) << c.name << " " << str(axes);
    }
  }
}

TEST(ScatterAddBatch, IntegerAndBf16Operands) {
  const ScatterCase c = scatter_cases()[0];
  Example ints = [c](int64_t b) {
    return std::vector<Array>{random_indices(c.operand, -9, 9, uint32_t(800 + b)),
                              random_indices(c.indices, -1, 7, uint32_t(810 + b)),
                              random_indices(c.updates, -9, 9, uint32_t(820 + b))};
  };
  for (const auto& axes : placements({2, 2, 2})) {
    EXPECT_TRUE(check_vmap_members(scatter_fn(c), ints, axes)) << str(axes);
  }
  // Distinct ids: bf16 sums do not depend on the order of the additions.
  Example bf16 = [c](int64_t b) {
    std::vector<int32_t> ids{int32_t(b % 6), int32_t((b + 2) % 6), 5, 1, 3};
    if (b % 2) std::swap(ids[0], ids[4]);
    return std::vector<Array>{random_array(c.operand, DType::bf16, uint32_t(830 + b)), array(ids, {5, 1}),
                              random_array(c.updates, DType::bf16, uint32_t(840 + b))};
  };
  EXPECT_TRUE(check_vmap_members(scatter_fn(c), bf16, {2, 1, 0}, 2));
  EXPECT_TRUE(check_vmap_members(scatter_fn(c), bf16, {std::nullopt, 0, 1}, 2));
}

TEST(ScatterAddBatch, EmptyBatchAndLongBatch) {
  const ScatterCase c = scatter_cases()[0];
  const std::vector<std::vector<Axis>> cases{{0, 0, 0}, {std::nullopt, 1, std::nullopt}, {1, std::nullopt, 2}};
  for (const auto& in_axes : cases) {
    const std::vector<Array> args =
        empty_batch({zeros(c.operand), zeros(c.indices, DType::u8), zeros(c.updates)}, in_axes);
    EXPECT_EQ(vmapped(scatter_fn(c), in_axes, 0)(args).shape(), Shape({0, 6, 4})) << str(in_axes);
  }
  // u8 ids with a batch of 300 members.
  Example narrow = [c](int64_t b) {
    std::vector<Array> a = scatter_example(c)(b);
    a[1] = random_indices(c.indices, 0, 6, uint32_t(900 + b), DType::u8);
    return a;
  };
  EXPECT_TRUE(check_vmap_members(scatter_fn(c), narrow, {0, 1, std::nullopt}, 300));
}

TEST(ScatterAddBatch, BatchedOperandAndUpdatesCopyNothing) {
  const ScatterCase c = scatter_cases()[0];
  // Operand (6, 3, 4) and updates (5, 3, 4) batched in the middle, ids shared.
  EXPECT_EQ(
      num_eqns(scatter_fn(c), {zeros({6, 3, 4}), zeros({5, 1}, DType::i32), zeros({5, 3, 4})}, {1, std::nullopt, 1}, 1),
      1u);
}

TEST(ScatterAddBatch, UnderJit) {
  const ScatterCase c = scatter_cases()[2];  // windows
  const std::vector<Array> args{random_array({5, 3, 6}, DType::f32, 3), random_indices({3, 3, 2}, -1, 5, 4),
                                random_array({3, 3, 2, 3}, DType::f32, 5)};
  EXPECT_TRUE(testing::check_jit(vmapped(scatter_fn(c), {1, 0, 0}, 1), args));
}

TEST(ScatterAddBatch, ErrorsNameTheUnbatchedOperands) {
  const ScatterCase c = scatter_cases()[0];
  auto f = [c](const Array& x, const Array& i, const Array& u) { return scatter_fn(c)({x, i, u}); };
  EXPECT_PAX_ERROR(vmap(f)(zeros({2, 6, 4}), zeros({2, 5, 1}, DType::i32), zeros({2, 4, 4})),
                   "scatter_add: operand f32[6,4], indices i32[5,1], updates f32[4,4]");
}

}  // namespace
}  // namespace pax

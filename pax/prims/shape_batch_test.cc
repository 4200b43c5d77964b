// Batching rules of the shape primitives against a loop over the batch: every
// primitive with the batch axis first, in the middle and last, mixed batched
// and unbatched operands, 0-d examples, bf16 / integer / bool values, batched
// padding values and batched start indices (clamped like the primitives),
// nested vmap, and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/prims/registry.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;
using testing::check_vmap;
using Axis = std::optional<int64_t>;
const Axis kNone = std::nullopt;

Array f32(const Shape& s, uint32_t seed) { return testing::random_array(s, DType::f32, seed); }

// Every batch axis of a single operand of rank r: 0 .. r.
::testing::AssertionResult at_every_axis(const ArrayFn& f, const Array& x) {
  for (int64_t d = 0; d <= x.ndim(); ++d) {
    auto r = check_vmap(f, {x}, {d}, 3, 0);
    if (!r) return r << " (batch axis " << d << ")";
  }
  return ::testing::AssertionSuccess();
}

// A start index from a float in [-1, 1): [-4, 4), so also negative and past
// the end (the primitives clamp).
Array start_of(const Array& x) { return floor(x * 4.0).astype(DType::i32); }

TEST(ShapeBatch, Reshape) {
  const Array x = f32({2, 3, 4}, 1);
  for (const Ints& sizes : std::vector<Ints>{{6, 4}, {2, 12}, {24}, {2, 3, 4, 1}, {4, 3, 2}, {2, 3, 2, 2}}) {
    EXPECT_TRUE(at_every_axis([sizes](const std::vector<Array>& a) { return lax::reshape(a[0], sizes); }, x))
        << ints_str(sizes);
  }
  EXPECT_TRUE(at_every_axis([](const std::vector<Array>& a) { return lax::reshape(a[0], {1, 1}); }, f32({}, 2)));
  EXPECT_TRUE(at_every_axis([](const std::vector<Array>& a) { return lax::reshape(a[0], {}); }, f32({1}, 3)));
  EXPECT_TRUE(at_every_axis([](const std::vector<Array>& a) { return lax::reshape(a[0], {3, 0}); }, f32({0, 3}, 3)));
  // Keeping the leading axes keeps the batch axis in place.
  auto jaxpr = make_jaxpr(vmap(
      [](const Array& a) {
        return lax::reshape(a, {2, 12});
      },
      {.in_axes = {1}, .out_axes = {1}}))(zeros({2, 5, 3, 4}));
  EXPECT_EQ(jaxpr->str().find("transpose"), std::string::npos) << jaxpr->str();
}

TEST(ShapeBatch, TransposeBroadcastSqueezeExpandRev) {
  const Array x = f32({2, 3, 4}, 4);
  for (const Ints& perm : std::vector<Ints>{{2, 0, 1}, {1, 0, 2}, {0, 1, 2}, {2, 1, 0}}) {
    EXPECT_TRUE(at_every_axis([perm](const std::vector<Array>& a) { return lax::transpose(a[0], perm); }, x))
        << ints_str(perm);
  }
  struct B {
    Shape in;
    Ints shape, dims;
  };
  for (const B& b : std::vector<B>{{{2, 3}, {2, 5, 3}, {0, 2}},
                                   {{1, 3}, {4, 3}, {0, 1}},
                                   {{}, {2, 3}, {}},
                                   {{3}, {3, 2}, {0}},
                                   {{3}, {2, 3}, {1}},
                                   {{2, 1}, {2, 4, 5}, {0, 2}}}) {
    auto f = [b](const std::vector<Array>& a) { return lax::broadcast_in_dim(a[0], b.shape, b.dims); };
    EXPECT_TRUE(at_every_axis(f, f32(b.in, 5))) << ints_str(b.shape) << " " << ints_str(b.dims);
  }
  for (const Ints& dims : std::vector<Ints>{{1, 3}, {-1}, {1}, {3, 1}}) {
    EXPECT_TRUE(
        at_every_axis([dims](const std::vector<Array>& a) { return lax::squeeze(a[0], dims); }, f32({2, 1, 3, 1}, 6)))
        << ints_str(dims);
  }
  for (const Ints& dims : std::vector<Ints>{{0}, {1}, {2}, {-1}, {0, 3}, {1, 2}, {3, 0}}) {
    EXPECT_TRUE(
        at_every_axis([dims](const std::vector<Array>& a) { return lax::expand_dims(a[0], dims); }, f32({2, 3}, 7)))
        << ints_str(dims);
  }
  EXPECT_TRUE(at_every_axis([](const std::vector<Array>& a) { return lax::expand_dims(a[0], {0, 1}); }, f32({}, 8)));
  for (const Ints& dims : std::vector<Ints>{{0}, {1}, {0, 1}, {-1}, {}}) {
    EXPECT_TRUE(at_every_axis([dims](const std::vector<Array>& a) { return lax::rev(a[0], dims); }, f32({3, 4}, 9)))
        << ints_str(dims);
  }
  // bf16 and integers move like any other bytes.
  EXPECT_TRUE(at_every_axis(
      [](const std::vector<Array>& a) {
        return lax::transpose(a[0], {1, 0});
      },
      testing::random_array({2, 3}, DType::bf16, 10)));
  EXPECT_TRUE(
      at_every_axis([](const std::vector<Array>& a) { return lax::rev(floor(a[0] * 50.0).astype(DType::i64), {0}); },
                    f32({4, 2}, 11)));
}

TEST(ShapeBatch, Slice) {
  const Array x = f32({5, 6}, 12);
  struct S {
    Ints start, limit, strides;
  };
  for (const S& s :
       std::vector<S>{{{1, 0}, {4, 6}, {}}, {{0, 1}, {5, 6}, {2, 3}}, {{2, 2}, {2, 5}, {}}, {{4, 0}, {5, 6}, {1, 4}}}) {
    auto f = [s](const std::vector<Array>& a) { return lax::slice(a[0], s.start, s.limit, s.strides); };
    EXPECT_TRUE(at_every_axis(f, x)) << ints_str(s.start) << " " << ints_str(s.limit);
  }
}

TEST(ShapeBatch, Concatenate) {
  auto cat1 = [](const std::vector<Array>& a) { return lax::concatenate(a, 1); };
  auto cat0 = [](const std::vector<Array>& a) { return lax::concatenate(a, 0); };
  const std::vector<Array> args{f32({2, 3}, 13), f32({2, 1}, 14), f32({2, 2}, 15)};
  const std::vector<std::vector<Axis>> axes = {{0, 0, 0},         {1, 1, 1},     {2, 2, 2},        {0, 1, 2},
                                               {kNone, 2, kNone}, {1, kNone, 0}, {kNone, kNone, 1}};
  for (const auto& in_axes : axes) {
    EXPECT_TRUE(check_vmap(cat1, args, in_axes, 3, 0));
    EXPECT_TRUE(check_vmap(cat0, {f32({2, 3}, 16), f32({1, 3}, 17), f32({0, 3}, 18)}, in_axes, 3, 0));
  }
  EXPECT_TRUE(check_vmap(cat0,
                         {testing::random_array({2}, DType::bf16, 19), testing::random_array({3}, DType::bf16, 20)},
                         {1, kNone}, 3, 0));
}

TEST(ShapeBatch, Pad) {
  struct P {
    std::vector<lax::PadConfig> config;
  };
  const std::vector<P> configs = {
      {{{1, 2, 0}, {0, 1, 0}}}, {{{0, 0, 1}, {2, 0, 2}}}, {{{-1, 1, 0}, {1, -2, 1}}}, {{{0, 0, 0}, {0, 0, 0}}}};
  for (const P& c : configs) {
    auto f = [c](const std::vector<Array>& a) { return lax::pad(a[0], a[1], c.config); };
    const std::vector<Array> args{f32({3, 4}, 21), f32({}, 22)};
    // Shared and batched padding values, batched and shared operands.
    for (const auto& in_axes :
         std::vector<std::vector<Axis>>{{0, kNone}, {1, kNone}, {2, kNone}, {0, 0}, {1, 0}, {2, 0}, {kNone, 0}}) {
      EXPECT_TRUE(check_vmap(f, args, in_axes, 3, 0));
    }
    // bool and integer values with a batched padding value.
    auto fb = [c](const std::vector<Array>& a) {
      return lax::pad(lax::gt(a[0], zeros_like(a[0])), lax::lt(a[1], zeros_like(a[1])), c.config);
    };
    EXPECT_TRUE(check_vmap(fb, args, {1, 0}, 4, 0));
    auto fi = [c](const std::vector<Array>& a) {
      return lax::pad(floor(a[0] * 9.0).astype(DType::i32), floor(a[1] * 9.0).astype(DType::i32), c.config);
    };
    EXPECT_TRUE(check_vmap(fi, args, {kNone, 0}, 4, 0));
  }
  auto f0 = [](const std::vector<Array>& a) { return lax::pad(a[0], a[1], {}); };
  EXPECT_TRUE(check_vmap(f0, {f32({}, 23), f32({}, 24)}, {0, 0}, 3, 0));
}

TEST(ShapeBatch, DynamicSliceSharedStarts) {
  // Starts fixed in the function: only the operand is batched.
  for (auto [s0, s1] : std::vector<std::pair<int, int>>{{0, 0}, {1, 2}, {-3, 9}, {4, 1}}) {
    auto f = [s0, s1](const std::vector<Array>& a) {
      return lax::dynamic_slice(a[0], {scalar(int32_t(s0)), scalar(int64_t(s1))}, {2, 3});
    };
    EXPECT_TRUE(at_every_axis(f, f32({4, 5}, 25))) << s0 << " " << s1;
  }
}

TEST(ShapeBatch, DynamicSliceBatchedStarts) {
  auto f = [](const std::vector<Array>& a) {
    return lax::dynamic_slice(a[0], {start_of(a[1]), start_of(a[2]).astype(DType::u32)}, {2, 3});
  };
  const std::vector<Array> args{f32({4, 5}, 26), f32({}, 27), f32({}, 28)};
  for (const auto& in_axes : std::vector<std::vector<Axis>>{
           {0, 0, 0}, {1, 0, kNone}, {2, kNone, 0}, {kNone, 0, 0}, {kNone, 0, kNone}, {kNone, kNone, 0}}) {
    EXPECT_TRUE(check_vmap(f, args, in_axes, 6, 0));
  }
  // Only from the examples' own values: a data-dependent window.
  auto g = [](const std::vector<Array>& a) {
    Array s = lax::argmax(a[0], 0);
    return lax::dynamic_slice(a[0], {s}, {2});
  };
  EXPECT_TRUE(check_vmap(g, {f32({6}, 29)}, {0}, 5, 0));
  EXPECT_TRUE(check_vmap(g, {testing::random_array({6}, DType::bf16, 30)}, {1}, 5, 0));
}

TEST(ShapeBatch, DynamicUpdateSlice) {
  auto f = [](const std::vector<Array>& a) {
    return lax::dynamic_update_slice(a[0], a[1], {start_of(a[2]), start_of(a[3])});
  };
  const std::vector<Array> args{f32({4, 5}, 31), f32({2, 3}, 32), f32({}, 33), f32({}, 34)};
  for (const auto& in_axes : std::vector<std::vector<Axis>>{// shared starts
                                                            {0, kNone, kNone, kNone},
                                                            {kNone, 1, kNone, kNone},
                                                            {2, 2, kNone, kNone},
                                                            {1, 0, kNone, kNone},
                                                            // batched starts
                                                            {0, 0, 0, 0},
                                                            {1, kNone, 0, kNone},
                                                            {kNone, 2, kNone, 0},
                                                            {kNone, kNone, 0, 0},
                                                            {2, 1, kNone, 0}}) {
    EXPECT_TRUE(check_vmap(f, args, in_axes, 5, 0));
  }
  // bool, integer and bf16 values with batched starts.
  auto fb = [](const std::vector<Array>& a) {
    return lax::dynamic_update_slice(lax::gt(a[0], zeros_like(a[0])), lax::lt(a[1], zeros_like(a[1])),
                                     {start_of(a[2]), start_of(a[3])});
  };
  auto fi = [](const std::vector<Array>& a) {
    Array x = floor(a[0] * 1000.0).astype(DType::i64), u = floor(a[1] * 1000.0).astype(DType::i64);
    return lax::dynamic_update_slice(x, u, {start_of(a[2]), start_of(a[3])});
  };
  auto fh = [](const std::vector<Array>& a) {
    return lax::dynamic_update_slice(a[0].astype(DType::bf16), a[1].astype(DType::bf16),
                                     {start_of(a[2]), start_of(a[3])});
  };
  for (const ArrayFn& g : {ArrayFn(fb), ArrayFn(fi), ArrayFn(fh)}) {
    EXPECT_TRUE(check_vmap(g, args, {0, 1, 0, 0}, 5, 0));
    EXPECT_TRUE(check_vmap(g, args, {kNone, kNone, 0, kNone}, 5, 0));
  }
}

// The update comes through bit for bit: -0.0, NaN and infinities included.
TEST(ShapeBatch, DynamicUpdateSliceIsExact) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Array operand = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Array updates = array<float>({-0.0f, nan, inf, -inf, -0.0f, 7}, {3, 2});  // one update f32[2] per example
  Array starts = array<int32_t>({0, 1, 5});                                 // the last is clamped to 1
  auto f = [&](const Array& u, const Array& s) {
    return lax::bitcast_convert_type(lax::dynamic_update_slice(operand, lax::reshape(u, {1, 2}), {s, s}), DType::i32);
  };
  Array got = vmap(f)(updates, starts);
  for (int64_t b = 0; b < 3; ++b) {
    Array want = f(reshape(slice_along(updates, 0, b, b + 1), {2}), reshape(slice_along(starts, 0, b, b + 1), {}));
    EXPECT_EQ(reshape(slice_along(got, 0, b, b + 1), {2, 3}).to_vector<int32_t>(), want.to_vector<int32_t>()) << b;
  }
}

// vmap of a vmapped slice-pad-concatenate pipeline, checked against a loop of
// the inner vmap (itself checked against a loop by the tests above). `starts`
// says whether the inner level batches the start index and padding value.
ArrayFn nested_pipeline(bool batched_inner_starts) {
  return [batched_inner_starts](const std::vector<Array>& a) {
    FlatFn flat = [](std::span<const Array> xs) {
      Array y = lax::pad(xs[0], xs[1], {{1, 0, 1}});
      Array z = lax::concatenate({lax::rev(y, {0}), lax::dynamic_slice(xs[0], {start_of(xs[1])}, {2})}, 0);
      return std::vector<Array>{lax::expand_dims(z, {0})};
    };
    std::vector<std::optional<int64_t>> in_axes{1, batched_inner_starts ? Axis(0) : kNone};
    std::vector<int64_t> out_axes{2};
    return vmap_flat(flat, a, in_axes, out_axes, "")[0];
  };
}

TEST(ShapeBatch, NestedVmap) {
  const std::vector<Array> shared{f32({4, 3}, 35), f32({}, 36)};
  EXPECT_TRUE(check_vmap(nested_pipeline(false), shared, {0, 0}, 3, 0));
  EXPECT_TRUE(check_vmap(nested_pipeline(false), shared, {2, kNone}, 3, 0));
  EXPECT_TRUE(check_vmap(nested_pipeline(false), shared, {kNone, 0}, 3, 0));
  // Starts batched at both levels: the outer level batches the inner
  // level's gather / scatter_add, whose rules live with the indexing family.
  if (prim_def(Prim::gather).batch && prim_def(Prim::scatter_add).batch) {
    const std::vector<Array> per_row{f32({4, 3}, 37), f32({3}, 38)};
    EXPECT_TRUE(check_vmap(nested_pipeline(true), per_row, {0, 0}, 3, 0));
    EXPECT_TRUE(check_vmap(nested_pipeline(true), per_row, {2, kNone}, 3, 0));
    EXPECT_TRUE(check_vmap(nested_pipeline(true), per_row, {kNone, 1}, 3, 0));
  }
}

// vmap(grad(f)) with a window chosen per example: the VJP of dynamic_slice is
// a dynamic_update_slice with batched starts.
TEST(ShapeBatch, PerExampleGradientOfADataDependentWindow) {
  auto loss = [](const Array& x, const Array& s) {
    Array w = lax::dynamic_slice(x, {s, scalar(int32_t(1))}, {2, 2});
    return sum(w * w * w);
  };
  Array xs = testing::random_array({4, 3, 5}, DType::f64, 39);
  Array starts = array<int32_t>({0, 1, 2, -1});  // 2 is clamped to 1, -1 to 0
  Array g = vmap(grad(loss))(xs, starts);
  ASSERT_EQ(g.shape(), Shape({4, 3, 5}));
  std::vector<double> vx = xs.to_vector<double>(), vg = g.to_vector<double>();
  const int64_t first_row[] = {0, 1, 1, 0};
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        const size_t k = size_t((b * 3 + i) * 5 + j);
        const bool in = i >= first_row[b] && i < first_row[b] + 2 && j >= 1 && j < 3;
        EXPECT_NEAR(vg[k], in ? 3 * vx[k] * vx[k] : 0.0, 1e-14) << b << " " << i << " " << j;
      }
    }
  }
}

// The rules trace: jit of a vmapped function equals the eager vmap.
TEST(ShapeBatch, JitOfVmap) {
  auto f = [](const std::vector<Array>& a) {
    FlatFn flat = [](std::span<const Array> xs) {
      Array y = lax::pad(xs[0], xs[1], {{1, 1, 1}, {-1, 2, 0}});
      Array z = lax::dynamic_update_slice(y, lax::slice(xs[0], {0, 0}, {2, 2}), {start_of(xs[1]), start_of(xs[1])});
      return std::vector<Array>{lax::reshape(lax::transpose(z, {1, 0}), {int64_t(z.size())})};
    };
    std::vector<std::optional<int64_t>> in_axes{1, 0};
    std::vector<int64_t> out_axes{0};
    return vmap_flat(flat, a, in_axes, out_axes, "")[0];
  };
  EXPECT_TRUE(testing::check_jit(f, {f32({3, 4, 2}, 40), f32({4}, 41)}));
}

TEST(ShapeBatch, Errors) {
  EXPECT_PAX_ERROR(vmap([](const Array& x) { return lax::reshape(x, {4}); })(zeros({5, 6})), "cannot reshape f32[6]");
  EXPECT_PAX_ERROR(vmap([](const Array& x) { return lax::squeeze(x, {0}); })(zeros({5, 6})),
                   "squeeze: dimension 0 of f32[6] has size 6");
  EXPECT_PAX_ERROR(vmap([](const Array& x) {
                     return lax::transpose(x, {0, 1});
                   })(zeros({5, 6})),
                   "is not a permutation of the 1 axes of f32[6]");
  EXPECT_PAX_ERROR(vmap([](const Array& x) { return lax::slice(x, {0}, {7}); }, {.in_axes = {1}})(zeros({6, 5})),
                   "slice: dimension 0 of f32[6]");
  auto cat = [](const Array& a, const Array& b) { return lax::concatenate({a, b}, 1); };
  EXPECT_PAX_ERROR(vmap(cat, {.in_axes = {0, std::nullopt}})(zeros({5, 2, 3}), zeros({3, 3})),
                   "concatenate: operand 1 is f32[3,3]");
  auto pad = [](const Array& x, const Array& v) { return lax::pad(x, v, {{0, 1, 0}}); };
  EXPECT_PAX_ERROR(vmap(pad)(zeros({5, 3}), zeros({5, 2})), "pad: padding value must be a scalar");
  auto ds = [](const Array& x, const Array& s) { return lax::dynamic_slice(x, {s}, {4}); };
  EXPECT_PAX_ERROR(vmap(ds)(zeros({5, 3}), zeros({5}, DType::i32)), "exceed operand f32[3]");
  EXPECT_PAX_ERROR(vmap(ds)(zeros({5, 6}), zeros({5}, DType::f32)), "start indices must be integer scalars");
  // iota has no operands: no vmap level ever owns one, and its rule says so.
  Array shifted = vmap([](const Array& x) { return x + lax::iota(DType::f32, {3}); })(zeros({2, 3}));
  EXPECT_TRUE(testing::all_close(shifted, {0, 1, 2, 0, 1, 2}, 0, 0));
  const PrimDef& iota = prim_def(Prim::iota);
  ASSERT_NE(iota.batch, nullptr);
  const Params p{{"dtype", DType::f32}, {"shape", Ints{3}}, {"dimension", int64_t(0)}};
  EXPECT_PAX_ERROR(iota.batch({}, {}, p, BatchInfo{2, ""}), "iota: has no operands");
}

}  // namespace
}  // namespace pax

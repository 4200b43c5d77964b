// The CUDA layout and indexing kernels (kernels_layout.cu, kernels_indexing.cu).
// On every machine their index arithmetic (layout_index_math.h) runs on the
// host and must reproduce the CPU kernels' results bit for bit; where a GPU
// is present every kernel runs there and must agree with the CPU backend, for
// several shapes and dtypes.
#include "pax/backend/cuda/layout_index_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/kernel.h"
#include "pax/core/device_put.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

using layout::StridedMap;
using testing::host_bytes;

const Device kCuda{DeviceKind::cuda, 0};

// ---------------------------------------------------------------------------
// Host helpers.

// An int32 array whose elements are all distinct, so that a wrong index shows.
Array distinct_i32(const Shape& s, int32_t first = 3) {
  std::vector<int32_t> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + 7 * int32_t(i);
  return array(v, s);
}

template <class T>
std::vector<T> values_of(const Array& a) {
  const std::vector<unsigned char> bytes = host_bytes(a);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// out[i] = in[src(i)] over n elements, on the host.
std::vector<int32_t> read_through(const std::vector<int32_t>& in, const StridedMap& src, int64_t n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = in[size_t(layout::map_offset(src, i))];
  return out;
}

// An index array of `dtype` from int64 values.
Array index_array(const std::vector<int64_t>& v, const Shape& s, DType dtype) {
  std::vector<unsigned char> bytes(v.size() * itemsize(dtype));
  convert_host(DType::i64, v.data(), dtype, bytes.data(), v.size());
  return from_host(bytes.data(), s, dtype);
}

TensorView view_of(const std::vector<unsigned char>& bytes, const Shape& s, DType dtype) {
  return TensorView{const_cast<unsigned char*>(bytes.data()), &s, dtype};
}

// ---------------------------------------------------------------------------
// Index math on the host against the CPU kernels.

TEST(CudaLayoutIndexMath, MapOffsetWalksRowMajor) {
  const int64_t dims[] = {2, 3}, strides[] = {1, 2};
  const StridedMap m = layout::strided_map("test", dims, strides, 5);
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 6; ++i) got.push_back(layout::map_offset(m, i));
  EXPECT_EQ(got, (std::vector<int64_t>{5, 7, 9, 6, 8, 10}));
  const StridedMap scalar = layout::strided_map("test", std::span<const int64_t>{}, std::span<const int64_t>{}, 4);
  EXPECT_EQ(layout::map_offset(scalar, 0), 4);
}

TEST(CudaLayoutIndexMath, RanksAboveTheLimitAreRejected) {
  const Shape big(std::vector<int64_t>(size_t(layout::kMaxRank + 1), 1));
  Ints perm(size_t(big.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  EXPECT_PAX_ERROR(layout::transpose_source(big, perm), "transpose: the CUDA kernel takes arrays of rank at most 16");
}

TEST(CudaLayoutIndexMath, TransposeMatchesCpu) {
  for (const auto& [shape, perm] : std::vector<std::pair<Shape, Ints>>{{Shape{2, 3, 4}, {2, 0, 1}},
                                                                       {Shape{2, 3, 4}, {1, 2, 0}},
                                                                       {Shape{5, 7}, {1, 0}},
                                                                       {Shape{2, 1, 3, 2}, {3, 1, 0, 2}}}) {
    const Array x = distinct_i32(shape);
    const Array y = lax::transpose(x, perm);
    EXPECT_EQ(read_through(values_of<int32_t>(x), layout::transpose_source(shape, perm), y.size()),
              values_of<int32_t>(y))
        << shape.str();
  }
}

TEST(CudaLayoutIndexMath, BroadcastInDimMatchesCpu) {
  struct Case {
    Shape in, out;
    Ints bdims;
  };
  for (const Case& c : std::vector<Case>{{Shape{3}, Shape{2, 3}, {1}},
                                         {Shape{3, 1}, Shape{3, 4}, {0, 1}},
                                         {Shape{1, 4}, Shape{2, 3, 4}, {1, 2}},
                                         {Shape{}, Shape{2, 2}, {}},
                                         {Shape{2, 3}, Shape{2, 5, 3}, {0, 2}}}) {
    const Array x = distinct_i32(c.in);
    const Array y = lax::broadcast_in_dim(x, c.out.dims(), c.bdims);
    EXPECT_EQ(read_through(values_of<int32_t>(x), layout::broadcast_source(c.in, c.out, c.bdims), y.size()),
              values_of<int32_t>(y))
        << c.in.str() << " -> " << c.out.str();
  }
}

TEST(CudaLayoutIndexMath, StridedSliceMatchesCpu) {
  struct Case {
    Shape in;
    Ints start, limit, strides;
  };
  for (const Case& c : std::vector<Case>{{Shape{10}, {1}, {9}, {3}},
                                         {Shape{6, 7}, {1, 2}, {6, 7}, {2, 2}},
                                         {Shape{4, 5, 6}, {0, 1, 2}, {4, 5, 6}, {1, 3, 4}},
                                         {Shape{4, 5}, {1, 0}, {3, 5}, {}}}) {
    const Array x = distinct_i32(c.in);
    const Array y = lax::slice(x, c.start, c.limit, c.strides);
    const Ints steps = c.strides.empty() ? Ints(size_t(c.in.rank()), 1) : c.strides;
    EXPECT_EQ(read_through(values_of<int32_t>(x), layout::slice_source(c.in, y.shape(), c.start, steps), y.size()),
              values_of<int32_t>(y))
        << c.in.str();
  }
}

TEST(CudaLayoutIndexMath, RevMatchesCpu) {
  for (const auto& [shape, dims] : std::vector<std::pair<Shape, Ints>>{
           {Shape{5}, {0}}, {Shape{3, 4}, {1}}, {Shape{3, 4, 2}, {0, 2}}, {Shape{2, 3, 4}, {-1, 0}}}) {
    const Array x = distinct_i32(shape);
    const Array y = lax::rev(x, dims);
    EXPECT_EQ(read_through(values_of<int32_t>(x), layout::rev_source(shape, normalize_axes(dims, shape.rank(), "rev")),
                           y.size()),
              values_of<int32_t>(y))
        << shape.str();
  }
}

TEST(CudaLayoutIndexMath, PadMatchesCpuWithNegativeAndInteriorPadding) {
  struct Case {
    Shape in;
    std::vector<lax::PadConfig> cfg;
  };
  for (const Case& c : std::vector<Case>{{Shape{5}, {{2, 3, 0}}},
                                         {Shape{5}, {{-2, 1, 1}}},
                                         {Shape{5}, {{-3, -4, 2}}},
                                         {Shape{3, 4}, {{1, -1, 1}, {-2, 2, 2}}},
                                         {Shape{2, 3, 2}, {{0, 0, 3}, {-1, -1, 0}, {2, -2, 1}}},
                                         {Shape{4}, {{-9, 2, 1}}}}) {
    const Array x = distinct_i32(c.in);
    const Array v = scalar<int32_t>(-1);
    const Array y = lax::pad(x, v, c.cfg);
    Ints flat;
    for (const lax::PadConfig& p : c.cfg) flat.insert(flat.end(), {p.lo, p.hi, p.interior});
    const layout::PadMap m = layout::pad_map(c.in, y.shape(), flat);
    const std::vector<int32_t> xs = values_of<int32_t>(x);
    std::vector<int32_t> got;
    for (int64_t i = 0; i < y.size(); ++i) {
      const int64_t src = layout::pad_source(m, i);
      got.push_back(src < 0 ? -1 : xs[size_t(src)]);
    }
    EXPECT_EQ(got, values_of<int32_t>(y)) << c.in.str() << " -> " << y.shape().str();
  }
}

TEST(CudaLayoutIndexMath, ConcatenateDestinationsMatchCpu) {
  for (int64_t dim : {0, 1, 2}) {
    std::vector<Array> parts;
    for (int64_t k = 0; k < 3; ++k) {
      std::vector<int64_t> dims{2, 3, 4};
      dims[size_t(dim)] = k + 1;
      parts.push_back(distinct_i32(Shape(dims), int32_t(1000 * k)));
    }
    const Array y = lax::concatenate(parts, dim);
    std::vector<int32_t> got(size_t(y.size()), 0);
    int64_t offset = 0;
    for (const Array& x : parts) {
      const StridedMap dst = layout::concatenate_destination(x.shape(), y.shape(), dim, offset);
      const std::vector<int32_t> xs = values_of<int32_t>(x);
      for (int64_t i = 0; i < x.size(); ++i) got[size_t(layout::map_offset(dst, i))] = xs[size_t(i)];
      offset += x.shape()[dim];
    }
    EXPECT_EQ(got, values_of<int32_t>(y)) << "dimension " << dim;
  }
}

TEST(CudaLayoutIndexMath, DynamicStartsClampAsCpu) {
  const Shape s{5, 6, 4};
  const Ints sizes{2, 3, 4};
  const Array x = distinct_i32(s);
  const std::vector<int32_t> xs = values_of<int32_t>(x);
  for (const std::vector<int64_t>& st :
       std::vector<std::vector<int64_t>>{{0, 0, 0}, {1, 2, 0}, {-3, 9, 1}, {4, 3, -1}, {100, -100, 7}, {3, 5, 0}}) {
    for (DType dt : {DType::i32, DType::i64, DType::u8, DType::u32}) {
      if (!(dt == DType::i32 || dt == DType::i64) && std::any_of(st.begin(), st.end(), [](int64_t v) { return v < 0; }))
        continue;  // unsigned starts are never negative
      std::vector<Array> starts;
      std::vector<std::vector<unsigned char>> bytes;
      for (int64_t v : st) {
        starts.push_back(index_array({v}, Shape{}, dt));
        bytes.push_back(host_bytes(starts.back()));
      }
      const Shape scalar_shape{};
      std::vector<TensorView> views;
      for (const auto& b : bytes) views.push_back(view_of(b, scalar_shape, dt));
      const layout::DynamicStarts ds =
          layout::dynamic_starts("dynamic_slice", s, sizes, std::span<const TensorView>(views));
      const int64_t base = layout::dynamic_start_offset(ds);

      // dynamic_slice reads the window at the clamped start ...
      const Array y = lax::dynamic_slice(x, starts, sizes);
      const StridedMap src = layout::strided_map("dynamic_slice", sizes, s.strides(), base);
      EXPECT_EQ(read_through(xs, src, y.size()), values_of<int32_t>(y)) << dtype_name(dt) << " " << ints_str(st);

      // ... and dynamic_update_slice writes it there.
      const Array u = distinct_i32(Shape(sizes), -500);
      const Array z = lax::dynamic_update_slice(x, u, starts);
      std::vector<int32_t> got = xs;
      const std::vector<int32_t> us = values_of<int32_t>(u);
      for (int64_t i = 0; i < u.size(); ++i) got[size_t(layout::map_offset(src, i))] = us[size_t(i)];
      EXPECT_EQ(got, values_of<int32_t>(z)) << dtype_name(dt) << " " << ints_str(st);
    }
  }
}

TEST(CudaLayoutIndexMath, LoadIndexWidensEveryIndexDtype) {
  const uint8_t a = 200;
  const uint32_t b = 4000000000u;
  const int32_t c = -7;
  const int64_t d = int64_t(1) << 40;
  EXPECT_EQ(layout::load_index(&a, DType::u8), 200);
  EXPECT_EQ(layout::load_index(&b, DType::u32), 4000000000);
  EXPECT_EQ(layout::load_index(&c, DType::i32), -7);
  EXPECT_EQ(layout::load_index(&d, DType::i64), int64_t(1) << 40);
}

// One gather form: operand shape, index shape and values, dimension numbers.
struct GatherCase {
  std::string name;
  Shape operand, indices;
  std::vector<int64_t> index_values;
  lax::GatherDimensionNumbers dims;
  Ints slice_sizes;
};

std::vector<GatherCase> gather_cases() {
  return {
      // Embedding lookup; out-of-range rows clamp (or fill).
      {"embedding", Shape{10, 4}, Shape{6, 1}, {3, 0, 9, 12, 3, 255}, {{1}, {0}, {0}}, {1, 4}},
      // Full coordinates per element (take_along_axis).
      {"points",
       Shape{3, 5},
       Shape{3, 4, 2},
       {0, 0, 2, 4, 1, 3, 5, 1, 2, 2, 0, 4, 1, 1, 2, 0, 0, 3, 2, 9, 1, 0, 2, 2},
       {{}, {0, 1}, {0, 1}},
       {1, 1}},
      // Windows with a reversed start_index_map, some partly outside.
      {"windows", Shape{6, 7}, Shape{4, 2}, {0, 0, 4, 3, 6, 1, 2, 5}, {{1, 2}, {}, {1, 0}}, {2, 3}},
      // The slice axis before the batch axis in the output.
      {"offset_first", Shape{4, 10}, Shape{5, 1}, {9, 0, 4, 11, 7}, {{0}, {1}, {1}}, {4, 1}},
      // A scalar index vector batch: one window.
      {"one_window", Shape{3, 4, 5}, Shape{2}, {1, 2}, {{0, 1, 2}, {}, {0, 2}}, {2, 3, 2}},
  };
}

template <class I>
std::vector<int32_t> emulate_gather(const layout::GatherMap& m, const std::vector<int32_t>& operand,
                                    const std::vector<unsigned char>& idx, int32_t fill, int64_t n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  const I* iv = reinterpret_cast<const I*>(idx.data());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = layout::gather_source(m, iv, i);
    out[size_t(i)] = src < 0 ? fill : operand[size_t(src)];
  }
  return out;
}

TEST(CudaLayoutIndexMath, GatherMatchesCpuForEveryForm) {
  for (const GatherCase& c : gather_cases()) {
    for (DType dt : {DType::i32, DType::i64, DType::u8, DType::u32}) {
      for (bool fill : {false, true}) {
        const Array x = distinct_i32(c.operand);
        const Array idx = index_array(c.index_values, c.indices, dt);
        const Array y =
            lax::gather(x, idx, c.dims, c.slice_sizes, fill ? lax::GatherMode::fill : lax::GatherMode::clip, -5.0);
        GatherSpec spec{
            c.dims.offset_dims, c.dims.collapsed_slice_dims, c.dims.start_index_map, c.slice_sizes, fill, -5.0};
        const layout::GatherMap m = layout::gather_map(spec, c.operand, c.indices, y.shape());
        const std::vector<int32_t> xs = values_of<int32_t>(x);
        const std::vector<unsigned char> ib = host_bytes(idx);
        std::vector<int32_t> got;
        switch (dt) {
          case DType::i32: got = emulate_gather<int32_t>(m, xs, ib, -5, y.size()); break;
          case DType::i64: got = emulate_gather<int64_t>(m, xs, ib, -5, y.size()); break;
          case DType::u8: got = emulate_gather<uint8_t>(m, xs, ib, -5, y.size()); break;
          default: got = emulate_gather<uint32_t>(m, xs, ib, -5, y.size()); break;
        }
        EXPECT_EQ(got, values_of<int32_t>(y)) << c.name << " " << dtype_name(dt) << (fill ? " fill" : " clip");
      }
    }
  }
}

// One scatter_add form.
struct ScatterCase {
  std::string name;
  Shape operand, indices, updates;
  std::vector<int64_t> index_values;
  lax::ScatterDimensionNumbers dims;
};

// Index values in [lo, hi] from a fixed seed.
std::vector<int64_t> random_indices(int64_t n, int64_t lo, int64_t hi, uint32_t seed) {
  std::vector<int64_t> v;
  for (double d : testing::random_values(n, seed, double(lo), double(hi + 1))) v.push_back(std::min(int64_t(d), hi));
  return v;
}

std::vector<ScatterCase> scatter_cases() {
  return {
      // Embedding gradient with repeated and out-of-range rows; large enough
      // for the CPU to split the work over threads.
      {"embedding", Shape{50, 64}, Shape{1000, 1}, Shape{1000, 64}, random_indices(1000, -2, 52, 1), {{1}, {0}, {0}}},
      // Single elements, many to each target.
      {"elements", Shape{7}, Shape{40, 1}, Shape{40}, random_indices(40, -1, 7, 2), {{}, {0}, {0}}},
      // The window axis before the batch axis of updates.
      {"window_first", Shape{4, 10}, Shape{6, 1}, Shape{4, 6}, {3, 9, 3, 10, 0, 3}, {{0}, {1}, {1}}},
      // Two index components over two batch axes, windows partly dropped.
      {"windows",
       Shape{5, 6, 3},
       Shape{3, 4, 2},
       Shape{3, 4, 2, 3, 3},
       random_indices(24, -1, 5, 3),
       {{2, 3, 4}, {}, {0, 1}}},
      // Reversed index map, an inserted axis in the middle.
      {"inserted_middle",
       Shape{4, 5, 6},
       Shape{8, 2},
       Shape{8, 3, 6},
       random_indices(16, 0, 4, 4),
       {{1, 2}, {1}, {1, 0}}},
  };
}

// The device algorithm on the host: per update element its target, a stable
// sort by target, then each run added in order.
template <class T, class I>
std::vector<T> emulate_scatter(const layout::ScatterMap& m, std::vector<T> out, const std::vector<unsigned char>& idx,
                               const std::vector<T>& upd) {
  const int64_t n = int64_t(upd.size());
  const uint64_t dropped = out.size();
  std::vector<std::pair<uint64_t, uint64_t>> items;
  for (int64_t i = 0; i < n; ++i) {
    const layout::ScatterItem it = layout::scatter_item(m, reinterpret_cast<const I*>(idx.data()), i);
    items.emplace_back(it.target < 0 ? dropped : uint64_t(it.target), uint64_t(it.update));
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < items.size(); ++i) {
    const uint64_t t = items[i].first;
    if (t == dropped || (i > 0 && items[i - 1].first == t)) continue;
    T acc = out[t];
    for (size_t j = i; j < items.size() && items[j].first == t; ++j) acc = layout::add(acc, upd[items[j].second]);
    out[t] = acc;
  }
  return out;
}

template <class T>
void expect_scatter_matches(const ScatterCase& c, DType dtype, DType index_dtype) {
  // Magnitudes over several decades, so that the order of the sums shows;
  // each update stays finite in f16 (|u| < 100 * e^6), so no NaN arises.
  const Array x = testing::random_array(c.operand, dtype, 11, -4, 4);
  Array u = testing::random_array(c.updates, dtype, 12, -100, 100);
  if (is_floating(dtype)) u = lax::mul(u, lax::exp(testing::random_array(c.updates, dtype, 13, -6, 6)));
  const Array idx = index_array(c.index_values, c.indices, index_dtype);
  const Array y = lax::scatter_add(x, idx, u, c.dims);
  ScatterSpec spec{c.dims.update_window_dims, c.dims.inserted_window_dims, c.dims.scatter_dims_to_operand_dims};
  const layout::ScatterMap m = layout::scatter_map(spec, c.operand, c.updates);
  const std::vector<unsigned char> ib = host_bytes(idx);
  std::vector<T> got = index_dtype == DType::i64 ? emulate_scatter<T, int64_t>(m, values_of<T>(x), ib, values_of<T>(u))
                                                 : emulate_scatter<T, int32_t>(m, values_of<T>(x), ib, values_of<T>(u));
  const std::vector<T> want = values_of<T>(y);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
      << c.name << " " << dtype_name(dtype) << " " << dtype_name(index_dtype);
}

TEST(CudaLayoutIndexMath, ScatterAddSortedRunsMatchCpuBitForBit) {
  for (const ScatterCase& c : scatter_cases()) {
    expect_scatter_matches<float>(c, DType::f32, DType::i32);
    expect_scatter_matches<layout::Bf16Bits>(c, DType::bf16, DType::i64);
    expect_scatter_matches<layout::F16Bits>(c, DType::f16, DType::i32);
    expect_scatter_matches<int32_t>(c, DType::i32, DType::i32);
  }
}

TEST(CudaLayoutIndexMath, AddWrapsIntegersAndRoundsHalfFloats) {
  EXPECT_EQ(layout::add<int32_t>(std::numeric_limits<int32_t>::max(), 1), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(layout::add<uint8_t>(250, 10), 4);
  EXPECT_EQ(layout::add<int64_t>(-5, 3), -2);
  // 256 + 1 in bf16 rounds back to 256 (8 bits of mantissa).
  const layout::Bf16Bits a{float_to_bf16(256.0f)}, one{float_to_bf16(1.0f)};
  EXPECT_EQ(layout::add(a, one).bits, a.bits);
  const layout::F16Bits h{float_to_f16(2048.0f)}, h1{float_to_f16(1.0f)};
  EXPECT_EQ(layout::add(h, h1).bits, h.bits);
}

TEST(CudaLayoutIndexMath, HalfFloatRoundingMatchesCore) {
  std::vector<uint32_t> bits = {0u,          0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                0x7f800001u, 0x00000001u, 0x3f808000u, 0x3f818000u, 0x477ff000u, 0x477fefffu,
                                0x33000000u, 0x33000001u, 0x38800000u, 0x387fffffu, 0x7f7fffffu};
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) bits.push_back(uint32_t(u));
  for (uint32_t u : bits) {
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(layout::f32_to_bf16(f), float_to_bf16(f)) << std::hex << u;
    ASSERT_EQ(layout::f32_to_f16(f), float_to_f16(f)) << std::hex << u;
  }
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(layout::bf16_to_f32(uint16_t(h))),
              std::bit_cast<uint32_t>(bf16_to_float(uint16_t(h))))
        << std::hex << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(layout::f16_to_f32(uint16_t(h))),
              std::bit_cast<uint32_t>(f16_to_float(uint16_t(h))))
        << std::hex << h;
  }
}

TEST(CudaLayoutIndexMath, SelectCaseClampsAsCpu) {
  EXPECT_EQ(layout::select_case(-3, 3), 0);
  EXPECT_EQ(layout::select_case(1, 3), 1);
  EXPECT_EQ(layout::select_case(7, 3), 2);
  EXPECT_EQ(layout::select_case(0, 1), 0);
  EXPECT_EQ(layout::select_case(1, 2), 1);
  // Against the CPU kernel, per element and with a scalar selector.
  const std::vector<int32_t> which{-2, 0, 1, 2, 3, 9};
  const std::vector<Array> cases{distinct_i32(Shape{6}, 0), distinct_i32(Shape{6}, 100), distinct_i32(Shape{6}, 200)};
  const Array y = lax::select_n(array(which, Shape{6}), cases);
  std::vector<int32_t> got;
  for (size_t i = 0; i < which.size(); ++i)
    got.push_back(values_of<int32_t>(cases[size_t(layout::select_case(which[i], 3))])[i]);
  EXPECT_EQ(got, values_of<int32_t>(y));
  for (int32_t w : {-1, 5}) {
    const Array s = lax::select_n(scalar<int32_t>(w), cases);
    EXPECT_EQ(values_of<int32_t>(s), values_of<int32_t>(cases[size_t(layout::select_case(w, 3))])) << w;
  }
}

// ---------------------------------------------------------------------------
// The kernels on a GPU against the CPU backend.

TEST(CudaLayoutKernels, RegisteredForEveryPrimitive) {
  for (Prim p : {Prim::transpose, Prim::broadcast_in_dim, Prim::slice, Prim::rev, Prim::pad, Prim::concatenate,
                 Prim::dynamic_slice, Prim::dynamic_update_slice, Prim::gather, Prim::scatter_add, Prim::select_n}) {
    EXPECT_NE(cuda_kernel(p), nullptr) << prim_name(p);
  }
}

// f on the CPU, and on copies of `inputs` on cuda:0: the same bytes.
void expect_same_on_cuda(const std::vector<Array>& inputs, const std::function<Array(const std::vector<Array>&)>& f,
                         const std::string& what) {
  const Array want = f(inputs);
  std::vector<Array> on_gpu;
  for (const Array& x : inputs) on_gpu.push_back(device_put(x, kCuda));
  Array got;
  {
    const DefaultDeviceScope on(kCuda);
    got = f(on_gpu);
  }
  EXPECT_EQ(got.device(), kCuda) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(host_bytes(got), host_bytes(want)) << what;
}

const DType kAllDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                            DType::i32, DType::i64,  DType::u8,  DType::u32};

Array sample(const Shape& s, DType dt, uint32_t seed) {
  return dt == DType::bool_ ? lax::gt(testing::random_array(s, DType::f32, seed), scalar<float>(0.0f))
                            : testing::random_array(s, dt, seed, -100, 100);
}

#define PAX_REQUIRE_CUDA() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaLayoutKernels, TransposeBroadcastSliceRevMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::u8, DType::i64, DType::bool_}) {
    const std::string n = dtype_name(dt);
    const Array x = sample(Shape{3, 4, 5}, dt, 1);
    expect_same_on_cuda(
        {x},
        [](auto& in) {
          return lax::transpose(in[0], {2, 0, 1});
        },
        "transpose " + n);
    expect_same_on_cuda(
        {x},
        [](auto& in) {
          return lax::transpose(in[0], {1, 2, 0});
        },
        "transpose " + n);
    expect_same_on_cuda(
        {sample(Shape{300, 257}, dt, 2)},
        [](auto& in) {
          return lax::transpose(in[0], {1, 0});
        },
        "transpose large " + n);
    expect_same_on_cuda(
        {sample(Shape{4, 1}, dt, 3)},
        [](auto& in) {
          return lax::broadcast_in_dim(in[0], {2, 4, 6}, {1, 2});
        },
        "broadcast " + n);
    expect_same_on_cuda(
        {sample(Shape{}, dt, 4)},
        [](auto& in) {
          return lax::broadcast_in_dim(in[0], {3, 5}, {});
        },
        "broadcast scalar " + n);
    expect_same_on_cuda(
        {x},
        [](auto& in) {
          return lax::slice(in[0], {1, 0, 1}, {3, 4, 5}, {1, 3, 2});
        },
        "slice " + n);
    expect_same_on_cuda(
        {x},
        [](auto& in) {
          return lax::slice(in[0], {0, 1, 0}, {2, 4, 5});
        },
        "slice " + n);
    expect_same_on_cuda(
        {x},
        [](auto& in) {
          return lax::rev(in[0], {0, 2});
        },
        "rev " + n);
    expect_same_on_cuda(
        {sample(Shape{0, 3}, dt, 5)}, [](auto& in) { return lax::rev(in[0], {0}); }, "rev empty " + n);
  }
}

TEST(CudaLayoutKernels, PadAndConcatenateMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt : kAllDTypes) {
    const std::string n = dtype_name(dt);
    const Array x = sample(Shape{4, 5}, dt, 6);
    const Array v = sample(Shape{}, dt, 7);
    for (const auto& cfg : std::vector<std::vector<lax::PadConfig>>{
             {{1, 2, 0}, {0, 3, 0}}, {{-1, 2, 1}, {2, -3, 2}}, {{-2, -1, 0}, {-6, 1, 1}}}) {
      expect_same_on_cuda(
          {x, v}, [&cfg](auto& in) { return lax::pad(in[0], in[1], cfg); }, "pad " + n);
    }
    const Array a = sample(Shape{2, 3, 4}, dt, 8), b = sample(Shape{2, 1, 4}, dt, 9),
                c = sample(Shape{2, 5, 4}, dt, 10);
    expect_same_on_cuda(
        {a, b, c}, [](auto& in) { return lax::concatenate(in, 1); }, "concatenate " + n);
    expect_same_on_cuda(
        {a, a}, [](auto& in) { return lax::concatenate(in, 2); }, "concatenate " + n);
    expect_same_on_cuda(
        {a, sample(Shape{0, 3, 4}, dt, 11), a}, [](auto& in) { return lax::concatenate(in, 0); },
        "concatenate with empty " + n);
  }
}

TEST(CudaLayoutKernels, DynamicSliceAndUpdateReadStartsOnTheDevice) {
  PAX_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    for (DType it : {DType::i32, DType::i64, DType::u32}) {
      for (const std::vector<int64_t>& st : std::vector<std::vector<int64_t>>{{0, 0}, {2, 3}, {-4, 100}, {9, -1}}) {
        if (it == DType::u32 && std::any_of(st.begin(), st.end(), [](int64_t v) { return v < 0; })) continue;
        const std::string n = std::string(dtype_name(dt)) + " starts " + dtype_name(it) + " " + ints_str(st);
        const Array x = sample(Shape{6, 7}, dt, 12);
        const Array u = sample(Shape{3, 2}, dt, 13);
        const Array s0 = index_array({st[0]}, Shape{}, it), s1 = index_array({st[1]}, Shape{}, it);
        expect_same_on_cuda(
            {x, s0, s1},
            [](auto& in) {
              return lax::dynamic_slice(in[0], {in[1], in[2]}, {3, 4});
            },
            "dynamic_slice " + n);
        expect_same_on_cuda(
            {x, u, s0, s1},
            [](auto& in) {
              return lax::dynamic_update_slice(in[0], in[1], {in[2], in[3]});
            },
            "dynamic_update_slice " + n);
      }
    }
  }
}

TEST(CudaIndexingKernels, GatherMatchesCpuForEveryForm) {
  PAX_REQUIRE_CUDA();
  for (const GatherCase& c : gather_cases()) {
    for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::u8, DType::bool_}) {
      for (DType it : {DType::i32, DType::u8, DType::i64}) {
        for (bool fill : {false, true}) {
          const Array x = sample(c.operand, dt, 14);
          const Array idx = index_array(c.index_values, c.indices, it);
          const auto mode = fill ? lax::GatherMode::fill : lax::GatherMode::clip;
          expect_same_on_cuda(
              {x, idx}, [&](auto& in) { return lax::gather(in[0], in[1], c.dims, c.slice_sizes, mode, 3.0); },
              "gather " + c.name + " " + dtype_name(dt) + " " + dtype_name(it) + (fill ? " fill" : " clip"));
        }
      }
    }
  }
}

TEST(CudaIndexingKernels, ScatterAddMatchesCpuBitForBit) {
  PAX_REQUIRE_CUDA();
  for (const ScatterCase& c : scatter_cases()) {
    for (DType dt : kAllDTypes) {
      for (DType it : {DType::i32, DType::i64}) {
        const Array x = sample(c.operand, dt, 15);
        Array u = sample(c.updates, dt, 16);
        if (is_floating(dt)) u = lax::mul(u, lax::exp(testing::random_array(c.updates, dt, 17, -6, 6)));
        const Array idx = index_array(c.index_values, c.indices, it);
        expect_same_on_cuda(
            {x, idx, u}, [&](auto& in) { return lax::scatter_add(in[0], in[1], in[2], c.dims); },
            "scatter_add " + c.name + " " + dtype_name(dt) + " " + dtype_name(it));
      }
    }
  }
  // Repeated runs give the same bits.
  const ScatterCase& c = scatter_cases()[0];
  const Array x = device_put(sample(c.operand, DType::f32, 18), kCuda);
  const Array u = device_put(sample(c.updates, DType::f32, 19), kCuda);
  const Array idx = device_put(index_array(c.index_values, c.indices, DType::i32), kCuda);
  const DefaultDeviceScope on(kCuda);
  const std::vector<unsigned char> first = host_bytes(lax::scatter_add(x, idx, u, c.dims));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(host_bytes(lax::scatter_add(x, idx, u, c.dims)), first);
}

TEST(CudaIndexingKernels, SelectNMatchesCpu) {
  PAX_REQUIRE_CUDA();
  const Shape s{5, 7};
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::u8, DType::bool_}) {
    const std::string n = dtype_name(dt);
    // bool selectors, per element and scalar.
    const Array bw = sample(s, DType::bool_, 20);
    const Array a = sample(s, dt, 21), b = sample(s, dt, 22);
    expect_same_on_cuda(
        {bw, a, b},
        [](auto& in) {
          return lax::select_n(in[0], {in[1], in[2]});
        },
        "bool " + n);
    expect_same_on_cuda(
        {scalar<bool>(true), a, b},
        [](auto& in) {
          return lax::select_n(in[0], {in[1], in[2]});
        },
        "scalar bool " + n);
    // int32 selectors over 1, 2, 3 and 40 cases (more than one launch's
    // worth), with out-of-range values clamped.
    for (int64_t num_cases : {1, 2, 3, 40}) {
      std::vector<int64_t> w = random_indices(s.numel(), num_cases == 2 ? 0 : -3, num_cases + 2, 23);
      std::vector<int32_t> w32(w.begin(), w.end());
      std::vector<Array> in{array(w32, s)};
      for (int64_t k = 0; k < num_cases; ++k) in.push_back(sample(s, dt, uint32_t(30 + k)));
      auto f = [](const std::vector<Array>& v) { return lax::select_n(v[0], {v.begin() + 1, v.end()}); };
      expect_same_on_cuda(in, f, std::to_string(num_cases) + " cases " + n);
      in[0] = scalar<int32_t>(int32_t(num_cases + 5));
      expect_same_on_cuda(in, f, std::to_string(num_cases) + " cases, scalar selector " + n);
    }
  }
}

}  // namespace
}  // namespace pax::cuda

// Conformance of the reductions and the shape primitives, for every dtype
// their shape rules accept, against plain host loops. Inputs are small
// integers (reductions: exact in every dtype) or distinct values (data
// movement: each output names its source), so every comparison is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "pax/backend/conformance/families.h"
#include "pax/ops/lax.h"

namespace pax::conformance {
namespace {

using LD = long double;

PAX_CONFORMANCE_COVERS("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "argmax",
                       "argmin", "cumsum", "reshape", "transpose", "broadcast_in_dim", "squeeze", "expand_dims", "rev",
                       "slice", "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "iota");

// Reduces x over `axes` with `op` from `init` (the output drops the axes).
Host reduce_ref(const Host& x, const Ints& axes, DType out_dtype, LD init, const std::function<LD(LD, LD)>& op) {
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) out_dims.push_back(x.shape[d]);
  }
  Shape out_shape(out_dims);
  std::vector<LD> out(size_t(out_shape.numel()), init);
  for (int64_t i = 0; i < x.shape.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, x.shape), o;
    for (int64_t d = 0; d < x.shape.rank(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) o.push_back(idx[size_t(d)]);
    }
    LD& acc = out[size_t(ravel(o, out_shape))];
    acc = op(acc, x.v[size_t(i)]);
  }
  return host(out_dtype, out_shape, out);
}

// a & b (and) or a | b of two integers of dtype d, as the dtype's bits.
LD bitwise(LD a, LD b, DType d, bool is_and) {
  if (d == DType::bool_) return is_and ? LD(a != 0 && b != 0) : LD(a != 0 || b != 0);
  auto u = [](LD x) { return x < 0 ? uint64_t(int64_t(x)) : uint64_t(x); };
  const uint64_t r = is_and ? u(a) & u(b) : u(a) | u(b);
  return round_to(is_unsigned(d) ? LD(r) : LD(int64_t(r)), d);
}

LD lowest(DType d) {
  if (is_floating(d)) return -INFINITY;
  if (d == DType::bool_ || is_unsigned(d)) return 0;
  return -std::ldexp(1.0L, int(itemsize(d)) * 8 - 1);
}
LD highest(DType d) {
  if (is_floating(d)) return INFINITY;
  if (d == DType::bool_) return 1;
  return std::ldexp(1.0L, int(itemsize(d)) * 8 - (is_unsigned(d) ? 0 : 1)) - 1;
}

TEST(ReductionConformance, EveryReductionEveryDtype) {
  const Shape shape{3, 4, 5};
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, shape, 7);
    if (is_floating(d)) x.v[5] = NAN;  // max / min propagate it
    for (const Ints& axes : {Ints{0}, Ints{1}, Ints{2}, Ints{0, 2}, Ints{0, 1, 2}}) {
      const std::string tag =
          std::string(dtype_name(d)) + " axes " + std::to_string(axes.size()) + "/" + std::to_string(axes[0]);
      struct R {
        const char* name;
        Array (*fn)(const Array&, const Ints&);
        LD init;
        std::function<LD(LD, LD)> op;
      };
      const std::vector<R> reductions = {
          {"reduce_sum", lax::reduce_sum, 0, [](LD a, LD b) { return a + b; }},
          {"reduce_prod", lax::reduce_prod, 1, [](LD a, LD b) { return a * b; }},
          {"reduce_max", lax::reduce_max, lowest(d),
           [](LD a, LD b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }},
          {"reduce_min", lax::reduce_min, highest(d),
           [](LD a, LD b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }},
          // Bitwise on integers, logical on bool.
          {"reduce_and", lax::reduce_and, d == DType::bool_ ? 1 : round_to(-1, d),
           [d](LD a, LD b) { return bitwise(a, b, d, true); }},
          {"reduce_or", lax::reduce_or, 0, [d](LD a, LD b) { return bitwise(a, b, d, false); }},
      };
      for (const R& r : reductions) {
        Fn f = [&r, axes](const std::vector<Array>& a) { return std::vector<Array>{r.fn(a[0], axes)}; };
        if (!accepts(f, {x})) continue;
        Host want = reduce_ref(x, axes, d, r.init, r.op);
        // Products over axis 2 (5 factors) or several axes reach 4^5 and
        // beyond, past the exact range of bf16 / f16, where the result would
        // depend on the order of multiplication: products reduce axes of 3
        // or 4 factors only (at most 256, exact in every float dtype; integers
        // wrap, the same in any order).
        if (std::string(r.name) == "reduce_prod" && (axes.size() > 1 || axes[0] == 2)) continue;
        expect_op(std::string(r.name) + " " + tag, f, {x}, {want});
      }
    }
  }
}

// argmax / argmin: the first extreme; NaN counts as the maximum (and minimum).
TEST(ReductionConformance, ArgmaxArgminEveryDtype) {
  const Shape shape{4, 6};
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, shape, 3);
    if (is_floating(d)) x.v[8] = NAN;
    for (int64_t axis : {0, 1}) {
      for (int is_max = 0; is_max < 2; ++is_max) {
        for (DType index : {DType::i32, DType::i64}) {
          Fn f = [=](const std::vector<Array>& a) {
            return std::vector<Array>{is_max ? lax::argmax(a[0], axis, index) : lax::argmin(a[0], axis, index)};
          };
          if (!accepts(f, {x})) continue;
          const int64_t other = 1 - axis, n = shape[axis];
          std::vector<LD> want;
          for (int64_t o = 0; o < shape[other]; ++o) {
            int64_t best = 0;
            auto at = [&](int64_t k) { return x.v[size_t(axis == 0 ? k * shape[1] + o : o * shape[1] + k)]; };
            for (int64_t k = 1; k < n; ++k) {
              const LD b = at(best), v = at(k);
              if (std::isnan(b)) break;
              if (std::isnan(v) || (is_max ? v > b : v < b)) best = k;
            }
            want.push_back(LD(best));
          }
          expect_op(std::string(is_max ? "argmax " : "argmin ") + dtype_name(d) + " axis " + std::to_string(axis), f,
                    {x}, {host(index, Shape{shape[other]}, want)});
        }
      }
    }
  }
}

TEST(ReductionConformance, CumsumEveryDtype) {
  const Shape shape{3, 7};
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, shape, 5);
    for (int64_t axis : {0, 1}) {
      for (bool reverse : {false, true}) {
        Fn f = [=](const std::vector<Array>& a) { return std::vector<Array>{lax::cumsum(a[0], axis, reverse)}; };
        if (!accepts(f, {x})) continue;
        std::vector<LD> want(x.v.size());
        for (int64_t i = 0; i < shape.numel(); ++i) {
          std::vector<int64_t> idx = unravel(i, shape);
          LD s = 0;
          for (int64_t k = 0; k < shape[axis]; ++k) {
            if (reverse ? k < idx[size_t(axis)] : k > idx[size_t(axis)]) continue;
            std::vector<int64_t> j = idx;
            j[size_t(axis)] = k;
            s += x.v[size_t(ravel(j, shape))];
          }
          want[size_t(i)] = round_to(s, d);
        }
        expect_op(
            std::string("cumsum ") + dtype_name(d) + " axis " + std::to_string(axis) + (reverse ? " reverse" : ""), f,
            {x}, {host(d, shape, want)});
      }
    }
  }
}

// Output element i of a data-movement op comes from input element src(i)
// (-1: the padding value `fill`).
Host gathered(const Host& x, const Shape& out, const std::function<int64_t(const std::vector<int64_t>&)>& src,
              LD fill = 0) {
  std::vector<LD> v;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t s = src(unravel(i, out));
    v.push_back(s < 0 ? fill : x.v[size_t(s)]);
  }
  return host(x.dtype, out, v);
}

TEST(ShapeConformance, DataMovementEveryDtype) {
  const Shape shape{2, 3, 4};
  for (DType d : kAllDTypes) {
    const std::string dt = dtype_name(d);
    Host x = distinct(d, shape);
    auto src3 = [&](int64_t a, int64_t b, int64_t c) { return ravel({a, b, c}, shape); };
    expect_op("reshape " + dt,
              [](const std::vector<Array>& a) {
                return std::vector<Array>{lax::reshape(a[0], {4, 6})};
              },
              {x}, {host(d, Shape{4, 6}, x.v)});
    expect_op("transpose " + dt,
              [](const std::vector<Array>& a) {
                return std::vector<Array>{lax::transpose(a[0], {2, 0, 1})};
              },
              {x},
              {gathered(x, Shape{4, 2, 3}, [&](const std::vector<int64_t>& o) { return src3(o[1], o[2], o[0]); })});
    expect_op("broadcast_in_dim " + dt,
              [](const std::vector<Array>& a) {
                return std::vector<Array>{lax::broadcast_in_dim(a[0], {2, 5, 3, 4}, {0, 2, 3})};
              },
              {x},
              {gathered(x, Shape{2, 5, 3, 4}, [&](const std::vector<int64_t>& o) { return src3(o[0], o[2], o[3]); })});
    expect_op("expand_dims " + dt,
              [](const std::vector<Array>& a) { return std::vector<Array>{lax::expand_dims(a[0], {1})}; }, {x},
              {host(d, Shape{2, 1, 3, 4}, x.v)});
    Host y = distinct(d, Shape{2, 1, 4});
    expect_op("squeeze " + dt, [](const std::vector<Array>& a) { return std::vector<Array>{lax::squeeze(a[0], {1})}; },
              {y}, {host(d, Shape{2, 4}, y.v)});
    expect_op("rev " + dt,
              [](const std::vector<Array>& a) {
                return std::vector<Array>{lax::rev(a[0], {0, 2})};
              },
              {x}, {gathered(x, shape, [&](const std::vector<int64_t>& o) { return src3(1 - o[0], o[1], 3 - o[2]); })});
    expect_op(
        "slice " + dt,
        [](const std::vector<Array>& a) {
          return std::vector<Array>{lax::slice(a[0], {0, 1, 0}, {2, 3, 4}, {1, 1, 3})};
        },
        {x},
        {gathered(x, Shape{2, 2, 2}, [&](const std::vector<int64_t>& o) { return src3(o[0], 1 + o[1], 3 * o[2]); })});
    // Start indices (1, 2, 3) for a (2, 2, 2) window: clamped to (0, 1, 2).
    Host starts = host(DType::i32, Shape{3}, {1, 2, 3});
    expect_op(
        "dynamic_slice " + dt,
        [](const std::vector<Array>& a) {
          std::vector<Array> s;
          for (int64_t k = 0; k < 3; ++k) s.push_back(lax::reshape(lax::slice(a[1], {k}, {k + 1}), {}));
          return std::vector<Array>{lax::dynamic_slice(a[0], s, {2, 2, 2})};
        },
        {x, starts},
        {gathered(x, Shape{2, 2, 2}, [&](const std::vector<int64_t>& o) { return src3(o[0], 1 + o[1], 2 + o[2]); })});
    Host upd = host(d, Shape{1, 2, 2}, {1, 0, 1, 0});
    {
      Host want = x;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t c = 0; c < 2; ++c) want.v[size_t(src3(1, 1 + b, 2 + c))] = upd.v[size_t(b * 2 + c)];
      }
      // Start (5, 1, 2): the first index clamps to 1.
      Host st = host(DType::i32, Shape{3}, {5, 1, 2});
      expect_op("dynamic_update_slice " + dt,
                [](const std::vector<Array>& a) {
                  std::vector<Array> s;
                  for (int64_t k = 0; k < 3; ++k) s.push_back(lax::reshape(lax::slice(a[2], {k}, {k + 1}), {}));
                  return std::vector<Array>{lax::dynamic_update_slice(a[0], a[1], s)};
                },
                {x, upd, st}, {want});
    }
    Host z = distinct(d, Shape{2, 1, 4});
    {
      // Columns 0-2 and 4-6 from x, column 3 from z.
      Host want = gathered(x, Shape{2, 7, 4}, [&](const std::vector<int64_t>& o) -> int64_t {
        return o[1] == 3 ? -1 : src3(o[0], o[1] < 3 ? o[1] : o[1] - 4, o[2]);
      });
      for (int64_t a = 0; a < 2; ++a) {
        for (int64_t c = 0; c < 4; ++c) want.v[size_t(ravel({a, 3, c}, want.shape))] = z.v[size_t(a * 4 + c)];
      }
      expect_op("concatenate " + dt,
                [](const std::vector<Array>& a) {
                  return std::vector<Array>{lax::concatenate({a[0], a[1], a[0]}, 1)};
                },
                {x, z}, {want});
    }
    // pad: (lo 1, hi -1, interior 1) on axis 1, (lo -1, hi 2, interior 0) on axis 2.
    Host padv = host(d, Shape{}, {d == DType::bool_ ? 1.0L : 9});
    expect_op("pad " + dt,
              [](const std::vector<Array>& a) {
                return std::vector<Array>{lax::pad(a[0], a[1], {{0, 0, 0}, {1, -1, 1}, {-1, 2, 0}})};
              },
              {x, padv},
              {gathered(
                  x, Shape{2, 5, 5},
                  [&](const std::vector<int64_t>& o) -> int64_t {
                    // axis 1: positions 1, 3, 5 hold rows 0, 1, 2 (5 is cut by hi -1).
                    const int64_t p1 = o[1] - 1;
                    if (p1 < 0 || p1 % 2) return -1;
                    const int64_t r = p1 / 2, c = o[2] + 1;
                    if (r >= 3 || c >= 4) return -1;
                    return src3(o[0], r, c);
                  },
                  padv.v[0])});
    for (int64_t dim : {0, 1}) {
      Fn f = [d, dim](const std::vector<Array>&) { return std::vector<Array>{lax::iota(d, {3, 4}, dim)}; };
      if (!accepts(f, {})) continue;
      std::vector<LD> want;
      for (int64_t i = 0; i < 12; ++i) want.push_back(dim == 0 ? i / 4 : i % 4);
      expect_op("iota " + dt + " dimension " + std::to_string(dim), f, {}, {host(d, Shape{3, 4}, want)});
    }
  }
}

}  // namespace
}  // namespace pax::conformance

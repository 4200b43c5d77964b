// Conformance of gather / scatter_add, dot_general, conv_general_dilated,
// the windowed max and its two derivative maps, sort and top_k, for every
// dtype their shape rules accept, against plain host loops. Inputs are small
// integers, so products and sums are exact in every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "pax/backend/conformance/families.h"
#include "pax/ops/lax.h"

namespace pax::conformance {
namespace {

using LD = long double;

PAX_CONFORMANCE_COVERS("gather", "scatter_add", "dot_general", "conv_general_dilated", "reduce_window_max",
                       "select_and_scatter_add", "select_and_gather_add", "sort", "top_k");

TEST(IndexingConformance, GatherRowsClipAndFill) {
  // operand (5, 4), indices (4, 1): rows 3, 0, 7 (out of range), -2.
  for (DType d : kAllDTypes) {
    Host x = distinct(d, Shape{5, 4});
    Host idx = host(DType::i32, Shape{4, 1}, {3, 0, 7, -2});
    for (lax::GatherMode mode : {lax::GatherMode::clip, lax::GatherMode::fill}) {
      Fn f = [mode](const std::vector<Array>& a) {
        return std::vector<Array>{lax::gather(a[0], a[1], {{1}, {0}, {0}}, {1, 4}, mode, 0.0)};
      };
      if (!accepts(f, {x, idx})) continue;
      std::vector<LD> want;
      for (LD r : idx.v) {
        const bool out = r < 0 || r > 4;
        const int64_t row = int64_t(std::clamp<LD>(r, 0, 4));
        for (int64_t c = 0; c < 4; ++c)
          want.push_back(out && mode == lax::GatherMode::fill ? 0 : x.v[size_t(row * 4 + c)]);
      }
      expect_op(std::string("gather ") + dtype_name(d) + (mode == lax::GatherMode::fill ? " fill" : " clip"), f,
                {x, idx}, {host(d, Shape{4, 4}, want)});
    }
  }
}

TEST(IndexingConformance, ScatterAddDuplicatesAndDroppedWindows) {
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, Shape{5, 3}, 1);
    Host idx = host(DType::i32, Shape{4, 1}, {1, 4, 1, 9});  // 1 twice; 9 is dropped
    Host upd = small_ints(d, Shape{4, 3}, 2);
    Fn f = [](const std::vector<Array>& a) {
      return std::vector<Array>{lax::scatter_add(a[0], a[1], a[2], {{1}, {0}, {0}})};
    };
    if (!accepts(f, {x, idx, upd})) continue;
    std::vector<LD> want = x.v;
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t r = int64_t(idx.v[size_t(i)]);
      if (r < 0 || r > 4) continue;
      for (int64_t c = 0; c < 3; ++c) want[size_t(r * 3 + c)] += upd.v[size_t(i * 3 + c)];
    }
    for (LD& w : want) w = round_to(w, d);
    expect_op(std::string("scatter_add ") + dtype_name(d), f, {x, idx, upd}, {host(d, Shape{5, 3}, want)});
  }
}

TEST(LinalgConformance, DotGeneralBatchedAndTransposed) {
  for (DType d : kAllDTypes) {
    // Batched: (2, 3, 4) x (2, 4, 5) contracting 2 / 1, batch 0 / 0.
    Host a = small_ints(d, Shape{2, 3, 4}, 3), b = small_ints(d, Shape{2, 4, 5}, 4);
    Fn f = [](const std::vector<Array>& x) {
      return std::vector<Array>{lax::dot_general(x[0], x[1], {{2}, {1}, {0}, {0}})};
    };
    if (!accepts(f, {a, b})) continue;
    std::vector<LD> want;
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 5; ++j) {
          LD s = 0;
          for (int64_t k = 0; k < 4; ++k) s += a.v[size_t(n * 12 + i * 4 + k)] * b.v[size_t(n * 20 + k * 5 + j)];
          want.push_back(round_to(s, d));
        }
      }
    }
    const DType out = d == DType::bool_ ? DType::bool_ : d;
    expect_op(std::string("dot_general batched ") + dtype_name(d), f, {a, b}, {host(out, Shape{2, 3, 5}, want)});
    // Both operands contracted on their axis 0: (4, 3) x (4, 6) -> (3, 6).
    Host c = small_ints(d, Shape{4, 3}, 5), e = small_ints(d, Shape{4, 6}, 6);
    Fn g = [](const std::vector<Array>& x) {
      return std::vector<Array>{lax::dot_general(x[0], x[1], {{0}, {0}, {}, {}})};
    };
    std::vector<LD> want2;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 6; ++j) {
        LD s = 0;
        for (int64_t k = 0; k < 4; ++k) s += c.v[size_t(k * 3 + i)] * e.v[size_t(k * 6 + j)];
        want2.push_back(round_to(s, d));
      }
    }
    expect_op(std::string("dot_general transposed lhs ") + dtype_name(d), g, {c, e}, {host(out, Shape{3, 6}, want2)});
  }
}

// NCHW x OIHW -> NCHW with strides, padding, dilations and feature groups.
TEST(LinalgConformance, ConvGeneralDilated) {
  struct Conf {
    int64_t stride, pad, lhs_dil, rhs_dil, groups;
  };
  for (DType d : kAllDTypes) {
    for (const Conf& cf :
         {Conf{1, 1, 1, 1, 1}, Conf{2, 0, 1, 1, 1}, Conf{1, 2, 1, 2, 1}, Conf{1, 1, 2, 1, 1}, Conf{1, 1, 1, 1, 2}}) {
      const int64_t N = 2, C = 4, H = 6, W = 5, O = 4, K = 3, I = C / cf.groups;
      Host x = small_ints(d, Shape{N, C, H, W}, 7), w = small_ints(d, Shape{O, I, K, K}, 8);
      Fn f = [cf](const std::vector<Array>& a) {
        return std::vector<Array>{lax::conv_general_dilated(
            a[0], a[1], {cf.stride, cf.stride}, {{cf.pad, cf.pad}, {cf.pad, cf.pad}}, {cf.lhs_dil, cf.lhs_dil},
            {cf.rhs_dil, cf.rhs_dil}, lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"), cf.groups)};
      };
      if (!accepts(f, {x, w})) continue;
      // The input dilated by lhs_dil, padded, and the dilated kernel slid over it.
      const int64_t Hd = (H - 1) * cf.lhs_dil + 1, Wd = (W - 1) * cf.lhs_dil + 1;
      const int64_t Kd = (K - 1) * cf.rhs_dil + 1;
      const int64_t OH = (Hd + 2 * cf.pad - Kd) / cf.stride + 1, OW = (Wd + 2 * cf.pad - Kd) / cf.stride + 1;
      auto in = [&](int64_t n, int64_t c, int64_t y, int64_t x_) -> LD {
        y -= cf.pad, x_ -= cf.pad;
        if (y < 0 || x_ < 0 || y >= Hd || x_ >= Wd || y % cf.lhs_dil || x_ % cf.lhs_dil) return 0;
        return x.v[size_t(((n * C + c) * H + y / cf.lhs_dil) * W + x_ / cf.lhs_dil)];
      };
      std::vector<LD> want;
      const int64_t per_group = O / cf.groups;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < O; ++o) {
          for (int64_t oy = 0; oy < OH; ++oy) {
            for (int64_t ox = 0; ox < OW; ++ox) {
              LD s = 0;
              const int64_t g = o / per_group;
              for (int64_t i = 0; i < I; ++i) {
                for (int64_t ky = 0; ky < K; ++ky) {
                  for (int64_t kx = 0; kx < K; ++kx) {
                    s += in(n, g * I + i, oy * cf.stride + ky * cf.rhs_dil, ox * cf.stride + kx * cf.rhs_dil) *
                         w.v[size_t(((o * I + i) * K + ky) * K + kx)];
                  }
                }
              }
              want.push_back(round_to(s, d));
            }
          }
        }
      }
      expect_op(std::string("conv_general_dilated ") + dtype_name(d) + " stride " + std::to_string(cf.stride) +
                    " pad " + std::to_string(cf.pad) + " lhs_dil " + std::to_string(cf.lhs_dil) + " rhs_dil " +
                    std::to_string(cf.rhs_dil) + " groups " + std::to_string(cf.groups),
                f, {x, w}, {host(d, Shape{N, O, OH, OW}, want)});
    }
  }
}

// f64 products keep f64 precision: random operands, a long double
// reference, and the standard bound for a sum of n products,
// |error| <= n * 2^-53 * sum |x_i w_i| (each product and addition rounds once).
::testing::AssertionResult within_product_bound(const Array& got, const std::vector<LD>& want,
                                                const std::vector<LD>& magnitude, int64_t n) {
  const Host h = read_back(got);
  for (size_t i = 0; i < want.size(); ++i) {
    const LD bound = LD(n) * std::ldexp(1.0L, -53) * magnitude[i];
    if (std::fabs(h.v[i] - want[i]) > bound) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << double(h.v[i]) << ", expected "
                                           << double(want[i]) << " (bound " << double(bound) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(LinalgConformance, F64ProductsKeepF64Precision) {
  const std::vector<LD> a = random_values(DType::f64, 3 * 8, 31, -1, 1),
                        b = random_values(DType::f64, 8 * 2, 32, -1, 1);
  std::vector<LD> want, mag;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      LD s = 0, m = 0;
      for (int64_t k = 0; k < 8; ++k)
        s += a[size_t(i * 8 + k)] * b[size_t(k * 2 + j)], m += std::fabs(a[size_t(i * 8 + k)] * b[size_t(k * 2 + j)]);
      want.push_back(s), mag.push_back(m);
    }
  }
  // The same numbers as a 1x1 convolution: (1, 8, 3, 1) * (2, 8, 1, 1).
  std::vector<LD> xc(24), wc(16);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t k = 0; k < 8; ++k) xc[size_t(k * 3 + i)] = a[size_t(i * 8 + k)];
  }
  for (int64_t k = 0; k < 8; ++k) {
    for (int64_t j = 0; j < 2; ++j) wc[size_t(j * 8 + k)] = b[size_t(k * 2 + j)];
  }
  std::vector<LD> want_conv(6), mag_conv(6);
  for (int64_t j = 0; j < 2; ++j) {
    for (int64_t i = 0; i < 3; ++i)
      want_conv[size_t(j * 3 + i)] = want[size_t(i * 2 + j)], mag_conv[size_t(j * 3 + i)] = mag[size_t(i * 2 + j)];
  }
  for_each_device_and_mode([&](Device d, Mode m) {
    std::vector<Array> dot = run(m,
                                 [](const std::vector<Array>& x) {
                                   return std::vector<Array>{lax::dot_general(x[0], x[1], {{1}, {0}, {}, {}})};
                                 },
                                 {make(a, Shape{3, 8}, DType::f64, d), make(b, Shape{8, 2}, DType::f64, d)});
    EXPECT_TRUE(within_product_bound(dot[0], want, mag, 8)) << "dot_general";
    std::vector<Array> conv =
        run(m,
            [](const std::vector<Array>& x) {
              return std::vector<Array>{lax::conv_general_dilated(x[0], x[1], {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1},
                                                                  lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"))};
            },
            {make(xc, Shape{1, 8, 3, 1}, DType::f64, d), make(wc, Shape{2, 8, 1, 1}, DType::f64, d)});
    EXPECT_TRUE(within_product_bound(conv[0], want_conv, mag_conv, 8));
  });
}

// 2-D windows (2, 3) with strides (2, 1) and padding (1, 0) / (0, 1): the
// max (first NaN, else first largest) of each window; the scatter of a
// source to each window's argmax; the gather of a tangent from it.
TEST(WindowConformance, MaxAndItsDerivativeMaps) {
  const Shape shape{5, 6};
  const lax::Window win{{2, 3}, {2, 1}, {1, 0, 0, 1}};
  const int64_t OH = (5 + 1 - 2) / 2 + 1, OW = (6 + 1 - 3) / 1 + 1;
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, shape, 9);
    if (is_floating(d)) x.v[7] = NAN;
    Fn f = [win](const std::vector<Array>& a) { return std::vector<Array>{lax::reduce_window_max(a[0], win)}; };
    if (!accepts(f, {x})) continue;
    std::vector<LD> maxes;
    std::vector<int64_t> arg;  // flat operand index of each window's max
    for (int64_t oy = 0; oy < OH; ++oy) {
      for (int64_t ox = 0; ox < OW; ++ox) {
        LD best = -INFINITY;
        int64_t at = -1;
        for (int64_t ky = 0; ky < 2; ++ky) {
          for (int64_t kx = 0; kx < 3; ++kx) {
            const int64_t y = oy * 2 + ky - 1, xx = ox + kx;
            if (y < 0 || y >= 5 || xx >= 6) continue;
            const LD v = x.v[size_t(y * 6 + xx)];
            if (at >= 0 && std::isnan(best)) continue;
            if (at < 0 || std::isnan(v) || v > best) best = v, at = y * 6 + xx;
          }
        }
        maxes.push_back(best);
        arg.push_back(at);
      }
    }
    expect_op(std::string("reduce_window_max ") + dtype_name(d), f, {x}, {host(d, Shape{OH, OW}, maxes)});
    Host src = small_ints(d, Shape{OH, OW}, 10);
    std::vector<LD> scattered(30, 0);
    for (size_t o = 0; o < arg.size(); ++o) scattered[size_t(arg[o])] += src.v[o];
    for (LD& v : scattered) v = round_to(v, d);
    expect_op(
        std::string("select_and_scatter_add ") + dtype_name(d),
        [win](const std::vector<Array>& a) { return std::vector<Array>{lax::select_and_scatter_add(a[0], a[1], win)}; },
        {src, x}, {host(d, shape, scattered)});
    Host tan = small_ints(d, shape, 11);
    std::vector<LD> picked;
    for (int64_t at : arg) picked.push_back(tan.v[size_t(at)]);
    expect_op(
        std::string("select_and_gather_add ") + dtype_name(d),
        [win](const std::vector<Array>& a) { return std::vector<Array>{lax::select_and_gather_add(a[0], a[1], win)}; },
        {tan, x}, {host(d, Shape{OH, OW}, picked)});
  }
}

// Total order of sort: -0 == 0, NaN last.
bool sort_less(LD a, LD b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

TEST(SortConformance, SortAndTopK) {
  const Shape shape{3, 9};
  for (DType d : kAllDTypes) {
    Host x = small_ints(d, shape, 12);
    if (is_floating(d)) x.v[2] = NAN, x.v[4] = -0.0L, x.v[13] = NAN;
    Host payload = distinct(DType::i32, shape);
    // Two operands, one key, along the last axis; stable.
    Fn f = [](const std::vector<Array>& a) { return lax::sort({a[0], a[1]}, -1, true, 1); };
    if (accepts(f, {x, payload})) {
      std::vector<LD> keys, vals;
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<int64_t> order(9);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
          return sort_less(x.v[size_t(r * 9 + i)], x.v[size_t(r * 9 + j)]);
        });
        for (int64_t i : order) keys.push_back(x.v[size_t(r * 9 + i)]), vals.push_back(payload.v[size_t(r * 9 + i)]);
      }
      expect_op(std::string("sort ") + dtype_name(d), f, {x, payload},
                {host(d, shape, keys), host(DType::i32, shape, vals)});
    }
    Fn t = [](const std::vector<Array>& a) {
      auto [v, i] = lax::top_k(a[0], 4);
      return std::vector<Array>{v, i};
    };
    if (accepts(t, {x})) {
      std::vector<LD> vals, idx;
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<int64_t> order(9);
        std::iota(order.begin(), order.end(), 0);
        // Descending, NaN first (the largest), ties by the lower index.
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
          return sort_less(x.v[size_t(r * 9 + j)], x.v[size_t(r * 9 + i)]);
        });
        for (int64_t k = 0; k < 4; ++k)
          vals.push_back(x.v[size_t(r * 9 + order[size_t(k)])]), idx.push_back(LD(order[size_t(k)]));
      }
      expect_op(std::string("top_k ") + dtype_name(d), t, {x},
                {host(d, Shape{3, 4}, vals), host(DType::i32, Shape{3, 4}, idx)});
    }
  }
}

}  // namespace
}  // namespace pax::conformance

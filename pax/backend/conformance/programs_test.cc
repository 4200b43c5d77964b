// Conformance of the primitives that need a program around them: the random
// bits primitives (against a host Threefry-2x32 written from the Random123
// specification, and for determinism), stop_gradient, jit_call and
// custom_vjp_call, the collectives under vmap with a named axis (the mapped
// axis plays the process group), and the control-flow primitives as small
// programs with host loops as references.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "pax/api/control_flow.h"
#include "pax/api/transforms.h"
#include "pax/backend/conformance/families.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"

namespace pax::conformance {
namespace {

using LD = long double;

PAX_CONFORMANCE_COVERS("threefry2x32", "random_bits", "stop_gradient", "jit_call", "custom_vjp_call", "psum", "pmax",
                       "pmin", "all_gather", "psum_scatter", "ppermute", "axis_index", "cond", "while", "scan",
                       "remat");

// Threefry-2x32 with 20 rounds (Random123's threefry2x32_R(20)).
std::pair<uint32_t, uint32_t> threefry(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  x0 += ks[0];
  x1 += ks[1];
  for (int r = 0; r < 20; ++r) {
    x0 += x1;
    x1 = (x1 << rot[r % 8]) | (x1 >> (32 - rot[r % 8]));
    x1 ^= x0;
    if (r % 4 == 3) {
      const int s = r / 4 + 1;
      x0 += ks[s % 3];
      x1 += ks[(s + 1) % 3] + uint32_t(s);
    }
  }
  return {x0, x1};
}

TEST(RandomConformance, Threefry2x32AgainstTheSpecification) {
  // Random123's known answer for zero key and counter pins the host version.
  ASSERT_EQ(threefry(0, 0, 0, 0), std::make_pair(0x6b200159u, 0x99ba4efeu));
  const int64_t n = 37;
  std::vector<LD> a, b, c, e;
  for (int64_t i = 0; i < n; ++i) {
    a.push_back(LD(uint32_t(i * 2654435761u)));
    b.push_back(LD(uint32_t(~i * 40503u)));
    c.push_back(LD(uint32_t(i)));
    e.push_back(LD(uint32_t(0xffffffffu - i * 3)));
  }
  std::vector<LD> y0, y1;
  for (int64_t i = 0; i < n; ++i) {
    auto [p, q] =
        threefry(uint32_t(a[size_t(i)]), uint32_t(b[size_t(i)]), uint32_t(c[size_t(i)]), uint32_t(e[size_t(i)]));
    y0.push_back(p), y1.push_back(q);
  }
  const Shape s{n};
  expect_op("threefry2x32",
            [](const std::vector<Array>& x) {
              auto [p, q] = lax::threefry2x32(x[0], x[1], x[2], x[3]);
              return std::vector<Array>{p, q};
            },
            {host(DType::u32, s, a), host(DType::u32, s, b), host(DType::u32, s, c), host(DType::u32, s, e)},
            {host(DType::u32, s, y0), host(DType::u32, s, y1)});
}

TEST(RandomConformance, RandomBitsMatchJaxsLayoutAndRepeat) {
  // jax.random's (non-partitionable) threefry random_bits: counters iota(n)
  // padded to even length, halves encrypted pairwise, concatenated.
  for (int64_t n : {1, 6, 7}) {
    const uint32_t k0 = 42, k1 = 0xdeadbeefu;
    std::vector<uint32_t> cnt(static_cast<size_t>(n), 0u);
    for (int64_t i = 0; i < n; ++i) cnt[size_t(i)] = uint32_t(i);
    if (n % 2) cnt.push_back(0);
    const size_t m = cnt.size() / 2;
    std::vector<LD> lo, hi;
    for (size_t i = 0; i < m; ++i) {
      auto [p, q] = threefry(k0, k1, cnt[i], cnt[m + i]);
      lo.push_back(p), hi.push_back(q);
    }
    lo.insert(lo.end(), hi.begin(), hi.end());
    lo.resize(size_t(n));
    Fn f = [n](const std::vector<Array>& x) { return std::vector<Array>{lax::random_bits(x[0], {n})}; };
    const Host key = host(DType::u32, Shape{2}, {k0, k1});
    expect_op("random_bits n=" + std::to_string(n), f, {key}, {host(DType::u32, Shape{n}, lo)});
    // Deterministic: the same key twice gives the same bits, in one program.
    expect_op("random_bits twice n=" + std::to_string(n),
              [n](const std::vector<Array>& x) {
                return std::vector<Array>{lax::random_bits(x[0], {n}), lax::random_bits(x[0], {n})};
              },
              {key}, {host(DType::u32, Shape{n}, lo), host(DType::u32, Shape{n}, lo)});
  }
}

TEST(TransformConformance, StopGradientJitCallAndCustomVjp) {
  const Shape s{5};
  const Host x = host(DType::f32, s, {-2, -0.5L, 0, 1.5L, 3});
  std::vector<LD> sq;
  for (LD v : x.v) sq.push_back(v * v);
  // stop_gradient: the identity on values.
  expect_op("stop_gradient", [](const std::vector<Array>& a) { return std::vector<Array>{stop_gradient(a[0])}; }, {x},
            {x});
  // A jitted function called inside another program becomes a jit_call.
  auto inner = pax::jit([](const Array& a) { return lax::mul(a, a); });
  expect_op("jit_call", [inner](const std::vector<Array>& a) { return std::vector<Array>{inner(a[0])}; }, {x},
            {host(DType::f32, s, sq)});
  // custom_vjp: f's value; its gradient is bwd's (here 3 * ct, not 2x).
  auto f = custom_vjp([](const Array& a) { return lax::mul(a, a); },
                      [](const Array& a) { return std::make_pair(lax::mul(a, a), a); },
                      [](const Array&, const Array& ct) { return lax::mul(ct, full_like(ct, 3.0)); });
  expect_op("custom_vjp_call", [f](const std::vector<Array>& a) { return std::vector<Array>{f(a[0])}; }, {x},
            {host(DType::f32, s, sq)});
  expect_op("custom_vjp_call gradient",
            [f](const std::vector<Array>& a) {
              return std::vector<Array>{grad([f](const Array& v) { return sum(f(v)); })(a[0])};
            },
            {x}, {host(DType::f32, s, {3, 3, 3, 3, 3})});
  // stop_gradient's derivative is zero.
  expect_op("stop_gradient gradient",
            [](const std::vector<Array>& a) {
              return std::vector<Array>{grad([](const Array& v) { return sum(lax::mul(stop_gradient(v), v)); })(a[0])};
            },
            {x}, {x});
}

// Collectives over a vmap axis named "i" of size 4: member m holds row m.
TEST(CollectiveConformance, UnderVmapWithANamedAxis) {
  const int64_t members = 4;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    const Host x = small_ints(d, Shape{members, 6}, 21);
    auto at = [&](int64_t m, int64_t j) { return x.v[size_t(m * 6 + j)]; };
    auto mapped = [](std::function<Array(const Array&)> body) {
      return [body](const std::vector<Array>& a) {
        return std::vector<Array>{vmap(body, {.in_axes = {0}, .out_axes = {0}, .axis_name = "i"})(a[0])};
      };
    };
    std::vector<LD> sum, mx, mn;
    for (int64_t m = 0; m < members; ++m) {
      for (int64_t j = 0; j < 6; ++j) {
        LD s = 0, hi = -INFINITY, lo = INFINITY;
        for (int64_t k = 0; k < members; ++k) s += at(k, j), hi = std::max(hi, at(k, j)), lo = std::min(lo, at(k, j));
        sum.push_back(s), mx.push_back(hi), mn.push_back(lo);
      }
    }
    const std::string dt = dtype_name(d);
    const Shape out{members, 6};
    expect_op("psum " + dt, mapped([](const Array& v) { return lax::psum(v, "i"); }), {x}, {host(d, out, sum)});
    expect_op("pmax " + dt, mapped([](const Array& v) { return lax::pmax(v, "i"); }), {x}, {host(d, out, mx)});
    expect_op("pmin " + dt, mapped([](const Array& v) { return lax::pmin(v, "i"); }), {x}, {host(d, out, mn)});
    // all_gather: every member gets the whole (4, 6).
    std::vector<LD> gathered;
    for (int64_t m = 0; m < members; ++m) gathered.insert(gathered.end(), x.v.begin(), x.v.end());
    expect_op("all_gather " + dt, mapped([](const Array& v) { return lax::all_gather(v, "i"); }), {x},
              {host(d, Shape{members, members, 6}, gathered)});
    // psum_scatter (untiled over a (4,) axis): member m keeps element m of the sum.
    const Host y = small_ints(d, Shape{members, members}, 22);
    std::vector<LD> scattered;
    for (int64_t m = 0; m < members; ++m) {
      LD s = 0;
      for (int64_t k = 0; k < members; ++k) s += y.v[size_t(k * members + m)];
      scattered.push_back(s);
    }
    expect_op("psum_scatter " + dt, mapped([](const Array& v) { return lax::psum_scatter(v, "i", 0, false); }), {y},
              {host(d, Shape{members}, scattered)});
    // ppermute (a shift by one that member 3 does not send on): member m
    // gets member m - 1's row, member 0 zeros.
    std::vector<LD> shifted(6, 0);
    shifted.insert(shifted.end(), x.v.begin(), x.v.begin() + 6 * (members - 1));
    expect_op("ppermute " + dt, mapped([](const Array& v) {
                return lax::ppermute(v, "i", {{0, 1}, {1, 2}, {2, 3}});
              }),
              {x}, {host(d, out, shifted)});
    if (d == DType::f32) {
      // Zeros for member 0 even where its own row is not finite.
      Host with_inf = x;
      with_inf.v[0] = std::numeric_limits<LD>::infinity();
      std::vector<LD> moved = shifted;
      moved[6] = with_inf.v[0];
      expect_op("ppermute of a non-finite row", mapped([](const Array& v) {
                  return lax::ppermute(v, "i", {{0, 1}, {1, 2}, {2, 3}});
                }),
                {with_inf}, {host(d, out, moved)});
    }
    expect_op("axis_index " + dt,
              mapped([](const Array& v) { return lax::add(lax::axis_index("i"), lax::mul(v, full_like(v, 0))); }),
              {host(DType::i32, Shape{members}, {5, 6, 7, 8})}, {host(DType::i32, Shape{members}, {0, 1, 2, 3})});
  }
}

TEST(ControlFlowConformance, CondWhileScanRemat) {
  const Host x = host(DType::f32, Shape{4}, {1, -2, 3, 0.5L});
  for (int branch : {0, 1, 2, 7}) {
    // cond with an index (clamped to the last branch).
    std::vector<LD> want;
    for (LD v : x.v) want.push_back(branch == 0 ? v + 1 : branch == 1 ? v * v : -v);
    expect_op("cond index " + std::to_string(branch),
              [](const std::vector<Array>& a) {
                return std::vector<Array>{cond(
                    a[1],
                    branches([](const Array& v) { return lax::add(v, full_like(v, 1.0)); },
                             [](const Array& v) { return lax::mul(v, v); }, [](const Array& v) { return lax::neg(v); }),
                    a[0])};
              },
              {x, host(DType::i32, Shape{}, {LD(branch)})}, {host(DType::f32, Shape{4}, want)});
  }
  // while: double until the sum exceeds 100.
  {
    std::vector<LD> v = {1, 2, 3, 0.5L};
    auto total = [&] { return v[0] + v[1] + v[2] + v[3]; };
    while (total() <= 100) {
      for (LD& e : v) e *= 2;
    }
    expect_op("while",
              [](const std::vector<Array>& a) {
                return std::vector<Array>{while_loop([](const Array& c) { return lax::le(sum(c), scalar(100.0f)); },
                                                     [](const Array& c) { return lax::add(c, c); }, a[0])};
              },
              {host(DType::f32, Shape{4}, {1, 2, 3, 0.5L})}, {host(DType::f32, Shape{4}, v)});
  }
  // scan: running sum of rows, forward and reverse, with the carries stacked.
  for (bool reverse : {false, true}) {
    const Host xs = small_ints(DType::f32, Shape{5, 3}, 23);
    std::vector<LD> carry(3, 0), ys(15);
    for (int64_t t = 0; t < 5; ++t) {
      const int64_t r = reverse ? 4 - t : t;
      for (int64_t j = 0; j < 3; ++j)
        carry[size_t(j)] += xs.v[size_t(r * 3 + j)], ys[size_t(r * 3 + j)] = carry[size_t(j)];
    }
    expect_op(std::string("scan") + (reverse ? " reverse" : ""),
              [reverse](const std::vector<Array>& a) {
                auto [c, y] = scan(
                    [](const Array& c, const Array& row) {
                      Array n = lax::add(c, row);
                      return std::make_pair(n, n);
                    },
                    a[1], a[0], std::nullopt, reverse);
                return std::vector<Array>{c, y};
              },
              {xs, host(DType::f32, Shape{3}, {0, 0, 0})},
              {host(DType::f32, Shape{3}, carry), host(DType::f32, Shape{5, 3}, ys)});
  }
  // remat: the values of the function it wraps, and its gradient.
  {
    std::vector<LD> y, g;
    for (LD v : x.v) y.push_back(v * v * v), g.push_back(3 * v * v);
    auto cube = checkpoint([](const Array& v) { return lax::mul(lax::mul(v, v), v); });
    expect_op("remat",
              [cube](const std::vector<Array>& a) {
                return std::vector<Array>{cube(a[0]), grad([cube](const Array& v) { return sum(cube(v)); })(a[0])};
              },
              {x}, {host(DType::f32, Shape{4}, y), host(DType::f32, Shape{4}, g)});
  }
}

}  // namespace
}  // namespace pax::conformance

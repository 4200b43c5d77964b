// Checks that drive a function through every transform (used by the
// per-family tests): VJP and JVP against central finite differences (inputs
// should be f64), second-order VJP, vmap against an explicit loop, and jit
// against eager execution.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::testing {

// A vmap axis of an argument (nullopt: not batched).
using Axis = std::optional<int64_t>;

using ArrayFn = std::function<Array(const std::vector<Array>&)>;

// One row of a table-driven derivative test (pax/prims/*_ad_test.cc): a
// function of arrays and the arguments its rules are checked at.
struct AdCase {
  const char* name;
  ArrayFn f;
  std::vector<Array> args;
};

// f64 values in [-1.5, 1.5): the arguments of those tables.
inline Array ad_argument(const Shape& shape, uint32_t seed) { return random_array(shape, DType::f64, seed, -1.5, 1.5); }

// A random array of x's shape and dtype (floats in [-1, 1); integers and bool
// are copied from x, since they are usually indices or masks).
inline Array random_like(const Array& x, uint32_t seed) {
  if (!is_floating(x.dtype())) return x;
  return random_array(x.shape(), x.dtype(), seed, -1.0, 1.0);
}

// sum(a * b) in f64 on the host.
inline double vdot(const Array& a, const Array& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

namespace detail {

inline std::vector<size_t> float_positions(const std::vector<Array>& args) {
  std::vector<size_t> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_floating(args[i].dtype())) out.push_back(i);
  }
  return out;
}

// f as a function of its floating arguments only (the others held fixed).
inline ArrayFn of_floats(const ArrayFn& f, const std::vector<Array>& args, const std::vector<size_t>& pos) {
  return [f, args, pos](const std::vector<Array>& floats) {
    std::vector<Array> all = args;
    for (size_t k = 0; k < pos.size(); ++k) all[pos[k]] = floats[k];
    return f(all);
  };
}

inline ::testing::AssertionResult close(double got, double want, double tol, const char* what) {
  const double scale = std::max({1.0, std::fabs(got), std::fabs(want)});
  if (std::fabs(got - want) <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": got " << got << ", expected " << want << " (tol " << tol << ")";
}

// (f(x + eps v) - f(x - eps v)) / (2 eps), elementwise, in f64.
inline std::vector<double> central_difference(const ArrayFn& f, const std::vector<Array>& x,
                                              const std::vector<Array>& v, double eps) {
  std::vector<Array> plus, minus;
  for (size_t i = 0; i < x.size(); ++i) {
    plus.push_back(add(x[i], multiply(v[i], eps)).astype(x[i].dtype()));
    minus.push_back(subtract(x[i], multiply(v[i], eps)).astype(x[i].dtype()));
  }
  std::vector<double> a = f(plus).to_vector<double>(), b = f(minus).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) a[i] = (a[i] - b[i]) / (2 * eps);
  return a;
}

}  // namespace detail

// <ct, J v> by finite differences equals <vjp(ct), v> (floating inputs only).
inline ::testing::AssertionResult check_vjp(const ArrayFn& f, const std::vector<Array>& args, double eps = 1e-5,
                                            double tol = 1e-6, uint32_t seed = 1) {
  std::vector<size_t> pos = detail::float_positions(args);
  if (pos.empty()) return ::testing::AssertionSuccess();
  ArrayFn g = detail::of_floats(f, args, pos);
  std::vector<Array> x, v;
  for (size_t k = 0; k < pos.size(); ++k) {
    x.push_back(args[pos[k]]);
    v.push_back(random_like(args[pos[k]], seed + uint32_t(k) * 7919));
  }
  auto [out, backward] = vjp(g, x);
  Array ct = random_like(out, seed + 104729);
  std::vector<Array> grads = backward(ct);
  double analytic = 0;
  for (size_t k = 0; k < x.size(); ++k) analytic += vdot(grads[k], v[k]);
  std::vector<double> fd = detail::central_difference(g, x, v, eps);
  std::vector<double> ctv = ct.to_vector<double>();
  double numeric = 0;
  for (size_t i = 0; i < fd.size(); ++i) numeric += fd[i] * ctv[i];
  return detail::close(analytic, numeric, tol, "vjp vs finite differences");
}

// J v from jvp equals the finite difference, elementwise.
inline ::testing::AssertionResult check_jvp(const ArrayFn& f, const std::vector<Array>& args, double eps = 1e-5,
                                            double tol = 1e-6, uint32_t seed = 2) {
  std::vector<size_t> pos = detail::float_positions(args);
  if (pos.empty()) return ::testing::AssertionSuccess();
  ArrayFn g = detail::of_floats(f, args, pos);
  std::vector<Array> x, v;
  for (size_t k = 0; k < pos.size(); ++k) {
    x.push_back(args[pos[k]]);
    v.push_back(random_like(args[pos[k]], seed + uint32_t(k) * 7919));
  }
  auto [out, tangent] = jvp(g, std::tuple<std::vector<Array>>(x), std::tuple<std::vector<Array>>(v));
  std::vector<double> fd = detail::central_difference(g, x, v, eps);
  std::vector<double> t = tangent.to_vector<double>();
  for (size_t i = 0; i < fd.size(); ++i) {
    auto r = detail::close(t[i], fd[i], tol, "jvp vs finite differences");
    if (!r) return r << " at element " << i;
  }
  return ::testing::AssertionSuccess();
}

// Second order: the VJP of x -> <vjp(f)(x)(ct), w> against finite differences.
inline ::testing::AssertionResult check_vjp_order2(const ArrayFn& f, const std::vector<Array>& args, double eps = 1e-4,
                                                   double tol = 1e-5, uint32_t seed = 3) {
  std::vector<size_t> pos = detail::float_positions(args);
  if (pos.empty()) return ::testing::AssertionSuccess();
  ArrayFn g = detail::of_floats(f, args, pos);
  std::vector<Array> x;
  for (size_t k : pos) x.push_back(args[k]);
  Array out = g(x);
  Array ct = random_like(out, seed);
  std::vector<Array> w;
  for (size_t k = 0; k < x.size(); ++k) w.push_back(random_like(x[k], seed + 31 * uint32_t(k + 1)));
  ArrayFn h = [g, ct, w](const std::vector<Array>& xs) {
    auto [o, backward] = vjp(g, xs);
    std::vector<Array> grads = backward(ct);
    Array total = zeros({}, xs[0].dtype());
    for (size_t k = 0; k < grads.size(); ++k) total = total + sum(grads[k] * w[k]);
    return total;
  };
  return check_vjp(h, x, eps, tol, seed + 17);
}

// vmap(f) over `batch` random variants of the mapped arguments equals f
// applied to each variant, stacked (mapped arguments get the batch axis at
// in_axes[i]; nullopt arguments are shared).
inline ::testing::AssertionResult check_vmap(const ArrayFn& f, const std::vector<Array>& args,
                                             const std::vector<std::optional<int64_t>>& in_axes, int64_t batch = 3,
                                             double tol = 1e-12, uint32_t seed = 4) {
  std::vector<std::vector<Array>> variants(size_t(batch), args);
  std::vector<Array> batched = args;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!in_axes[i]) continue;
    std::vector<Array> items;
    for (int64_t b = 0; b < batch; ++b) {
      Array v = b == 0 ? args[i] : random_like(args[i], seed + uint32_t(b * 131 + i));
      variants[size_t(b)][i] = v;
      items.push_back(v);
    }
    batched[i] = stack(items, *in_axes[i]);
  }
  FlatFn flat = [f](std::span<const Array> xs) {
    return std::vector<Array>{f(std::vector<Array>(xs.begin(), xs.end()))};
  };
  std::vector<int64_t> out_axes{0};
  Array got = vmap_flat(flat, batched, in_axes, out_axes, "")[0];
  std::vector<Array> expected;
  for (int64_t b = 0; b < batch; ++b) expected.push_back(f(variants[size_t(b)]));
  Array want = stack(expected, 0);
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "vmap shape " << got.shape() << " != loop shape " << want.shape();
  }
  return all_close(got, want, tol, tol);
}

// The VJP of f at `args` against a fixed random cotangent, as a function of
// the arguments: every floating input's cotangent raveled and concatenated
// (so check_jit can compare the backward pass under jit with eager).
inline ArrayFn vjp_as_fn(const ArrayFn& f, const std::vector<Array>& args) {
  const std::vector<size_t> pos = detail::float_positions(args);
  const Array ct = random_like(f(args), 99);
  return [f, pos, ct](const std::vector<Array>& xs) {
    std::vector<Array> floats;
    for (size_t k : pos) floats.push_back(xs[k]);
    auto [out, back] = vjp(detail::of_floats(f, xs, pos), floats);
    std::vector<Array> flat;
    for (const Array& g : back(ct)) flat.push_back(ravel(g));
    return concatenate(flat, 0);
  };
}

// jit(f) equals f run eagerly (bit-exact when tol is 0).
inline ::testing::AssertionResult check_jit(const ArrayFn& f, const std::vector<Array>& args, double tol = 0) {
  auto jf = jit([f](const std::vector<Array>& xs) { return f(xs); });
  Array got = jf(args);
  Array want = f(args);
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "jit gives " << got.aval().str() << ", eager " << want.aval().str();
  }
  return all_close(got, want, tol, tol);
}

}  // namespace pax::testing

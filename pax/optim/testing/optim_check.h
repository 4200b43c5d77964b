// Test helpers for the optimizer suites: host-side parameter trees, a
// quadratic toy problem, running a transformation for a few steps, and host
// reference optimizers (slow f64 loops of the published formulas) to
// compare against. Only the *_test.cc files of pax/optim include this (it
// is not installed, like pax/testing).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/ops/numpy.h"
#include "pax/optim/gradient_transformation.h"
#include "pax/testing/testing.h"

namespace pax::optim::test {

// One leaf of a flat {name: array} tree, on the host.
struct Leaf {
  std::string name;
  Shape shape;
  std::vector<double> v;
};
using HostTree = std::vector<Leaf>;

inline Tree to_tree(const HostTree& h, DType dtype = DType::f64) {
  Tree::Dict items;
  for (const Leaf& l : h) items.emplace_back(l.name, array(l.v, l.shape).astype(dtype));
  return Tree::dict(std::move(items));
}

inline HostTree to_host(const Tree& t) {
  HostTree h;
  for (const auto& [k, c] : t.entries()) h.push_back({k, c.leaf().shape(), c.leaf().to_vector<double>()});
  return h;
}

// Same names and shapes, every value f(value).
inline HostTree map_host(const HostTree& h, const std::function<double(double)>& f) {
  HostTree out = h;
  for (Leaf& l : out)
    for (double& x : l.v) x = f(x);
  return out;
}

inline HostTree random_host(const std::vector<std::pair<std::string, Shape>>& leaves, uint32_t seed, double lo = -1,
                            double hi = 1) {
  HostTree h;
  for (const auto& [name, shape] : leaves) {
    h.push_back({name, shape, pax::testing::random_values(shape.numel(), seed++, lo, hi)});
  }
  return h;
}

inline ::testing::AssertionResult trees_close(const Tree& got, const HostTree& want, double rtol = 1e-10,
                                              double atol = 1e-12) {
  if (!got.is_dict() || got.size() != want.size()) return ::testing::AssertionFailure() << "got " << got.str();
  for (const Leaf& l : want) {
    auto r = pax::testing::all_close(got[l.name].leaf(), l.v, rtol, atol);
    if (!r) return r << " (leaf '" << l.name << "')";
    if (got[l.name].leaf().shape() != l.shape) return ::testing::AssertionFailure() << "shape of " << l.name;
  }
  return ::testing::AssertionSuccess();
}

// The toy problem: loss = 0.5 * sum(a * (x - c)^2), gradient a * (x - c).
struct Quadratic {
  HostTree a, c;
  HostTree grad(const HostTree& x) const {
    HostTree g = x;
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = 0; j < g[i].v.size(); ++j) g[i].v[j] = a[i].v[j] * (x[i].v[j] - c[i].v[j]);
    return g;
  }
  Tree grad(const Tree& x) const {
    Tree ta = to_tree(a), tc = to_tree(c);
    Tree::Dict items;
    for (const auto& [k, leaf] : x.entries()) {
      Array xv = leaf.leaf();
      items.emplace_back(k, (ta[k].leaf().astype(xv.dtype()) * (xv - tc[k].leaf().astype(xv.dtype()))));
    }
    return Tree::dict(std::move(items));
  }
  double max_distance(const Tree& x) const {
    double d = 0;
    HostTree h = to_host(x);
    for (size_t i = 0; i < h.size(); ++i)
      for (size_t j = 0; j < h[i].v.size(); ++j) d = std::max(d, std::fabs(h[i].v[j] - c[i].v[j]));
    return d;
  }
};

// A weight matrix and a bias vector, curvatures in [0.5, 2].
inline Quadratic make_quadratic(Shape w = {3, 4}, Shape b = {4}) {
  std::vector<std::pair<std::string, Shape>> leaves = {{"w", w}, {"b", b}};
  return {random_host(leaves, 11, 0.5, 2.0), random_host(leaves, 21, -1, 1)};
}

inline HostTree quadratic_start(const Quadratic& q) {
  std::vector<std::pair<std::string, Shape>> leaves;
  for (const Leaf& l : q.a) leaves.emplace_back(l.name, l.shape);
  return random_host(leaves, 31, -2, 2);
}

// A host optimizer: (grads, params) -> updates, keeping its own state.
using HostStep = std::function<HostTree(const HostTree& grads, const HostTree& params)>;

// Runs `steps` steps of tx on the quadratic from x0; returns the params
// after each step.
inline std::vector<Tree> run_quadratic(const GradientTransformation& tx, const Quadratic& q, Tree x, int steps) {
  Tree state = tx.init(x);
  std::vector<Tree> out;
  for (int t = 0; t < steps; ++t) {
    auto [u, s] = tx.update(q.grad(x), state, x);
    state = s;
    x = apply_updates(x, u);
    out.push_back(x);
  }
  return out;
}

inline std::vector<HostTree> run_quadratic(HostStep step, const Quadratic& q, HostTree x, int steps) {
  std::vector<HostTree> out;
  for (int t = 0; t < steps; ++t) {
    HostTree u = step(q.grad(x), x);
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = 0; j < x[i].v.size(); ++j) x[i].v[j] += u[i].v[j];
    out.push_back(x);
  }
  return out;
}

// Compares tx against the host reference on the quadratic, step by step.
inline void expect_matches_reference(const GradientTransformation& tx, HostStep reference, const Quadratic& q,
                                     const HostTree& x0, int steps, double rtol = 1e-10, double atol = 1e-12) {
  std::vector<Tree> got = run_quadratic(tx, q, to_tree(x0), steps);
  std::vector<HostTree> want = run_quadratic(std::move(reference), q, x0, steps);
  for (int t = 0; t < steps; ++t) EXPECT_TRUE(trees_close(got[size_t(t)], want[size_t(t)], rtol, atol)) << "step " << t;
}

// A host reference applied element by element: f(g, param, t, state) where
// `state` is a per-element vector of `state_size` doubles starting at `init`
// and t counts steps from 1.
inline HostStep elementwise(size_t state_size, double init,
                            std::function<double(double g, double p, int t, std::vector<double>& s)> f) {
  auto states = std::make_shared<std::vector<std::vector<std::vector<double>>>>();
  auto t = std::make_shared<int>(0);
  return [=](const HostTree& g, const HostTree& p) {
    if (states->empty()) {
      for (const Leaf& l : g) states->emplace_back(l.v.size(), std::vector<double>(state_size, init));
    }
    ++*t;
    HostTree u = g;
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = 0; j < g[i].v.size(); ++j) u[i].v[j] = f(g[i].v[j], p[i].v[j], *t, (*states)[i][j]);
    return u;
  };
}

// Composes host references like chain(): each sees the previous one's output.
inline HostStep host_chain(std::vector<HostStep> steps) {
  return [steps](const HostTree& g, const HostTree& p) {
    HostTree u = g;
    for (const HostStep& s : steps) u = s(u, p);
    return u;
  };
}

inline double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Adafactor's statistics on the host, for one leaf of any rank: returns the
// update and advances v_row / v_col (factored over (d1, d0)) or v.
struct HostFactored {
  Shape shape;
  bool factored;
  int64_t d1 = 0, d0 = 0;
  std::vector<double> v_row, v_col, v;
  static Shape drop(const Shape& s, int64_t axis) {
    std::vector<int64_t> d = s.dims();
    d.erase(d.begin() + axis);
    return Shape(d);
  }
  HostFactored(Shape s, bool f, int64_t a1, int64_t a0) : shape(s), factored(f), d1(a1), d0(a0) {
    if (factored) {
      v_row.assign(size_t(drop(shape, d0).numel()), 0.0);
      v_col.assign(size_t(drop(shape, d1).numel()), 0.0);
    } else {
      v.assign(size_t(shape.numel()), 0.0);
    }
  }
  // Flat index in `shape` without `axis` of the multi-index idx.
  static int64_t index_without(const std::vector<int64_t>& idx, const Shape& shape, int64_t axis) {
    std::vector<int64_t> i = idx;
    i.erase(i.begin() + axis);
    return pax::testing::ravel(i, drop(shape, axis));
  }
  std::vector<double> step(const std::vector<double>& g, int t, double decay_rate, double eps) {
    double decay = 1 - std::pow(double(t), -decay_rate);  // t counts from 1
    std::vector<double> u(g.size());
    if (!factored) {
      for (size_t i = 0; i < g.size(); ++i) {
        v[i] = decay * v[i] + (1 - decay) * (g[i] * g[i] + eps);
        u[i] = g[i] / std::sqrt(v[i]);
      }
      return u;
    }
    std::vector<double> row_sum(v_row.size(), 0.0), col_sum(v_col.size(), 0.0);
    for (int64_t i = 0; i < shape.numel(); ++i) {
      auto idx = pax::testing::unravel(i, shape);
      double sq = g[size_t(i)] * g[size_t(i)] + eps;
      row_sum[size_t(index_without(idx, shape, d0))] += sq;
      col_sum[size_t(index_without(idx, shape, d1))] += sq;
    }
    for (size_t r = 0; r < v_row.size(); ++r)
      v_row[r] = decay * v_row[r] + (1 - decay) * row_sum[r] / double(shape[d0]);
    for (size_t c = 0; c < v_col.size(); ++c)
      v_col[c] = decay * v_col[c] + (1 - decay) * col_sum[c] / double(shape[d1]);
    // Mean of v_row over the d1 axis (its position once d0 is dropped).
    Shape row_shape = drop(shape, d0);
    int64_t rd1 = d1 > d0 ? d1 - 1 : d1;
    std::vector<double> rc_mean(size_t(drop(row_shape, rd1).numel()), 0.0);
    for (int64_t r = 0; r < row_shape.numel(); ++r) {
      rc_mean[size_t(index_without(pax::testing::unravel(r, row_shape), row_shape, rd1))] +=
          v_row[size_t(r)] / double(row_shape[rd1]);
    }
    for (int64_t i = 0; i < shape.numel(); ++i) {
      auto idx = pax::testing::unravel(i, shape);
      int64_t r = index_without(idx, shape, d0);
      double rcm = rc_mean[size_t(index_without(pax::testing::unravel(r, row_shape), row_shape, rd1))];
      u[size_t(i)] =
          g[size_t(i)] / std::sqrt(v_row[size_t(r)] / rcm) / std::sqrt(v_col[size_t(index_without(idx, shape, d1))]);
    }
    return u;
  }
};

}  // namespace pax::optim::test

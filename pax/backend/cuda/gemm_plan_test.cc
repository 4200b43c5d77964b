// dot_general's cuBLASLt layout plan, exhaustively over small ranks: every
// plan is executed by a host emulation of cuBLASLt's strided-batched
// column-major GEMM (reading and writing exactly where cuBLASLt would, after
// the plan's copies) and compared with a product computed straight from the
// dimension numbers.
#include "pax/backend/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

using Ints64 = std::vector<int64_t>;

int64_t product(const Ints64& v) { return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>()); }

// Calls f(index) for every index of `shape`, row-major order.
void for_each_index(const Ints64& shape, const std::function<void(const Ints64&)>& f) {
  if (product(shape) == 0) return;
  Ints64 idx(shape.size(), 0);
  while (true) {
    f(idx);
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

int64_t offset(const Ints64& idx, const Ints64& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

// dot_general from its definition: out[batch..., lhs free..., rhs free...]
// sums lhs * rhs over the contracting indices; `out` holds the output at
// offsets `out_strides`.
void reference_dot(const DotDims& d, const Ints64& ls, const std::vector<float>& lhs, const Ints64& rs,
                   const std::vector<float>& rhs, const Ints64& out_shape, const Ints64& out_strides,
                   std::vector<float>& out) {
  const Ints64 lfree = free_axes(int64_t(ls.size()), d.lhs_contracting, d.lhs_batch);
  const Ints64 rfree = free_axes(int64_t(rs.size()), d.rhs_contracting, d.rhs_batch);
  Ints64 kshape;
  for (int64_t a : d.lhs_contracting) kshape.push_back(ls[size_t(a)]);
  const Ints64 lstr = Shape(ls).strides(), rstr = Shape(rs).strides();
  for_each_index(out_shape, [&](const Ints64& o) {
    Ints64 li(ls.size()), ri(rs.size());
    size_t p = 0;
    for (size_t i = 0; i < d.lhs_batch.size(); ++i, ++p) {
      li[size_t(d.lhs_batch[i])] = o[p];
      ri[size_t(d.rhs_batch[i])] = o[p];
    }
    for (int64_t a : lfree) li[size_t(a)] = o[p++];
    for (int64_t a : rfree) ri[size_t(a)] = o[p++];
    float acc = 0;
    if (product(kshape) > 0) {
      for_each_index(kshape, [&](const Ints64& k) {
        for (size_t i = 0; i < k.size(); ++i) {
          li[size_t(d.lhs_contracting[i])] = k[i];
          ri[size_t(d.rhs_contracting[i])] = k[i];
        }
        acc += lhs[size_t(offset(li, lstr))] * rhs[size_t(offset(ri, rstr))];
      });
    }
    out[size_t(offset(o, out_strides))] = acc;
  });
}

// transpose(x, perm) materialised contiguous, as the plan's copies are.
std::vector<float> materialise(const Ints64& shape, const std::vector<float>& x, const Ints64& perm) {
  std::vector<float> out(x.size());
  const Ints64 src = Shape(shape).strides(), dst = permuted_strides(shape, perm);
  for_each_index(shape, [&](const Ints64& i) { out[size_t(offset(i, dst))] = x[size_t(offset(i, src))]; });
  return out;
}

// Executes `plan` as cuBLASLt would: its copies, then for each of the outer
// calls and each matrix of the batch D = op(A) op(B) column-major with the
// plan's leading dimensions and strides, then the move out of the temporary.
// Returns why the plan is not one cuBLASLt accepts or reads or writes out of
// bounds, or nullopt.
std::optional<std::string> emulate(const GemmPlan& plan, const std::vector<float>& lhs, const std::vector<float>& rhs,
                                   std::vector<float>& out) {
  using Kind = GemmPlan::Kind;
  if (plan.kind == Kind::empty) return std::nullopt;
  if (plan.kind == Kind::zeros) {
    for_each_index(plan.out_shape, [&](const Ints64& i) { out[size_t(offset(i, plan.out_strides))] = 0; });
    return std::nullopt;
  }
  if (plan.kind != Kind::gemm) return "plan is " + plan.str();
  const std::vector<float> l = plan.lhs_perm.empty() ? lhs : materialise(plan.lhs_shape, lhs, plan.lhs_perm);
  const std::vector<float> r = plan.rhs_perm.empty() ? rhs : materialise(plan.rhs_shape, rhs, plan.rhs_perm);
  std::vector<float> temp(plan.out_perm.empty() ? 0 : size_t(product(plan.out_shape)), NAN);
  std::vector<float>& d = plan.out_perm.empty() ? out : temp;
  const std::vector<float>& a = plan.swap ? r : l;
  const std::vector<float>& b = plan.swap ? l : r;

  // cuBLASLt's checks: sizes, and leading dimensions at least the rows stored.
  if (plan.m < 1 || plan.n < 1 || plan.k < 1 || plan.batch < 1 || plan.outer < 1) return "empty sizes in " + plan.str();
  if (plan.lda < (plan.trans_a ? plan.k : plan.m)) return "lda below the rows of A in " + plan.str();
  if (plan.ldb < (plan.trans_b ? plan.n : plan.k)) return "ldb below the rows of B in " + plan.str();
  if (plan.ldc < plan.m) return "ldc below the rows of D in " + plan.str();

  std::vector<int> written(d.size(), 0);
  for (int64_t o = 0; o < plan.outer; ++o) {
    for (int64_t bi = 0; bi < plan.batch; ++bi) {
      const int64_t a0 = o * plan.outer_stride_a + bi * plan.stride_a;
      const int64_t b0 = o * plan.outer_stride_b + bi * plan.stride_b;
      const int64_t c0 = o * plan.outer_stride_c + bi * plan.stride_c;
      for (int64_t i = 0; i < plan.m; ++i) {
        for (int64_t j = 0; j < plan.n; ++j) {
          float acc = 0;
          for (int64_t p = 0; p < plan.k; ++p) {
            const int64_t ai = a0 + (plan.trans_a ? p + i * plan.lda : i + p * plan.lda);
            const int64_t bj = b0 + (plan.trans_b ? j + p * plan.ldb : p + j * plan.ldb);
            if (ai < 0 || ai >= int64_t(a.size())) return "A read out of bounds in " + plan.str();
            if (bj < 0 || bj >= int64_t(b.size())) return "B read out of bounds in " + plan.str();
            acc += a[size_t(ai)] * b[size_t(bj)];
          }
          const int64_t ci = c0 + i + j * plan.ldc;
          if (ci < 0 || ci >= int64_t(d.size())) return "D written out of bounds in " + plan.str();
          if (written[size_t(ci)]++) return "D element written twice in " + plan.str();
          d[size_t(ci)] = acc;
        }
      }
    }
  }
  if (!plan.out_perm.empty()) {
    const Ints64 src = permuted_strides(plan.out_shape, plan.out_perm);
    for_each_index(plan.out_shape,
                   [&](const Ints64& i) { out[size_t(offset(i, plan.out_strides))] = temp[size_t(offset(i, src))]; });
  }
  return std::nullopt;
}

// One dot_general with its data and reference result.
struct Case {
  DotDims dims;
  Ints64 ls, rs;
  std::optional<Ints64> out_strides;
  Ints64 out_shape;
  std::vector<float> lhs, rhs, expected;
  int64_t extent = 0;
};

Ints64 output_shape(const DotDims& d, const Ints64& ls, const Ints64& rs) {
  Ints64 out;
  for (int64_t a : d.lhs_batch) out.push_back(ls[size_t(a)]);
  for (int64_t a : free_axes(int64_t(ls.size()), d.lhs_contracting, d.lhs_batch)) out.push_back(ls[size_t(a)]);
  for (int64_t a : free_axes(int64_t(rs.size()), d.rhs_contracting, d.rhs_batch)) out.push_back(rs[size_t(a)]);
  return out;
}

int64_t extent_of(const Ints64& shape, const Ints64& strides) {
  if (product(shape) == 0) return 0;
  int64_t e = 1;
  for (size_t i = 0; i < shape.size(); ++i) e += (shape[i] - 1) * strides[i];
  return e;
}

constexpr float kUnwritten = -12345.0f;

Case make_case(const DotDims& d, const Ints64& ls, const Ints64& rs, std::optional<Ints64> out_strides,
               std::mt19937& rng) {
  Case c{d, ls, rs, std::move(out_strides), output_shape(d, ls, rs), {}, {}, {}, 0};
  // Small integers: every sum is exact in f32, so results compare equal.
  std::uniform_int_distribution<int> value(-3, 3);
  c.lhs.resize(size_t(product(ls)));
  c.rhs.resize(size_t(product(rs)));
  for (float& v : c.lhs) v = float(value(rng));
  for (float& v : c.rhs) v = float(value(rng));
  const Ints64 os = c.out_strides ? *c.out_strides : Shape(c.out_shape).strides();
  c.extent = extent_of(c.out_shape, os);
  c.expected.assign(size_t(c.extent), kUnwritten);
  reference_dot(d, ls, c.lhs, rs, c.rhs, c.out_shape, os, c.expected);
  return c;
}

GemmPlan plan_of(const Case& c, const GemmPlanOptions& options = {}) {
  return plan_gemm(c.dims, Shape(c.ls), Shape(c.rs), DType::f32, DType::f32, DType::f32,
                   c.out_strides ? &*c.out_strides : nullptr, options);
}

// Runs the plan; "" when it gives the reference result, else what differs.
std::string check_plan(const Case& c, const GemmPlan& plan) {
  std::vector<float> out(size_t(c.extent), kUnwritten);
  if (auto err = emulate(plan, c.lhs, c.rhs, out)) return *err;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != c.expected[i]) {
      return "element at offset " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
             std::to_string(c.expected[i]) + "; " + plan.str();
    }
  }
  return "";
}

std::string case_str(const Case& c) {
  std::string s = "lhs " + ints_str(c.ls) + " rhs " + ints_str(c.rs) + " contracting " +
                  ints_str(c.dims.lhs_contracting) + "/" + ints_str(c.dims.rhs_contracting) + " batch " +
                  ints_str(c.dims.lhs_batch) + "/" + ints_str(c.dims.rhs_batch);
  if (c.out_strides) s += " out strides " + ints_str(*c.out_strides);
  return s;
}

// Every ordered choice of `count` distinct values from `pool`.
void for_each_arrangement(const Ints64& pool, size_t count, const std::function<void(const Ints64&)>& f) {
  Ints64 chosen;
  std::vector<bool> used(pool.size(), false);
  std::function<void()> rec = [&] {
    if (chosen.size() == count) {
      f(chosen);
      return;
    }
    for (size_t i = 0; i < pool.size(); ++i) {
      if (used[i]) continue;
      used[i] = true;
      chosen.push_back(pool[i]);
      rec();
      chosen.pop_back();
      used[i] = false;
    }
  };
  rec();
}

// Every choice of `count` values from `pool`, increasing.
void for_each_subset(const Ints64& pool, size_t count, const std::function<void(const Ints64&)>& f) {
  for_each_arrangement(pool, count, [&](const Ints64& a) {
    if (std::is_sorted(a.begin(), a.end())) f(a);
  });
}

Ints64 without(int64_t rank, const Ints64& taken) {
  Ints64 out;
  for (int64_t a = 0; a < rank; ++a) {
    if (std::find(taken.begin(), taken.end(), a) == taken.end()) out.push_back(a);
  }
  return out;
}

// Every dot_general of operands of rank 1..4: every set of batch pairs (in
// every order) and contracting pairs (every pairing), sizes 1..3 drawn at
// random (paired axes equal), with the output row-major and written
// transposed, sometimes into a larger array.
void for_each_dot(std::mt19937& rng, const std::function<void(const Case&)>& f) {
  std::uniform_int_distribution<int64_t> size(1, 3);
  std::bernoulli_distribution coin(0.5);
  for (int64_t rl = 1; rl <= 4; ++rl) {
    for (int64_t rr = 1; rr <= 4; ++rr) {
      for (size_t nb = 0; nb <= size_t(std::min(rl, rr)); ++nb) {
        for (size_t nc = 0; nb + nc <= size_t(std::min(rl, rr)); ++nc) {
          Ints64 lall(static_cast<size_t>(rl)), rall(static_cast<size_t>(rr));
          std::iota(lall.begin(), lall.end(), 0);
          std::iota(rall.begin(), rall.end(), 0);
          for_each_arrangement(lall, nb, [&](const Ints64& lb) {
            for_each_subset(without(rl, lb), nc, [&](const Ints64& lc) {
              for_each_arrangement(rall, nb, [&](const Ints64& rb) {
                for_each_arrangement(without(rr, rb), nc, [&](const Ints64& rc) {
                  const DotDims d{lc, rc, lb, rb};
                  Ints64 ls(static_cast<size_t>(rl)), rs(static_cast<size_t>(rr));
                  for (int64_t& s : ls) s = size(rng);
                  for (int64_t& s : rs) s = size(rng);
                  for (size_t i = 0; i < nb; ++i) rs[size_t(rb[i])] = ls[size_t(lb[i])];
                  for (size_t i = 0; i < nc; ++i) rs[size_t(rc[i])] = ls[size_t(lc[i])];
                  f(make_case(d, ls, rs, std::nullopt, rng));
                  // The output transposed in place: a random order of its
                  // axes, half the time with padding (a view of a larger array).
                  const Ints64 os = output_shape(d, ls, rs);
                  Ints64 perm(os.size());
                  std::iota(perm.begin(), perm.end(), 0);
                  std::shuffle(perm.begin(), perm.end(), rng);
                  Ints64 padded = os;
                  if (coin(rng)) {
                    for (int64_t& s : padded) s += coin(rng) ? 1 : 0;
                  }
                  f(make_case(d, ls, rs, permuted_strides(padded, perm), rng));
                });
              });
            });
          });
        }
      }
    }
  }
}

TEST(GemmPlan, EveryDotGeneralOfSmallRankMatchesItsDefinition) {
  std::mt19937 rng(20240611);
  int64_t cases = 0, with_copy = 0, two_level = 0, temp_out = 0, failures = 0;
  for_each_dot(rng, [&](const Case& c) {
    ++cases;
    const GemmPlan plan = plan_of(c);
    ASSERT_EQ(plan.kind, GemmPlan::Kind::gemm) << case_str(c) << ": " << plan.str();
    with_copy += plan.copies() > 0;
    // Matrices (or vectors), read transposed or not, into a matrix result in
    // any layout need no copy, nor does a row-major batch of them laid out
    // batch-first.
    const bool matrices = c.ls.size() <= 2 && c.rs.size() <= 2 && c.out_shape.size() <= 2;
    const bool batch_first = c.ls.size() <= 3 && c.rs.size() <= 3 && c.out_shape.size() <= 3 &&
                             c.dims.lhs_batch == Ints64{0} && c.dims.rhs_batch == Ints64{0} && !c.out_strides;
    if (matrices || batch_first) EXPECT_EQ(plan.copies(), 0) << case_str(c) << ": " << plan.str();
    two_level += plan.outer > 1;
    temp_out += !plan.out_perm.empty();
    const std::string err = check_plan(c, plan);
    if (!err.empty() && failures++ < 10) ADD_FAILURE() << case_str(c) << ": " << err;
  });
  EXPECT_EQ(failures, 0);
  std::printf(
      "GemmPlan: %lld dot_generals, %lld with a copy, %lld through an output temporary, %lld as a two-level "
      "batch\n",
      (long long)cases, (long long)with_copy, (long long)temp_out, (long long)two_level);
  EXPECT_GT(cases, 5000);
}

TEST(GemmPlan, SizeZeroDimensions) {
  std::mt19937 rng(7);
  const DotDims matmul{{1}, {0}, {}, {}};
  const DotDims batched{{2}, {1}, {0}, {0}};
  struct Z {
    DotDims d;
    Ints64 ls, rs;
    GemmPlan::Kind kind;
  };
  const std::vector<Z> zs = {
      {matmul, {0, 3}, {3, 4}, GemmPlan::Kind::empty},
      {matmul, {2, 3}, {3, 0}, GemmPlan::Kind::empty},
      {matmul, {2, 0}, {0, 4}, GemmPlan::Kind::zeros},
      {matmul, {0, 0}, {0, 4}, GemmPlan::Kind::empty},
      {batched, {0, 2, 3}, {0, 3, 4}, GemmPlan::Kind::empty},
      {batched, {5, 2, 0}, {5, 0, 4}, GemmPlan::Kind::zeros},
      {DotDims{{0}, {0}, {}, {}}, {0}, {0}, GemmPlan::Kind::zeros},
  };
  for (const Z& z : zs) {
    for (bool strided : {false, true}) {
      const Ints64 os = output_shape(z.d, z.ls, z.rs);
      Ints64 perm(os.size());
      std::iota(perm.rbegin(), perm.rend(), 0);
      const Case c =
          make_case(z.d, z.ls, z.rs, strided ? std::optional(permuted_strides(os, perm)) : std::nullopt, rng);
      const GemmPlan plan = plan_of(c);
      EXPECT_EQ(plan.kind, z.kind) << case_str(c) << ": " << plan.str();
      EXPECT_EQ(check_plan(c, plan), "") << case_str(c);
    }
  }
  // An empty contraction of an int product is zeros too: no kernel is needed.
  EXPECT_EQ(plan_gemm(matmul, Shape{2, 0}, Shape{0, 4}, DType::i32, DType::i32, DType::i32).kind,
            GemmPlan::Kind::zeros);
}

Case common(const DotDims& d, const Ints64& ls, const Ints64& rs, std::optional<Ints64> out_strides = std::nullopt) {
  std::mt19937 rng(11);
  return make_case(d, ls, rs, std::move(out_strides), rng);
}

TEST(GemmPlan, CommonLayoutsNeedNoCopy) {
  // x @ W: x (B, T, D), W (D, F). Row-major C^T = W^T x^T: A = W, B = x.
  {
    const Case c = common({{2}, {0}, {}, {}}, {2, 3, 4}, {4, 5});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_TRUE(p.swap);
    EXPECT_EQ(p.batch, 1);
    EXPECT_EQ(p.outer, 1);
    EXPECT_EQ(std::tuple(p.m, p.n, p.k), std::tuple(5, 6, 4));
    EXPECT_EQ(std::tuple(p.trans_a, p.lda, p.trans_b, p.ldb, p.ldc), std::tuple(false, 5, false, 4, 5)) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // x @ W^T: W (F, D).
  {
    const Case c = common({{2}, {1}, {}, {}}, {2, 3, 4}, {5, 4});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_TRUE(p.trans_a) << p.str();
    EXPECT_EQ(p.lda, 4);
    EXPECT_EQ(check_plan(c, p), "");
  }
  // The weight gradient x^T dy: contracting (B, T) of x (B, T, D) and dy (B, T, F).
  {
    const Case c = common({{0, 1}, {0, 1}, {}, {}}, {2, 3, 4}, {2, 3, 5});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(p.k, 6);
    EXPECT_EQ(check_plan(c, p), "");
  }
  // The input gradient dy W^T: dy (B, T, F), W (D, F).
  {
    const Case c = common({{2}, {1}, {}, {}}, {2, 3, 5}, {4, 5});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // A batched matmul (B, M, K) x (B, K, N): one strided call.
  {
    const Case c = common({{2}, {1}, {0}, {0}}, {3, 4, 5}, {3, 5, 6});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(std::tuple(p.batch, p.stride_a, p.stride_b, p.stride_c), std::tuple(3, 30, 20, 24)) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
}

// Attention's products in (B, T, N, H) layouts with batch (B, N): B and N are
// not one stride of q, k or v (T lies between them), so the plan batches
// over the heads in one call and loops over B in B calls; no copy.
TEST(GemmPlan, AttentionBatchAndHeadsAreTwoLevelWithoutCopies) {
  const int64_t B = 2, T = 3, S = 4, N = 5, H = 6;
  // logits = q . k^T: q (B, T, N, H), k (B, S, N, H) -> (B, N, T, S).
  {
    const Case c = common({{3}, {3}, {0, 2}, {0, 2}}, {B, T, N, H}, {B, S, N, H});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(std::tuple(p.outer, p.batch), std::tuple(B, N)) << p.str();
    // D = logits^T (S x T): A = k^T (ld N*H), B = q (ld N*H), heads H apart.
    EXPECT_TRUE(p.swap);
    EXPECT_EQ(std::tuple(p.m, p.n, p.k), std::tuple(S, T, H));
    EXPECT_EQ(std::tuple(p.trans_a, p.lda, p.trans_b, p.ldb, p.ldc), std::tuple(true, N * H, false, N * H, S));
    EXPECT_EQ(std::tuple(p.stride_a, p.stride_b, p.stride_c), std::tuple(H, H, T * S));
    EXPECT_EQ(std::tuple(p.outer_stride_a, p.outer_stride_b, p.outer_stride_c),
              std::tuple(S * N * H, T * N * H, N * T * S));
    EXPECT_EQ(check_plan(c, p), "");
  }
  // out = p . v: p (B, N, T, S), v (B, S, N, H) -> (B, N, T, H).
  {
    const Case c = common({{3}, {1}, {0, 1}, {0, 2}}, {B, N, T, S}, {B, S, N, H});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(std::tuple(p.outer, p.batch), std::tuple(B, N)) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // The same written straight into (B, T, N, H) (the transpose back folded
  // into the product as output strides).
  {
    const Case c =
        common({{3}, {1}, {0, 1}, {0, 2}}, {B, N, T, S}, {B, S, N, H}, permuted_strides({B, N, T, H}, {0, 2, 1, 3}));
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(std::tuple(p.outer, p.batch, p.ldc), std::tuple(B, N, N * H)) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // Batch and heads next to each other, (B, N, T, H): one strided call of B*N.
  {
    const Case c = common({{3}, {3}, {0, 1}, {0, 1}}, {B, N, T, H}, {B, N, S, H});
    const GemmPlan p = plan_of(c);
    EXPECT_EQ(p.copies(), 0) << p.str();
    EXPECT_EQ(std::tuple(p.outer, p.batch), std::tuple(1, B * N)) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // With more calls than allowed, the plan copies an operand into a layout
  // whose batch is one stride instead, and makes one call.
  {
    const Case c = common({{3}, {3}, {0, 2}, {0, 2}}, {B, T, N, H}, {B, S, N, H});
    GemmPlanOptions one_call;
    one_call.max_outer_calls = 1;
    const GemmPlan p = plan_of(c, one_call);
    EXPECT_EQ(p.outer, 1) << p.str();
    EXPECT_EQ(p.batch, B * N);
    EXPECT_GT(p.copies(), 0);
    EXPECT_EQ(check_plan(c, p), "");
  }
}

TEST(GemmPlan, CopiesOnlyWhatNoStrideReaches) {
  // lhs (M1, K, M2): its free axes are not one stride: the lhs is copied
  // (it is smaller than the output) and the rhs read in place.
  {
    const Case c = common({{1}, {0}, {}, {}}, {2, 3, 4}, {3, 5});
    const GemmPlan p = plan_of(c);
    EXPECT_FALSE(p.lhs_perm.empty()) << p.str();
    EXPECT_TRUE(p.rhs_perm.empty()) << p.str();
    EXPECT_TRUE(p.out_perm.empty()) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
  // Output strides no matrix layout reaches (the free axes of the output
  // interleaved): the product goes through a temporary.
  {
    const Ints64 out_shape{2, 3, 4, 5};  // (m1, m2, n1, n2)
    const Case c = common({{2}, {0}, {}, {}}, {2, 3, 6}, {6, 4, 5}, permuted_strides(out_shape, {0, 2, 1, 3}));
    const GemmPlan p = plan_of(c);
    EXPECT_FALSE(p.out_perm.empty()) << p.str();
    EXPECT_EQ(p.copies(), 1) << p.str();
    EXPECT_EQ(check_plan(c, p), "");
  }
}

// Leading dimensions below the rows stored are refused by cuBLASLt: output
// strides whose columns overlap (shape (3, 2), strides (1, 2)) go through a
// temporary rather than give such a call.
TEST(GemmPlan, LeadingDimensionsCoverTheRows) {
  const Case c = common({{1}, {0}, {}, {}}, {3, 4}, {4, 2}, Ints64{1, 2});
  const GemmPlan p = plan_of(c);
  EXPECT_FALSE(p.out_perm.empty()) << p.str();
  EXPECT_GE(p.ldc, p.m) << p.str();
  EXPECT_EQ(check_plan(c, p), "");
}

TEST(GemmPlan, DtypesAndComputeTypes) {
  const DotDims mm{{1}, {0}, {}, {}};
  auto plan = [&](DType in, DType out, F32Matmul f32 = F32Matmul::f32) {
    GemmPlanOptions o;
    o.f32 = f32;
    return plan_gemm(mm, Shape{2, 3}, Shape{3, 4}, in, in, out, nullptr, o);
  };
  EXPECT_EQ(plan(DType::f32, DType::f32).compute, GemmCompute::f32);
  EXPECT_EQ(plan(DType::f32, DType::f32, F32Matmul::tf32).compute, GemmCompute::tf32);
  // TF32 applies to f32 operands only: 16-bit ones accumulate in f32 as always.
  EXPECT_EQ(plan(DType::bf16, DType::f32, F32Matmul::tf32).compute, GemmCompute::f32);
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {in, DType::f32}) {
      const GemmPlan p = plan(in, out);
      EXPECT_EQ(p.kind, GemmPlan::Kind::gemm) << p.str();
      EXPECT_EQ(p.compute, GemmCompute::f32);
      EXPECT_EQ(p.in_dtype, in);
      EXPECT_EQ(p.out_dtype, out);
    }
  }
  EXPECT_EQ(plan(DType::f64, DType::f64).compute, GemmCompute::f64);
  // No cuBLASLt kernel: the caller uses another one.
  for (const auto& [in, out] :
       {std::pair{DType::bf16, DType::f16}, std::pair{DType::f16, DType::bf16}, std::pair{DType::f32, DType::f64},
        std::pair{DType::i32, DType::i32}, std::pair{DType::u8, DType::u32}, std::pair{DType::i32, DType::f32}}) {
    const GemmPlan p = plan(in, out);
    EXPECT_EQ(p.kind, GemmPlan::Kind::unsupported) << p.str();
    EXPECT_NE(p.reason.find(std::string(dtype_short_name(in)) + " x " + dtype_short_name(in) + " -> " +
                            dtype_short_name(out)),
              std::string::npos)
        << p.reason;
  }
  const GemmPlan mixed = plan_gemm(mm, Shape{2, 3}, Shape{3, 4}, DType::f32, DType::bf16, DType::f32);
  EXPECT_EQ(mixed.kind, GemmPlan::Kind::unsupported);
  EXPECT_NE(mixed.reason.find("different dtypes"), std::string::npos) << mixed.reason;
}

TEST(GemmPlan, RejectsInvalidDimensionNumbers) {
  auto message = [](const DotDims& d, const Shape& l, const Shape& r) {
    try {
      plan_gemm(d, l, r, DType::f32, DType::f32, DType::f32);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{2}, {0}, {}, {}}, Shape{2, 3}, Shape{3, 4}).find("out of range"), std::string::npos);
  EXPECT_NE(message({{1}, {0}, {}, {}}, Shape{2, 3}, Shape{4, 4}).find("contracting dimension sizes differ"),
            std::string::npos);
  EXPECT_NE(message({{1}, {0, 1}, {}, {}}, Shape{2, 3}, Shape{3, 3}).find("same length"), std::string::npos);
  EXPECT_NE(message({{1}, {1}, {1}, {0}}, Shape{2, 3}, Shape{2, 3}).find("both a contracting and a batch"),
            std::string::npos);
  const Ints64 bad{1};
  EXPECT_THROW(plan_gemm({{1}, {0}, {}, {}}, Shape{2, 3}, Shape{3, 4}, DType::f32, DType::f32, DType::f32, &bad),
               Error);
}

TEST(GemmPlan, Str) {
  const GemmPlan p = plan_gemm({{1}, {0}, {}, {}}, Shape{2, 3}, Shape{3, 4}, DType::bf16, DType::bf16, DType::f32);
  EXPECT_EQ(p.str(),
            "gemm bf16 (2, 3) x (3, 4) -> f32 (2, 4): compute f32, D = C^T (4 x 2, ldc 4) = rhs (lda 4) . lhs (ldb 3), "
            "k 3");
  const GemmPlan q = plan_gemm({{3}, {3}, {0, 2}, {0, 2}}, Shape{2, 3, 5, 6}, Shape{2, 4, 5, 6}, DType::f32, DType::f32,
                               DType::f32, nullptr, {F32Matmul::tf32, 64});
  EXPECT_NE(q.str().find("compute tf32"), std::string::npos) << q.str();
  EXPECT_NE(q.str().find("batch 5 strides (6, 6, 12), 2 calls strides (120, 90, 60)"), std::string::npos) << q.str();
  EXPECT_NE(
      plan_gemm({{1}, {0}, {}, {}}, Shape{2, 0}, Shape{0, 4}, DType::f32, DType::f32, DType::f32).str().find("zeros"),
      std::string::npos);
}

// The emulation notices broken plans: each field of a correct plan changed
// gives a wrong product or a call cuBLASLt would refuse.
TEST(GemmPlan, EmulationCatchesBrokenPlans) {
  const std::vector<Case> cases = {
      common({{2}, {0}, {}, {}}, {2, 3, 4}, {4, 5}),
      common({{3}, {3}, {0, 2}, {0, 2}}, {2, 3, 5, 6}, {2, 4, 5, 6}),
      common({{2}, {1}, {0}, {0}}, {3, 4, 5}, {3, 5, 6}, permuted_strides({3, 4, 6}, {0, 2, 1})),
  };
  const std::vector<std::pair<const char*, std::function<void(GemmPlan&)>>> breaks = {
      {"lda + 1", [](GemmPlan& p) { p.lda += 1; }},
      {"ldb + 1", [](GemmPlan& p) { p.ldb += 1; }},
      {"trans_a", [](GemmPlan& p) { p.trans_a = !p.trans_a; }},
      {"trans_b", [](GemmPlan& p) { p.trans_b = !p.trans_b; }},
      {"swap", [](GemmPlan& p) { p.swap = !p.swap; }},
      {"m <-> n", [](GemmPlan& p) { std::swap(p.m, p.n); }},
      {"ldc + 1", [](GemmPlan& p) { p.ldc += 1; }},
  };
  for (const Case& c : cases) {
    const GemmPlan good = plan_of(c);
    ASSERT_EQ(check_plan(c, good), "") << case_str(c);
    for (const auto& [name, breaking] : breaks) {
      GemmPlan bad = good;
      breaking(bad);
      EXPECT_NE(check_plan(c, bad), "") << name << " on " << case_str(c);
    }
    if (good.lda != good.ldb) {
      GemmPlan bad = good;
      std::swap(bad.lda, bad.ldb);
      EXPECT_NE(check_plan(c, bad), "") << "lda <-> ldb on " << case_str(c);
    }
    if (good.batch > 1) {
      GemmPlan bad = good;
      std::swap(bad.stride_a, bad.stride_c);
      EXPECT_NE(check_plan(c, bad), "") << "stride_a <-> stride_c on " << case_str(c);
    }
  }
}

}  // namespace
}  // namespace pax::cuda

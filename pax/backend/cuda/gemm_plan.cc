// dot_general's layout plan on cuBLASLt: the axes of each product dimension
// (batch, m, n, k) are ordered so that they step as one stride in every
// tensor that holds them, and each set of operands to copy (none first) is
// tried, keeping the plan that copies the fewest elements.
#include "pax/backend/cuda/gemm_plan.h"

#include <algorithm>
#include <array>
#include <climits>
#include <numeric>
#include <optional>
#include <sstream>
#include <tuple>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

constexpr int kLhs = 0, kRhs = 1, kOut = 2;

// A stride that any value satisfies: that of a dimension of size 1.
constexpr int64_t kAny = -1;

// One axis of the product and where it lies in each tensor (-1: not there).
struct Axis {
  int64_t size = 1;
  std::array<int64_t, 3> axis{-1, -1, -1};
  std::array<int64_t, 3> stride{0, 0, 0};
};
// The axes of one product dimension, size-1 axes left out (they move no
// address), in the order they are merged.
using Group = std::vector<Axis>;

int64_t numel(const Group& g) {
  int64_t n = 1;
  for (const Axis& a : g) n *= a.size;
  return n;
}

// Whether g's axes, in this order, step as one run in tensor t.
bool merges(const Group& g, int t) {
  for (size_t i = 0; i + 1 < g.size(); ++i) {
    if (g[i].stride[size_t(t)] != g[i + 1].stride[size_t(t)] * g[i + 1].size) return false;
  }
  return true;
}
bool merges_all(const Group& g, const std::vector<int>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [&](int t) { return merges(g, t); });
}

// The stride of the merged run in tensor t (that of its innermost axis).
int64_t run_stride(const Group& g, int t) { return g.empty() ? kAny : g.back().stride[size_t(t)]; }

// The orders worth trying: each tensor merges in one order only (its axes
// by decreasing stride), so those, and the order of the output's axes.
std::vector<Group> candidate_orders(const Group& g, const std::vector<int>& tensors) {
  std::vector<Group> out{g};
  for (int t : tensors) {
    Group s = g;
    std::stable_sort(s.begin(), s.end(),
                     [&](const Axis& x, const Axis& y) { return x.stride[size_t(t)] > y.stride[size_t(t)]; });
    const bool seen = std::any_of(out.begin(), out.end(), [&](const Group& o) {
      return std::equal(o.begin(), o.end(), s.begin(), [](const Axis& x, const Axis& y) { return x.axis == y.axis; });
    });
    if (!seen) out.push_back(std::move(s));
  }
  return out;
}

std::optional<Group> merged_order(const Group& g, const std::vector<int>& tensors) {
  for (Group& c : candidate_orders(g, tensors)) {
    if (merges_all(c, tensors)) return std::move(c);
  }
  return std::nullopt;
}

// The batch as (outer, inner) runs: outer empty where one run does.
struct BatchOrder {
  Group outer, inner;
};

std::optional<BatchOrder> batch_order(const Group& g, const std::vector<int>& tensors, int64_t max_outer) {
  if (auto one = merged_order(g, tensors)) return BatchOrder{{}, std::move(*one)};
  std::optional<BatchOrder> best;
  for (const Group& c : candidate_orders(g, tensors)) {
    for (size_t j = 1; j < c.size(); ++j) {
      BatchOrder b{Group(c.begin(), c.begin() + ptrdiff_t(j)), Group(c.begin() + ptrdiff_t(j), c.end())};
      if (!merges_all(b.outer, tensors) || !merges_all(b.inner, tensors)) continue;
      if (numel(b.outer) > max_outer) continue;
      if (!best || numel(b.outer) < numel(best->outer)) best = std::move(b);
    }
  }
  return best;
}

// How cuBLASLt reads one operand op(X), R x C with strides (sr, sc): X
// column-major R x C (sr = 1, ld = sc) or X^T column-major (sc = 1, ld =
// sr), where ld may not be below the stored rows.
struct MatrixRead {
  bool trans = false;
  int64_t ld = 1;
};

std::optional<MatrixRead> matrix_read(int64_t rows, int64_t sr, int64_t cols, int64_t sc) {
  if (rows == 1 || sr == 1) {
    const int64_t ld = cols == 1 ? rows : sc;
    if (ld >= rows) return MatrixRead{false, ld};
  }
  if (cols == 1 || sc == 1) {
    const int64_t ld = rows == 1 ? cols : sr;
    if (ld >= cols) return MatrixRead{true, ld};
  }
  return std::nullopt;
}

// The product's dimensions as axis groups, with each tensor's strides.
struct Problem {
  Group batch, m, n, k;
  std::array<std::vector<int64_t>, 3> shape;
  std::array<int64_t, 3> numel{};
  int64_t max_outer = 0;
};

struct Attempt {
  GemmPlan plan;
  int64_t copied = 0;  // elements copied
};

// Sets tensor t's strides in every group to those of its contiguous copy
// laid out in the groups' order; returns the copy's permutation.
std::vector<int64_t> lay_out_copy(int t, const Problem& p, std::vector<Group*> groups) {
  std::vector<int64_t> perm;
  std::vector<bool> placed(p.shape[size_t(t)].size(), false);
  for (const Group* g : groups) {
    for (const Axis& a : *g) placed[size_t(a.axis[size_t(t)])] = true;
  }
  // Size-1 axes first: where they go moves nothing.
  for (size_t a = 0; a < placed.size(); ++a) {
    if (!placed[a]) perm.push_back(int64_t(a));
  }
  for (const Group* g : groups) {
    for (const Axis& a : *g) perm.push_back(a.axis[size_t(t)]);
  }
  const std::vector<int64_t> strides = permuted_strides(p.shape[size_t(t)], perm);
  for (Group* g : groups) {
    for (Axis& a : *g) a.stride[size_t(t)] = strides[size_t(a.axis[size_t(t)])];
  }
  return perm;
}

std::vector<int> holders(std::initializer_list<int> tensors, const std::array<bool, 3>& copied) {
  std::vector<int> out;
  for (int t : tensors) {
    if (!copied[size_t(t)]) out.push_back(t);
  }
  return out;
}

// The plan with the tensors marked in `copied` copied into the layout the
// others need; none where the others' layouts allow no strided call.
std::optional<Attempt> attempt(const Problem& p, const std::array<bool, 3>& copied) {
  auto bo = batch_order(p.batch, holders({kLhs, kRhs, kOut}, copied), p.max_outer);
  auto m = merged_order(p.m, holders({kLhs, kOut}, copied));
  auto n = merged_order(p.n, holders({kRhs, kOut}, copied));
  auto k = merged_order(p.k, holders({kLhs, kRhs}, copied));
  if (!bo || !m || !n || !k) return std::nullopt;
  Attempt at;
  GemmPlan& plan = at.plan;
  std::vector<int64_t>* perms[3] = {&plan.lhs_perm, &plan.rhs_perm, &plan.out_perm};
  const std::vector<Group*> layouts[3] = {
      {&bo->outer, &bo->inner, &*m, &*k}, {&bo->outer, &bo->inner, &*k, &*n}, {&bo->outer, &bo->inner, &*m, &*n}};
  for (int t = 0; t < 3; ++t) {
    if (!copied[size_t(t)]) continue;
    *perms[t] = lay_out_copy(t, p, layouts[t]);
    at.copied += p.numel[size_t(t)];
  }

  const int64_t M = numel(*m), N = numel(*n), K = numel(*k);
  // The output: row-major-like (n's stride 1) is written as D = C^T.
  const int64_t cm = run_stride(*m, kOut), cn = run_stride(*n, kOut);
  std::optional<MatrixRead> d;
  if ((d = matrix_read(N, cn, M, cm)) && !d->trans) {
    plan.swap = true;
  } else if ((d = matrix_read(M, cm, N, cn)) && !d->trans) {
    plan.swap = false;
  } else {
    return std::nullopt;
  }
  plan.ldc = d->ld;
  std::optional<MatrixRead> a, b;
  if (plan.swap) {
    // D (N x M) = rhs^T (N x K) . lhs^T (K x M).
    a = matrix_read(N, run_stride(*n, kRhs), K, run_stride(*k, kRhs));
    b = matrix_read(K, run_stride(*k, kLhs), M, run_stride(*m, kLhs));
    plan.m = N;
    plan.n = M;
  } else {
    a = matrix_read(M, run_stride(*m, kLhs), K, run_stride(*k, kLhs));
    b = matrix_read(K, run_stride(*k, kRhs), N, run_stride(*n, kRhs));
    plan.m = M;
    plan.n = N;
  }
  if (!a || !b) return std::nullopt;
  plan.k = K;
  plan.trans_a = a->trans;
  plan.lda = a->ld;
  plan.trans_b = b->trans;
  plan.ldb = b->ld;

  const int ta = plan.swap ? kRhs : kLhs, tb = plan.swap ? kLhs : kRhs;
  auto stride_or_zero = [](const Group& g, int t) { return g.empty() ? int64_t(0) : run_stride(g, t); };
  plan.batch = numel(bo->inner);
  plan.stride_a = stride_or_zero(bo->inner, ta);
  plan.stride_b = stride_or_zero(bo->inner, tb);
  plan.stride_c = stride_or_zero(bo->inner, kOut);
  plan.outer = numel(bo->outer);
  plan.outer_stride_a = stride_or_zero(bo->outer, ta);
  plan.outer_stride_b = stride_or_zero(bo->outer, tb);
  plan.outer_stride_c = stride_or_zero(bo->outer, kOut);
  return at;
}

void check_dims(const DotDims& d, const Shape& lhs, const Shape& rhs) {
  auto operands = [&] { return "; operands " + lhs.str() + " and " + rhs.str(); };
  auto check_axes = [&](const Ints& axes, const char* name, const Shape& s) {
    for (size_t i = 0; i < axes.size(); ++i) {
      PAX_CHECK(axes[i] >= 0 && axes[i] < s.rank(), "plan_gemm: ", name, " ", ints_str(axes),
                " out of range (valid axes are 0..", s.rank() - 1, ")", operands());
      for (size_t j = 0; j < i; ++j) {
        PAX_CHECK(axes[i] != axes[j], "plan_gemm: ", name, " ", ints_str(axes), " repeats axis ", axes[i], operands());
      }
    }
  };
  check_axes(d.lhs_contracting, "lhs_contracting_dims", lhs);
  check_axes(d.rhs_contracting, "rhs_contracting_dims", rhs);
  check_axes(d.lhs_batch, "lhs_batch_dims", lhs);
  check_axes(d.rhs_batch, "rhs_batch_dims", rhs);
  for (const auto& [c, b, which] :
       {std::tuple{&d.lhs_contracting, &d.lhs_batch, "lhs"}, std::tuple{&d.rhs_contracting, &d.rhs_batch, "rhs"}}) {
    for (int64_t a : *c) {
      PAX_CHECK(std::find(b->begin(), b->end(), a) == b->end(), "plan_gemm: ", which, " axis ", a,
                " is both a contracting and a batch dimension", operands());
    }
  }
  for (const auto& [l, r, what] : {std::tuple{&d.lhs_contracting, &d.rhs_contracting, "contracting"},
                                   std::tuple{&d.lhs_batch, &d.rhs_batch, "batch"}}) {
    PAX_CHECK(l->size() == r->size(), "plan_gemm: lhs_", what, "_dims ", ints_str(*l), " and rhs_", what, "_dims ",
              ints_str(*r), " must have the same length", operands());
    for (size_t i = 0; i < l->size(); ++i) {
      PAX_CHECK(lhs[(*l)[i]] == rhs[(*r)[i]], "plan_gemm: ", what, " dimension sizes differ: lhs axis ", (*l)[i],
                " has size ", lhs[(*l)[i]], " but rhs axis ", (*r)[i], " has size ", rhs[(*r)[i]], operands());
    }
  }
}

// The compute type cuBLASLt multiplies these dtypes in, or why it cannot.
std::optional<GemmCompute> compute_for(DType lhs, DType rhs, DType out, F32Matmul f32, std::string& reason) {
  const std::string pair =
      std::string(dtype_short_name(lhs)) + " x " + dtype_short_name(rhs) + " -> " + dtype_short_name(out);
  if (lhs != rhs) {
    reason = "operands of different dtypes (" + pair + "); cuBLASLt multiplies operands of one dtype";
    return std::nullopt;
  }
  if (lhs == DType::f32 && out == DType::f32) return f32 == F32Matmul::tf32 ? GemmCompute::tf32 : GemmCompute::f32;
  if ((lhs == DType::bf16 || lhs == DType::f16) && (out == lhs || out == DType::f32)) return GemmCompute::f32;
  if (lhs == DType::f64 && out == DType::f64) return GemmCompute::f64;
  reason = "cuBLASLt has no " + pair +
           " product (it multiplies f32, bf16 and f16 operands into f32 or their own dtype, and f64 into f64)";
  return std::nullopt;
}

}  // namespace

std::vector<int64_t> permuted_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm) {
  PAX_CHECK(perm.size() == shape.size(), "permuted_strides: permutation ", ints_str(perm), " does not fit shape ",
            ints_str(shape));
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t s = 1;
  for (size_t i = perm.size(); i-- > 0;) {
    strides[size_t(perm[i])] = s;
    s *= shape[size_t(perm[i])];
  }
  return strides;
}

const char* kind_name(GemmPlan::Kind kind) {
  switch (kind) {
    case GemmPlan::Kind::gemm: return "gemm";
    case GemmPlan::Kind::zeros: return "zeros";
    case GemmPlan::Kind::empty: return "empty";
    case GemmPlan::Kind::unsupported: return "unsupported";
  }
  return "?";
}

const char* compute_name(GemmCompute compute) {
  switch (compute) {
    case GemmCompute::f32: return "f32";
    case GemmCompute::tf32: return "tf32";
    case GemmCompute::f64: return "f64";
  }
  return "?";
}

GemmPlan plan_gemm(const DotDims& dims, const Shape& lhs, const Shape& rhs, DType lhs_dtype, DType rhs_dtype,
                   DType out_dtype, const std::vector<int64_t>* out_strides, const GemmPlanOptions& options) {
  check_dims(dims, lhs, rhs);
  const std::vector<int64_t> lfree = free_axes(lhs.rank(), dims.lhs_contracting, dims.lhs_batch);
  const std::vector<int64_t> rfree = free_axes(rhs.rank(), dims.rhs_contracting, dims.rhs_batch);
  std::vector<int64_t> out_shape;
  for (int64_t a : dims.lhs_batch) out_shape.push_back(lhs[a]);
  for (int64_t a : lfree) out_shape.push_back(lhs[a]);
  for (int64_t a : rfree) out_shape.push_back(rhs[a]);

  GemmPlan plan;
  plan.lhs_shape = lhs.dims();
  plan.rhs_shape = rhs.dims();
  plan.out_shape = out_shape;
  plan.in_dtype = lhs_dtype;
  plan.out_dtype = out_dtype;
  if (out_strides) {
    PAX_CHECK(out_strides->size() == out_shape.size(), "plan_gemm: output strides ", ints_str(*out_strides),
              " do not fit the output shape ", ints_str(out_shape), " (one stride per axis)");
    for (int64_t s : *out_strides) {
      PAX_CHECK(s >= 0, "plan_gemm: output strides ", ints_str(*out_strides), " must not be negative");
    }
    plan.out_strides = *out_strides;
  } else {
    plan.out_strides = Shape(out_shape).strides();
  }
  const int64_t out_numel = Shape(out_shape).numel();
  plan.out_extent = out_numel == 0 ? 0 : 1;
  for (size_t i = 0; i < out_shape.size() && out_numel > 0; ++i) {
    plan.out_extent += (out_shape[i] - 1) * plan.out_strides[i];
  }

  Problem p;
  p.shape = {lhs.dims(), rhs.dims(), out_shape};
  p.numel = {lhs.numel(), rhs.numel(), out_numel};
  p.max_outer = options.max_outer_calls;
  const std::vector<int64_t> ls = lhs.strides(), rs = rhs.strides();
  const std::vector<int64_t>& os = plan.out_strides;
  auto add = [](Group& g, int64_t size, int64_t la, int64_t ra, int64_t oa, int64_t l_s, int64_t r_s, int64_t o_s) {
    if (size != 1) g.push_back(Axis{size, {la, ra, oa}, {l_s, r_s, o_s}});
  };
  int64_t K = 1;
  const size_t nb = dims.lhs_batch.size(), nm = lfree.size();
  for (size_t i = 0; i < nb; ++i) {
    const int64_t la = dims.lhs_batch[i], ra = dims.rhs_batch[i];
    add(p.batch, lhs[la], la, ra, int64_t(i), ls[size_t(la)], rs[size_t(ra)], os[i]);
  }
  for (size_t i = 0; i < nm; ++i) {
    add(p.m, lhs[lfree[i]], lfree[i], -1, int64_t(nb + i), ls[size_t(lfree[i])], 0, os[nb + i]);
  }
  for (size_t i = 0; i < rfree.size(); ++i) {
    add(p.n, rhs[rfree[i]], -1, rfree[i], int64_t(nb + nm + i), 0, rs[size_t(rfree[i])], os[nb + nm + i]);
  }
  for (size_t i = 0; i < dims.lhs_contracting.size(); ++i) {
    const int64_t la = dims.lhs_contracting[i], ra = dims.rhs_contracting[i];
    K *= lhs[la];
    add(p.k, lhs[la], la, ra, -1, ls[size_t(la)], rs[size_t(ra)], 0);
  }

  if (out_numel == 0) {
    plan.kind = GemmPlan::Kind::empty;
    return plan;
  }
  if (K == 0) {
    plan.kind = GemmPlan::Kind::zeros;
    return plan;
  }
  const auto compute = compute_for(lhs_dtype, rhs_dtype, out_dtype, options.f32, plan.reason);
  if (!compute) {
    plan.kind = GemmPlan::Kind::unsupported;
    return plan;
  }

  // Every set of tensors to copy, keeping the plan that copies the fewest
  // elements, then takes the fewest calls, then makes the fewest copies.
  std::optional<Attempt> best;
  auto better = [](const Attempt& x, const Attempt& y) {
    return std::tuple(x.copied, x.plan.outer, x.plan.copies()) < std::tuple(y.copied, y.plan.outer, y.plan.copies());
  };
  for (int mask = 0; mask < 8; ++mask) {
    const std::array<bool, 3> copied{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    std::optional<Attempt> at = attempt(p, copied);
    if (at && (!best || better(*at, *best))) best = std::move(at);
  }
  // Copying all three always works: contiguous (batch, m, k), (batch, k, n)
  // and (batch, m, n) are one strided call.
  PAX_CHECK(best, "plan_gemm: no cuBLASLt layout for operands ", lhs.str(), " and ", rhs.str(),
            " (an internal error: copying all of them should always give one)");
  const GemmPlan& g = best->plan;
  plan.lhs_perm = g.lhs_perm;
  plan.rhs_perm = g.rhs_perm;
  plan.out_perm = g.out_perm;
  plan.swap = g.swap;
  plan.trans_a = g.trans_a;
  plan.trans_b = g.trans_b;
  plan.m = g.m;
  plan.n = g.n;
  plan.k = g.k;
  plan.lda = g.lda;
  plan.ldb = g.ldb;
  plan.ldc = g.ldc;
  plan.batch = g.batch;
  plan.stride_a = g.stride_a;
  plan.stride_b = g.stride_b;
  plan.stride_c = g.stride_c;
  plan.outer = g.outer;
  plan.outer_stride_a = g.outer_stride_a;
  plan.outer_stride_b = g.outer_stride_b;
  plan.outer_stride_c = g.outer_stride_c;
  plan.compute = *compute;
  plan.kind = GemmPlan::Kind::gemm;
  // cuBLASLt takes rows, columns and the batch count as 32-bit values.
  for (const auto& [v, name] :
       {std::pair{plan.m, "m"}, std::pair{plan.n, "n"}, std::pair{plan.k, "k"}, std::pair{plan.batch, "batch"}}) {
    if (v > INT32_MAX) {
      plan.kind = GemmPlan::Kind::unsupported;
      plan.reason = std::string("the product's ") + name + " = " + std::to_string(v) +
                    " exceeds cuBLASLt's 32-bit sizes (at most 2147483647)";
      return plan;
    }
  }
  return plan;
}

std::string GemmPlan::str() const {
  std::ostringstream os;
  os << kind_name(kind) << " " << dtype_short_name(in_dtype) << " " << ints_str(lhs_shape) << " x "
     << ints_str(rhs_shape) << " -> " << dtype_short_name(out_dtype) << " " << ints_str(out_shape);
  if (out_strides != Shape(out_shape).strides()) os << " strides " << ints_str(out_strides);
  switch (kind) {
    case Kind::empty: os << ": the output has no elements"; break;
    case Kind::zeros: os << ": the contraction is empty, the output is zeros"; break;
    case Kind::unsupported: os << ": " << reason; break;
    case Kind::gemm: {
      const char* a = swap ? "rhs" : "lhs";
      const char* b = swap ? "lhs" : "rhs";
      os << ": compute " << compute_name(compute) << ", D" << (swap ? " = C^T" : " = C") << " (" << m << " x " << n
         << ", ldc " << ldc << ") = " << a << (trans_a ? "^T" : "") << " (lda " << lda << ") . " << b
         << (trans_b ? "^T" : "") << " (ldb " << ldb << "), k " << k;
      if (batch > 1)
        os << ", batch " << batch << " strides (" << stride_a << ", " << stride_b << ", " << stride_c << ")";
      if (outer > 1) {
        os << ", " << outer << " calls strides (" << outer_stride_a << ", " << outer_stride_b << ", " << outer_stride_c
           << ")";
      }
      for (const auto& [perm, name] : {std::pair{&lhs_perm, "lhs"}, std::pair{&rhs_perm, "rhs"}}) {
        if (!perm->empty()) os << "; copies " << name << " transposed " << ints_str(*perm);
      }
      if (!out_perm.empty()) os << "; writes a temporary transposed " << ints_str(out_perm) << " then the output";
      break;
    }
  }
  return os.str();
}

}  // namespace pax::cuda

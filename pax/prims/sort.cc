// Sorting primitives: variadic sort along one axis (lexicographic by the first
// num_keys operands, always stable) and top_k along the last axis: shape/dtype
// rules. The CPU kernels are the backend's (kernels_sort.cc).
#include <cstdint>
#include <limits>
#include <string>

#include "pax/core/error.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

std::string avals_str(std::span<const AVal> in) {
  std::string s;
  for (const AVal& a : in) s += (s.empty() ? "" : ", ") + a.str();
  return s;
}

// ---------------------------------------------------------------------------
// sort

std::vector<AVal> sort_rule(std::span<const AVal> in, const Params& p) {
  PAX_CHECK(!in.empty(), "sort: needs at least one operand");
  const std::string ctx = "sort: operands (" + avals_str(in) + "): ";
  const int64_t dim = p.i("dimension");
  const int64_t num_keys = p.i("num_keys");
  p.b("is_stable");  // rejects a non-bool value
  const Shape& shape = in[0].shape;
  PAX_CHECK(shape.rank() >= 1, ctx, "cannot sort a 0-d array; operands need rank >= 1");
  for (const AVal& a : in) {
    PAX_CHECK(a.shape == shape, ctx, "all operands must have the same shape; ", a.str(), " differs from ", in[0].str());
  }
  PAX_CHECK(dim >= 0 && dim < shape.rank(), ctx, "dimension ", dim, " is out of range [0, ", shape.rank(), ")");
  PAX_CHECK(num_keys >= 1 && num_keys <= int64_t(in.size()), ctx, "num_keys is ", num_keys, "; it must lie in [1, ",
            in.size(), "] (the number of operands)");
  PAX_CHECK(shape[dim] <= int64_t(std::numeric_limits<uint32_t>::max()), ctx, "dimension ", dim, " has ", shape[dim],
            " elements; at most 2^32 - 1 can be sorted");
  return std::vector<AVal>(in.begin(), in.end());
}

// ---------------------------------------------------------------------------
// top_k

std::vector<AVal> top_k_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  const int64_t k = p.i("k");
  PAX_CHECK(x.shape.rank() >= 1, "top_k: operand ", x.str(),
            " is 0-d; it needs rank >= 1 (top_k works along the last axis)");
  const int64_t n = x.shape[x.shape.rank() - 1];
  PAX_CHECK(k >= 0 && k <= n, "top_k: k = ", k, " for operand ", x.str(), "; k must lie in [0, ", n,
            "] (the size of the last axis)");
  PAX_CHECK(n <= int64_t(std::numeric_limits<int32_t>::max()), "top_k: operand ", x.str(),
            " has a last axis too long for int32 indices");
  std::vector<int64_t> dims = x.shape.dims();
  dims.back() = k;
  return {AVal{Shape(dims), x.dtype, x.weak_type}, AVal{Shape(dims), DType::i32, false}};
}

}  // namespace

void register_sort_prims(PrimTable& table) {
  table[size_t(Prim::sort)] = PrimDef{sort_rule};
  table[size_t(Prim::top_k)] = PrimDef{top_k_rule};
}

}  // namespace pax

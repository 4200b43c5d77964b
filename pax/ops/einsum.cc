// matmul, dot, outer and einsum, lowered to dot_general (plus reduce_sum and
// transpose for labels that only one operand carries).
#include <algorithm>
#include <map>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax {

namespace {

std::pair<Array, Array> same_dtype(const ArrayLike& a, const ArrayLike& b) {
  WeakDType t = promote_weak(a.weak_dtype(), b.weak_dtype());
  PAX_CHECK(t.dtype != DType::bool_, "matmul: bool operands are not supported");
  return {a.as(t.dtype), b.as(t.dtype)};
}

}  // namespace

Array matmul(const ArrayLike& a_like, const ArrayLike& b_like) {
  auto [a, b] = same_dtype(a_like, b_like);
  PAX_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "matmul: operands must have rank >= 1, got ", a.aval().str(), " and ",
            b.aval().str());
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  if (a_vec) a = lax::expand_dims(a, {0});
  if (b_vec) b = lax::expand_dims(b, {1});
  const int64_t k = a.dim(-1);
  PAX_CHECK(k == b.dim(-2), "matmul: contracting dimensions differ: ", a_like.to_array().aval().str(), " @ ",
            b_like.to_array().aval().str(), " (", k, " != ", b.dim(-2), ")");
  Array out;
  if (b.ndim() == 2) {
    // [..., M, K] @ [K, N]: fold the leading axes into M, no broadcast needed.
    Ints lead(a.shape().begin(), a.shape().end() - 1);
    Array a2 = lax::reshape(a, {Shape(lead).numel(), k});
    Array r = lax::dot_general(a2, b, {{1}, {0}, {}, {}});
    lead.push_back(b.dim(1));
    out = lax::reshape(r, lead);
  } else {
    // Broadcast the batch axes of both operands to a common shape.
    Shape a_batch(Ints(a.shape().begin(), a.shape().end() - 2));
    Shape b_batch(Ints(b.shape().begin(), b.shape().end() - 2));
    Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
    Ints a_shape = batch.dims(), b_shape = batch.dims();
    a_shape.push_back(a.dim(-2));
    a_shape.push_back(k);
    b_shape.push_back(k);
    b_shape.push_back(b.dim(-1));
    a = broadcast_to(a, Shape(a_shape));
    b = broadcast_to(b, Shape(b_shape));
    Ints batch_dims;
    for (int64_t i = 0; i < batch.rank(); ++i) batch_dims.push_back(i);
    const int64_t n = batch.rank();
    out = lax::dot_general(a, b, {{n + 1}, {n}, batch_dims, batch_dims});
  }
  if (a_vec) out = lax::squeeze(out, {out.ndim() - 2});
  if (b_vec) out = lax::squeeze(out, {out.ndim() - 1});
  return out;
}

Array dot(const Array& a0, const Array& b0) {
  if (a0.ndim() == 0 || b0.ndim() == 0) return multiply(a0, b0);
  auto [a, b] = same_dtype(a0, b0);
  const int64_t bc = b.ndim() >= 2 ? b.ndim() - 2 : 0;
  PAX_CHECK(a.dim(-1) == b.dim(bc), "dot: shapes ", a.aval().str(), " and ", b.aval().str(), " are not aligned (",
            a.dim(-1), " != ", b.dim(bc), ")");
  return lax::dot_general(a, b, {{a.ndim() - 1}, {bc}, {}, {}});
}

Array outer(const Array& a, const Array& b) {
  return multiply(lax::expand_dims(ravel(a), {1}), lax::expand_dims(ravel(b), {0}));
}

// ---------------------------------------------------------------------------
// einsum

namespace {

// Labels are letters; the axes an ellipsis stands for get negative labels
// -1, -2, ... counted from the right so that they line up across operands.
using Labels = std::vector<int>;

Labels parse_operand(const std::string& spec, int64_t rank, const std::string& subscripts) {
  Labels labels;
  const size_t dots = spec.find("...");
  std::string before = dots == std::string::npos ? spec : spec.substr(0, dots);
  std::string after = dots == std::string::npos ? "" : spec.substr(dots + 3);
  for (char c : before + after) {
    PAX_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum: invalid character '", c, "' in '", subscripts,
              "'; use letters, ',', '->' and '...'");
  }
  const int64_t named = int64_t(before.size() + after.size());
  if (dots == std::string::npos) {
    PAX_CHECK(named == rank, "einsum: operand '", spec, "' names ", named, " axes but the array has rank ", rank,
              " (in '", subscripts, "')");
  } else {
    PAX_CHECK(named <= rank, "einsum: operand '", spec, "' names ", named, " axes but the array has rank ", rank);
  }
  for (char c : before) labels.push_back(c);
  for (int64_t i = rank - named; i > 0; --i) labels.push_back(-int(i));
  for (char c : after) labels.push_back(c);
  for (size_t i = 0; i < labels.size(); ++i) {
    PAX_CHECK(std::count(labels.begin(), labels.end(), labels[i]) == 1, "einsum: label '", char(labels[i]),
              "' repeats within operand '", spec, "'; diagonals are not supported");
  }
  return labels;
}

int64_t position(const Labels& labels, int label) {
  return int64_t(std::find(labels.begin(), labels.end(), label) - labels.begin());
}
bool contains(const Labels& labels, int label) { return position(labels, label) < int64_t(labels.size()); }

// Sums out the labels of `x` that are in neither `keep_a` nor `keep_b`.
Array sum_unused(const Array& x, Labels& labels, const Labels& keep_a, const Labels& keep_b) {
  Ints axes;
  Labels kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (contains(keep_a, labels[i]) || contains(keep_b, labels[i])) kept.push_back(labels[i]);
    else axes.push_back(int64_t(i));
  }
  labels = kept;
  return axes.empty() ? x : lax::reduce_sum(x, axes);
}

Array to_output_order(const Array& x, const Labels& labels, const Labels& out, const std::string& subscripts) {
  Ints perm;
  for (int label : out) {
    PAX_CHECK(contains(labels, label), "einsum: output label '", char(label), "' does not appear in any input of '",
              subscripts, "'");
    perm.push_back(position(labels, label));
  }
  return transpose(x, perm);
}

struct Parsed {
  std::vector<Labels> inputs;
  Labels output;
};

Parsed parse(const std::string& raw, const std::vector<Array>& operands) {
  std::string s;
  for (char c : raw) {
    if (c != ' ') s += c;
  }
  const size_t arrow = s.find("->");
  std::string lhs = arrow == std::string::npos ? s : s.substr(0, arrow);
  std::vector<std::string> specs;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    specs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  PAX_CHECK(specs.size() == operands.size(), "einsum: '", raw, "' describes ", specs.size(), " operands but ",
            operands.size(), " were given");
  Parsed p;
  int ellipsis_rank = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    p.inputs.push_back(parse_operand(specs[i], operands[i].ndim(), raw));
    for (int l : p.inputs.back()) ellipsis_rank = std::max(ellipsis_rank, -l);
  }
  if (arrow != std::string::npos) {
    std::string out = s.substr(arrow + 2);
    const size_t dots = out.find("...");
    std::string before = dots == std::string::npos ? out : out.substr(0, dots);
    std::string after = dots == std::string::npos ? "" : out.substr(dots + 3);
    for (char c : before) p.output.push_back(c);
    if (dots != std::string::npos) {
      for (int i = ellipsis_rank; i > 0; --i) p.output.push_back(-i);
    }
    for (char c : after) p.output.push_back(c);
  } else {
    // Implicit output: ellipsis axes, then letters used exactly once, sorted.
    for (int i = ellipsis_rank; i > 0; --i) p.output.push_back(-i);
    std::map<int, int> counts;
    for (const Labels& in : p.inputs) {
      for (int l : in) {
        if (l > 0) ++counts[l];
      }
    }
    for (auto [label, n] : counts) {
      if (n == 1) p.output.push_back(label);
    }
  }
  // Every label must have one size.
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    for (size_t d = 0; d < p.inputs[i].size(); ++d) {
      int l = p.inputs[i][d];
      int64_t n = operands[i].dim(int64_t(d));
      auto [it, fresh] = sizes.emplace(l, n);
      PAX_CHECK(fresh || it->second == n, "einsum: label '", l > 0 ? std::string(1, char(l)) : std::string("..."),
                "' has size ", it->second, " in one operand and ", n, " in another ('", raw, "')");
    }
  }
  return p;
}

}  // namespace

Array einsum(const std::string& subscripts, const Array& a) {
  Parsed p = parse(subscripts, {a});
  Labels labels = p.inputs[0];
  Array x = sum_unused(a, labels, p.output, {});
  return to_output_order(x, labels, p.output, subscripts);
}

Array einsum(const std::string& subscripts, const Array& a0, const Array& b0,
             std::optional<DType> preferred_element_type) {
  Parsed p = parse(subscripts, {a0, b0});
  auto [a, b] = same_dtype(a0, b0);
  Labels la = p.inputs[0], lb = p.inputs[1];
  a = sum_unused(a, la, lb, p.output);
  b = sum_unused(b, lb, la, p.output);
  lax::DotDimensionNumbers dn;
  Labels result;
  for (int l : la) {
    if (!contains(lb, l)) continue;
    if (contains(p.output, l)) {
      dn.lhs_batch.push_back(position(la, l));
      dn.rhs_batch.push_back(position(lb, l));
      result.push_back(l);
    } else {
      dn.lhs_contracting.push_back(position(la, l));
      dn.rhs_contracting.push_back(position(lb, l));
    }
  }
  for (int l : la) {
    if (!contains(lb, l)) result.push_back(l);
  }
  for (int l : lb) {
    if (!contains(la, l)) result.push_back(l);
  }
  Array r = lax::dot_general(a, b, dn, preferred_element_type);
  return to_output_order(r, result, p.output, subscripts);
}

}  // namespace pax

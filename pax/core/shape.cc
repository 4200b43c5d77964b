// Shape and AVal helpers.
#include "pax/core/shape.h"

#include <algorithm>
#include <ostream>

#include "pax/core/error.h"

namespace pax {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t acc = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

std::string ints_str(std::span<const int64_t> v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  if (v.size() == 1) out += ",";
  return out + ")";
}

std::string Shape::str() const { return ints_str(dims_); }

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

std::string AVal::str() const {
  std::string out = dtype_short_name(dtype);
  out += "[";
  for (int64_t i = 0; i < shape.rank(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::ostream& operator<<(std::ostream& os, const AVal& a) { return os << a.str(); }

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  PAX_CHECK(axis >= -rank && axis < rank, op, ": axis ", axis, " is out of range for an array of rank ", rank,
            "; valid axes are ", -rank, " .. ", rank - 1);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> normalize_axes(std::span<const int64_t> axes, int64_t rank, const char* op) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, rank, op);
    PAX_CHECK(std::find(out.begin(), out.end(), n) == out.end(), op, ": axis ", a, " is repeated in ", ints_str(axes));
    out.push_back(n);
  }
  return out;
}

}  // namespace pax

// numpy / JAX style printing of arrays:
//   Array([[1., 2.],
//          [3., 4.]], dtype=float32)
// Large arrays are summarised with "..." (PrintOptions::threshold / edgeitems).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "pax/core/array.h"

namespace pax {

PrintOptions& print_options() {
  static PrintOptions options;
  return options;
}

namespace {

struct Formatter {
  DType dtype;
  bool scientific = false;
  int precision = 8;

  std::string operator()(double v) const {
    if (dtype == DType::bool_) return v != 0 ? "True" : "False";
    if (!is_floating(dtype)) return fmt::format("{}", int64_t(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (scientific) {
      std::string s = fmt::format("{:.{}e}", v, precision - 1);
      // Trim trailing zeros of the mantissa: 1.50000000e+03 -> 1.5e+03.
      size_t e = s.find('e');
      size_t end = e;
      while (end > 0 && s[end - 1] == '0') --end;
      if (s[end - 1] == '.') ++end;  // keep one zero after the point? numpy keeps "1.e+03"
      return s.substr(0, end) + s.substr(e);
    }
    std::string s = fmt::format("{:.{}f}", v, std::max(0, precision));
    // Significant digits, not decimals: round to `precision` significant digits.
    if (v != 0) {
      int mag = int(std::floor(std::log10(std::fabs(v))));
      int decimals = std::max(0, precision - 1 - mag);
      s = fmt::format("{:.{}f}", v, std::min(decimals, precision));
    }
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
    } else {
      s += '.';
    }
    return s;
  }
};

struct Printer {
  const std::vector<double>& values;
  const Shape& shape;
  std::vector<int64_t> strides;
  const Formatter& fmt;
  bool summarise;
  int64_t edge;
  size_t width = 0;

  bool shown(int64_t dim, int64_t i) const {
    return !summarise || shape[dim] <= 2 * edge || i < edge || i >= shape[dim] - edge;
  }

  void measure(int64_t dim, int64_t offset) {
    if (dim == shape.rank()) {
      width = std::max(width, fmt(values[size_t(offset)]).size());
      return;
    }
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (shown(dim, i)) measure(dim + 1, offset + i * strides[size_t(dim)]);
    }
  }

  void print(std::string& out, int64_t dim, int64_t offset, size_t indent) {
    if (dim == shape.rank()) {
      std::string s = fmt(values[size_t(offset)]);
      out += std::string(width - s.size(), ' ') + s;
      return;
    }
    out += '[';
    bool skipped = false;
    bool first = true;
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (!shown(dim, i)) {
        if (!skipped) {
          out += ", ";
          if (dim + 1 < shape.rank()) out += "\n" + std::string(indent + 1, ' ');
          out += "...";
          skipped = true;
        }
        continue;
      }
      if (!first) {
        out += ',';
        if (dim + 1 < shape.rank()) {
          out += std::string(size_t(shape.rank() - dim - 1), '\n');
          out += std::string(indent + 1, ' ');
        } else {
          out += ' ';
        }
      } else if (skipped) {
        out += ' ';
      }
      first = false;
      print(out, dim + 1, offset + i * strides[size_t(dim)], indent + 1);
    }
    out += ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Array& a) {
  if (!a.defined()) return os << "Array(<empty>)";
  if (!a.is_concrete()) return os << "Traced<" << a.aval().str() << ">";
  const PrintOptions& opts = print_options();
  std::vector<double> values = a.to_vector<double>();
  Formatter f{a.dtype()};
  f.precision = opts.precision;
  if (is_floating(a.dtype())) {
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v) || v == 0) continue;
      max_abs = std::max(max_abs, std::fabs(v));
      min_abs = std::min(min_abs, std::fabs(v));
    }
    f.scientific = max_abs >= 1e16 || (min_abs < 1e-4 && max_abs > 0) ||
                   (max_abs > 0 && max_abs / min_abs > 1e3 && min_abs < 1e-2);
  }
  std::string prefix = "Array(";
  std::string body;
  if (a.size() == 0 && a.ndim() > 0) {
    body = "[]";
  } else {
    Printer p{values, a.shape(), a.shape().strides(), f, a.size() > opts.threshold, opts.edgeitems};
    p.measure(0, 0);
    p.print(body, 0, 0, prefix.size());
  }
  os << prefix << body << ", dtype=" << dtype_name(a.dtype());
  if (a.ndim() > 0 && a.size() == 0) os << ", shape=" << a.shape();
  if (a.weak_type()) os << ", weak_type=True";
  return os << ")";
}

}  // namespace pax

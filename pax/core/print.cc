// numpy / JAX style printing of arrays:
//   Array([[1., 2.],
//          [3., 4.]], dtype=float32)
// Large arrays are summarised with "..." (PrintOptions::threshold / edgeitems).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
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

// Formats the elements of one array the way numpy does (floatmode "maxprec"):
// the fewest digits (at most `precision` after the point) that read back as the
// same value in the array's dtype; fixed notation unless the magnitudes call
// for scientific; columns aligned on the decimal point.
struct Formatter {
  DType dtype;
  bool scientific = false;
  int precision = 8;
  size_t int_width = 0, frac_width = 0;  // fixed: widths around the point

  bool reads_back(const std::string& s, double v) const {
    double parsed = std::strtod(s.c_str(), nullptr);
    double a, b;
    unsigned char tmp[8];
    convert_host(DType::f64, &parsed, dtype, tmp, 1);
    convert_host(dtype, tmp, DType::f64, &a, 1);
    convert_host(DType::f64, &v, dtype, tmp, 1);
    convert_host(dtype, tmp, DType::f64, &b, 1);
    return a == b;
  }

  std::string raw(double v) const {
    if (dtype == DType::bool_) return v != 0 ? "True" : "False";
    if (!is_floating(dtype)) return fmt::format("{}", int64_t(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::string s;
    for (int p = 0; p <= precision; ++p) {
      s = scientific ? fmt::format("{:.{}e}", v, p) : fmt::format("{:.{}f}", v, p);
      if (reads_back(s, v)) break;
    }
    if (scientific) {
      size_t e = s.find('e');
      if (s.find('.') == std::string::npos) s.insert(e, ".");
    } else if (s.find('.') == std::string::npos) {
      s += '.';
    }
    return s;
  }

  // Pads the fractional part (with spaces in fixed notation, zeros in
  // scientific) and the integer part so that the points line up.
  void measure(const std::string& s) {
    size_t dot = s.find('.');
    if (dot == std::string::npos) {
      int_width = std::max(int_width, s.size());
      return;
    }
    size_t end = scientific ? s.find('e') : s.size();
    int_width = std::max(int_width, dot);
    frac_width = std::max(frac_width, end - dot - 1);
  }

  std::string operator()(double v) const {
    std::string s = raw(v);
    size_t dot = s.find('.');
    if (dot == std::string::npos) return std::string(int_width > s.size() ? int_width - s.size() : 0, ' ') + s;
    size_t end = scientific ? s.find('e') : s.size();
    size_t frac = end - dot - 1;
    std::string pad(frac_width - frac, scientific ? '0' : ' ');
    if (scientific) s.insert(end, pad);
    else s += pad;
    return std::string(int_width > dot ? int_width - dot : 0, ' ') + s;
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

  void measure(Formatter& f, int64_t dim, int64_t offset) {
    if (dim == shape.rank()) {
      f.measure(f.raw(values[size_t(offset)]));
      return;
    }
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (shown(dim, i)) measure(f, dim + 1, offset + i * strides[size_t(dim)]);
    }
  }

  void measure_width(int64_t dim, int64_t offset) {
    if (dim == shape.rank()) {
      width = std::max(width, fmt(values[size_t(offset)]).size());
      return;
    }
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (shown(dim, i)) measure_width(dim + 1, offset + i * strides[size_t(dim)]);
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
  if (a.is_tracer() && !a.tracer()->concrete()) {
    if (a.tracer()->owner() == "eval_shape") {
      return os << "ShapeDtypeStruct(shape=" << a.shape() << ", dtype=" << dtype_name(a.dtype()) << ")";
    }
    return os << "Traced<" << a.aval().str() << ">with<" << a.tracer()->owner() << ">";
  }
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
    f.scientific = max_abs >= 1e8 || (min_abs < 1e-4 && max_abs > 0) || (max_abs > 0 && max_abs / min_abs > 1e3);
  }
  std::string prefix = "Array(";
  std::string body;
  if (a.size() == 0 && a.ndim() > 0) {
    body = "[]";
  } else {
    Printer p{values, a.shape(), a.shape().strides(), f, a.size() > opts.threshold, opts.edgeitems};
    p.measure(f, 0, 0);
    p.measure_width(0, 0);
    p.print(body, 0, 0, prefix.size());
  }
  os << prefix << body << ", dtype=" << dtype_name(a.dtype());
  if (a.ndim() > 0 && a.size() == 0) os << ", shape=" << a.shape();
  if (a.weak_type()) os << ", weak_type=True";
  return os << ")";
}

}  // namespace pax

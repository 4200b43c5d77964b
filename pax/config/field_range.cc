// FieldRange's membership test and its text in messages.
#include "pax/config/field_range.h"

#include <cmath>
#include <cstdint>
#include <sstream>

namespace pax {

std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e18) return std::to_string(int64_t(v));
  std::ostringstream out;
  out.precision(12);
  out << v;
  return out.str();
}

bool FieldRange::contains(double v) const {
  if (std::isnan(v)) return false;
  if (min_open ? !(v > min) : !(v >= min)) return false;
  return max_open ? v < max : v <= max;
}

std::string FieldRange::str() const {
  if (min == -range::kInf && max == range::kInf) return "any finite number";
  if (max == range::kInf) return std::string(min_open ? "greater than " : "at least ") + number_text(min) + ", finite";
  return (min_open ? "(" : "[") + number_text(min) + ", " + number_text(max) + (max_open ? ")" : "]");
}

}  // namespace pax

// The valid range of a numeric HParams field, declared with the field:
//
//   PAX_HPARAMS(Dropout, BaseHParams,
//               (keep_prob, "Probability of keeping an element.", range::keep_probability),
//               (num_layers, "Layers of the stack.", range::closed(0, 4096)));
//
// Before a run every number of an experiment's config (integers, reals, lists
// and optional values, at any depth) is checked against its field's range
// (pax/experiments/field_ranges.h), so that a negative dropout probability or
// a NaN epsilon is refused with the field's path and its range.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace pax {

struct FieldRange {
  double min = 0, max = 0;
  bool min_open = false, max_open = false;  // excluded ends
  std::string str() const;                  // "[0, 1)", "at least 1, finite", "any finite number"
  bool contains(double v) const;            // NaN never is
};

// A number as range messages show it: integers as integers (1000000000000,
// not 1e+12), other values to 12 digits.
std::string number_text(double v);

// The named kinds of range, and closed(lo, hi) for the rest.
namespace range {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kMaxDim = double(int64_t(1) << 31);  // a dimension, count or length

constexpr FieldRange closed(double lo, double hi) { return {lo, hi, false, false}; }
inline constexpr FieldRange probability{0, 1, false, true};       // [0, 1): dropout, betas
inline constexpr FieldRange keep_probability{0, 1, true, false};  // (0, 1]
inline constexpr FieldRange fraction = closed(0, 1);
inline constexpr FieldRange finite{-kInf, kInf, true, true};
inline constexpr FieldRange non_negative{0, kInf, false, true};
inline constexpr FieldRange positive{0, kInf, true, true};
inline constexpr FieldRange size = closed(0, kMaxDim);  // a dimension (0: derived from the parent layer)
inline constexpr FieldRange count = closed(1, kMaxDim);
inline constexpr FieldRange steps = closed(0, 1e15);
inline constexpr FieldRange seed = closed(-9.3e18, 9.3e18);

}  // namespace range
}  // namespace pax

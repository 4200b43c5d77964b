// Checkpoint steps as flax.training.checkpoints has them: "int or float: the
// training step number or another metric number" (the seed's wording), and
// flax's natural sort of names with numbers in them, which orders them.
//
//   natural_sort({"ckpt_0.01", "ckpt_0.1", "ckpt_0.001"})  -> ckpt_0.001, ckpt_0.01, ckpt_0.1
//   natural_sort({"ckpt_-1.0", "ckpt_1e5", "ckpt_1.0"})    -> ckpt_-1.0, ckpt_1.0, ckpt_1e5
//
// A step is an integer or a float, and keeps which one it is: flax names
// step 2 "checkpoint_2" and step 2.0 "checkpoint_2.0". Steps compare by value
// (2 == 2.0), as flax's natural sort compares the numbers in names.
#pragma once

#include <compare>
#include <concepts>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace pax::train {

class CheckpointStep {
 public:
  template <std::integral T>
  requires(!std::same_as<T, bool>) CheckpointStep(T step)
      : integer_(static_cast<int64_t>(step)), value_(static_cast<double>(step)), is_integer_(true) {}
  // Throws pax::Error for NaN and infinities.
  template <std::floating_point T>
  CheckpointStep(T step) : value_(static_cast<double>(step)) {
    check_finite();
  }

  bool is_integer() const { return is_integer_; }
  // The step as an integer: an integer step, or a float with an integer value
  // in int64's range (2.0); nullopt otherwise.
  std::optional<int64_t> as_integer() const;
  double value() const { return value_; }
  // As Python's str() spells it, which is how flax names checkpoints:
  // "42", "-3", "0.5", "100000.0", "1e-05", "1.5e+16".
  std::string str() const;

  friend bool operator==(const CheckpointStep& a, const CheckpointStep& b) { return (a <=> b) == 0; }
  friend std::weak_ordering operator<=>(const CheckpointStep& a, const CheckpointStep& b);

 private:
  void check_finite() const;
  int64_t integer_ = 0;
  double value_ = 0;
  bool is_integer_ = false;
};

std::ostream& operator<<(std::ostream& os, const CheckpointStep& step);

// A step spelled as flax's step pattern ([-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?,
// the whole of `text`): digits alone (with a sign) are an integer step, the
// rest a float. nullopt for anything else and for floats that overflow.
std::optional<CheckpointStep> parse_checkpoint_step(std::string_view text);

// Python's repr of a finite double (shortest round trip; fixed notation for
// exponents -4 .. 15, else scientific with a two-digit exponent at least).
std::string python_float_repr(double value);

// flax.training.checkpoints.natural_sort: sorts names by their pieces, where
// a piece is a number (compared as a number, scientific notation included) or
// the text between numbers (compared as text); stable. With `signed_numbers`
// a '-' or '+' before a number is its sign; without, it is dropped (neither
// the number's nor the text's), as flax's signed=False does.
std::vector<std::string> natural_sort(std::vector<std::string> names, bool signed_numbers = true);

}  // namespace pax::train

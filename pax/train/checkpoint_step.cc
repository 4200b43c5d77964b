// Checkpoint steps (integer or float), their Python spelling, and flax's
// natural sort with its number pattern scanned by hand.
#include "pax/train/checkpoint_step.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <variant>

#include "pax/core/error.h"

namespace pax::train {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_sign(char c) { return c == '-' || c == '+'; }

size_t skip_digits(std::string_view s, size_t i) {
  while (i < s.size() && is_digit(s[i])) ++i;
  return i;
}

// Length of flax's number pattern [-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?
// matched at s[pos] (0: no match there), as Python's re matches it.
size_t match_number(std::string_view s, size_t pos) {
  size_t i = pos;
  if (i < s.size() && is_sign(s[i])) ++i;
  size_t end = skip_digits(s, i);
  if (end > i) {
    if (end < s.size() && s[end] == '.') end = skip_digits(s, end + 1);
  } else if (i < s.size() && s[i] == '.' && skip_digits(s, i + 1) > i + 1) {
    end = skip_digits(s, i + 1);
  } else {
    return 0;
  }
  if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    size_t k = end + 1;
    if (k < s.size() && is_sign(s[k])) ++k;
    const size_t exp_end = skip_digits(s, k);
    if (exp_end > k) end = exp_end;
  }
  return end - pos;
}

// Python's float() of a matched number: overflow gives an infinity, underflow 0.
double number_value(std::string_view number) {
  const std::string text(number);
  return std::strtod(text.c_str(), nullptr);
}

// A name split as flax's natural sort splits it: text, number, text, ..., text.
using Piece = std::variant<std::string, double>;

std::vector<Piece> natural_key(std::string_view s, bool signed_numbers) {
  std::vector<Piece> key;
  std::string text;
  for (size_t i = 0; i < s.size();) {
    const size_t n = match_number(s, i);
    if (n == 0) {
      text += s[i++];
      continue;
    }
    std::string_view number = s.substr(i, n);
    if (!signed_numbers && is_sign(number[0])) number.remove_prefix(1);
    key.emplace_back(std::move(text));
    key.emplace_back(number_value(number));
    text.clear();
    i += n;
  }
  key.emplace_back(std::move(text));
  return key;
}

}  // namespace

std::optional<int64_t> CheckpointStep::as_integer() const {
  if (is_integer_) return integer_;
  if (std::trunc(value_) != value_ || value_ < -0x1p63 || value_ >= 0x1p63) return std::nullopt;
  return static_cast<int64_t>(value_);
}

std::string CheckpointStep::str() const { return is_integer_ ? std::to_string(integer_) : python_float_repr(value_); }

void CheckpointStep::check_finite() const {
  PAX_CHECK(std::isfinite(value_), "checkpoint step must be a finite number (an integer or a float), got ", value_);
}

std::weak_ordering operator<=>(const CheckpointStep& a, const CheckpointStep& b) {
  if (a.is_integer_ && b.is_integer_) return a.integer_ <=> b.integer_;
  // long double holds every int64 exactly, and both values are finite.
  const long double x = a.is_integer_ ? static_cast<long double>(a.integer_) : a.value_;
  const long double y = b.is_integer_ ? static_cast<long double>(b.integer_) : b.value_;
  if (x < y) return std::weak_ordering::less;
  if (x > y) return std::weak_ordering::greater;
  return std::weak_ordering::equivalent;
}

std::ostream& operator<<(std::ostream& os, const CheckpointStep& step) { return os << step.str(); }

std::optional<CheckpointStep> parse_checkpoint_step(std::string_view text) {
  if (text.empty() || match_number(text, 0) != text.size()) return std::nullopt;
  const std::string_view unsigned_part = is_sign(text[0]) ? text.substr(1) : text;
  if (std::all_of(unsigned_part.begin(), unsigned_part.end(), is_digit)) {
    int64_t step = 0;
    const std::string_view digits = text[0] == '+' ? unsigned_part : text;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (ec == std::errc() && end == digits.data() + digits.size()) return CheckpointStep(step);
  }
  const double value = number_value(text);  // a float, or an integer too large for int64
  if (!std::isfinite(value)) return std::nullopt;
  return CheckpointStep(value);
}

std::string python_float_repr(double value) {
  PAX_CHECK(std::isfinite(value), "python_float_repr: ", value, " is not finite");
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), std::fabs(value), std::chars_format::scientific);
  const std::string_view sci(buf, size_t(end - buf));  // "d.ddde+XX" or "de-XX", shortest round trip
  const size_t e_pos = sci.find('e');
  std::string digits(sci.substr(0, e_pos));
  std::erase(digits, '.');
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string out = value < 0 ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(size_t(-exponent - 1), '0') + digits;
    } else {
      if (digits.size() < size_t(exponent) + 1) digits.resize(size_t(exponent) + 1, '0');
      const std::string fraction = digits.substr(size_t(exponent) + 1);
      out += digits.substr(0, size_t(exponent) + 1) + "." + (fraction.empty() ? "0" : fraction);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int magnitude = std::abs(exponent);
    out += std::string(exponent < 0 ? "e-" : "e+") + (magnitude < 10 ? "0" : "") + std::to_string(magnitude);
  }
  return out;
}

std::vector<std::string> natural_sort(std::vector<std::string> names, bool signed_numbers) {
  std::vector<std::pair<std::vector<Piece>, size_t>> keys;
  keys.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) keys.emplace_back(natural_key(names[i], signed_numbers), i);
  // Pieces alternate text and number at the same positions, so a variant
  // comparison never compares a text with a number.
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> sorted;
  sorted.reserve(names.size());
  for (const auto& key : keys) sorted.push_back(std::move(names[key.second]));
  return sorted;
}

}  // namespace pax::train

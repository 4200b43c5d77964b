// A number printed with the largest unit it reaches: 50.5 MB, 1.20M.
#pragma once

#include <initializer_list>
#include <string>

namespace pax {

struct NumberUnit {
  double scale;        // 1e9
  const char* suffix;  // " GB"
};

// `value` divided by the first (largest) unit whose scale it reaches, with
// `decimals` digits and the unit's suffix; below every unit, the value with
// no decimals and `plain_suffix`. Units are listed largest first.
std::string format_scaled(double value, std::initializer_list<NumberUnit> units, int decimals,
                          const char* plain_suffix = "");

}  // namespace pax

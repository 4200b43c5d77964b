// format_scaled (see scaled_number.h).
#include "pax/core/scaled_number.h"

#include <cstdio>

namespace pax {

std::string format_scaled(double value, std::initializer_list<NumberUnit> units, int decimals,
                          const char* plain_suffix) {
  char buf[64];
  for (const NumberUnit& unit : units) {
    if (value < unit.scale) continue;
    std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value / unit.scale, unit.suffix);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.0f%s", value, plain_suffix);
  return buf;
}

}  // namespace pax

// Environment switches (see env_switch.h).
#include "pax/core/env_switch.h"

#include <cctype>
#include <cstdlib>
#include <string>

namespace pax {

bool env_switch(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  std::string value(env);
  for (char& c : value) c = char(std::tolower(static_cast<unsigned char>(c)));
  return !(value == "0" || value == "false" || value == "no" || value == "off");
}

}  // namespace pax

// Version string; PAX_VERSION_STRING is set by pax/CMakeLists.txt.
#include "pax/core/version.h"

namespace pax {
const char* version() { return PAX_VERSION_STRING; }
}  // namespace pax

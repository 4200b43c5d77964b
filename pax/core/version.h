// The paxcc version string ("0.1.0"), taken from the CMake project version.
#pragma once

namespace pax {
const char* version();
}  // namespace pax

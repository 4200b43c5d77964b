// Placeholder registration for the dot primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_dot_prims(PrimTable&) {}
}  // namespace pax

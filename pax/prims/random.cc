// Placeholder registration for the random primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_random_prims(PrimTable&) {}
}  // namespace pax

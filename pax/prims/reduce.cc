// Placeholder registration for the reduce primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_reduce_prims(PrimTable&) {}
}  // namespace pax

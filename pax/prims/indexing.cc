// Placeholder registration for the indexing primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_indexing_prims(PrimTable&) {}
}  // namespace pax

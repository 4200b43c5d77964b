// Placeholder registration for the sort primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_sort_prims(PrimTable&) {}
}  // namespace pax

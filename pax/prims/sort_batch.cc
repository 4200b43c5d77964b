// batching rules for the sort primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_sort_batching(PrimTable&) {}

}  // namespace pax

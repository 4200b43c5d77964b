// batching rules for the indexing primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_indexing_batching(PrimTable&) {}

}  // namespace pax

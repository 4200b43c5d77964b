// batching rules for the random primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_random_batching(PrimTable&) {}

}  // namespace pax

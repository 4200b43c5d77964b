// batching rules for the elementwise primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_elementwise_batching(PrimTable&) {}

}  // namespace pax

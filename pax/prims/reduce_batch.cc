// batching rules for the reduce primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_reduce_batching(PrimTable&) {}

}  // namespace pax

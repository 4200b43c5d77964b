// batching rules for the shape primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_shape_batching(PrimTable&) {}

}  // namespace pax

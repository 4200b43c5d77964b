// batching rules for the dot primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_dot_batching(PrimTable&) {}

}  // namespace pax

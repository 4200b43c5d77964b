// batching rules for the conv primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_conv_batching(PrimTable&) {}

}  // namespace pax

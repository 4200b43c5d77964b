// Placeholder registration for the conv primitives.
#include "pax/prims/registry.h"

namespace pax {
void register_conv_prims(PrimTable&) {}
}  // namespace pax

// VJP and JVP rules for the conv primitives.
#include "pax/prims/registry.h"

namespace pax {

void register_conv_ad(PrimTable&) {}

}  // namespace pax

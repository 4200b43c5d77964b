// Control-flow primitives (cond, while_loop, scan, remat): rules and impls.
#include "pax/prims/registry.h"

namespace pax {

void register_control_flow_prims(PrimTable&) {}

}  // namespace pax

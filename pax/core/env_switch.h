// On / off switches read from the environment (PAX_PROFILE=1,
// PAX_OVERLAP_COLLECTIVES=0, ...), one reading for every layer.
#pragma once

namespace pax {

// Environment variable `name` as a switch: unset or empty gives `fallback`;
// "0", "false", "no" and "off" (any case) turn it off; any other value
// turns it on.
bool env_switch(const char* name, bool fallback);

}  // namespace pax

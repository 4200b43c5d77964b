// A strict pre-check for JSON read from checkpoint files: one well-formed
// value, no duplicate keys in any object (ordinary parsers silently keep the
// last one) and bounded nesting (so that recursive consumers cannot overflow
// the stack).
#pragma once

#include <string>
#include <string_view>

namespace pax::train {

// Throws pax::Error "<what>: <problem>" unless `text` passes.
void check_json(std::string_view text, const std::string& what, int max_depth);

}  // namespace pax::train

// Prim: the enum of primitives generated from prims.def, with names and arities.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace pax {

enum class Prim : uint16_t {
#define PAX_PRIM(id, name, arity) id,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

inline constexpr int kNumPrims = 0
#define PAX_PRIM(id, name, arity) +1
#include "pax/ir/prims.def"
#undef PAX_PRIM
    ;

const char* prim_name(Prim p);
int prim_arity(Prim p);  // -1: variadic
// Looks a primitive up by its printed name; throws pax::Error if unknown.
Prim prim_from_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, Prim p);

}  // namespace pax

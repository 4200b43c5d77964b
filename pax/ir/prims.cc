// Name, arity, family and cost tables for the primitives of prims.def.
#include "pax/ir/prims.h"

#include <array>
#include <ostream>

#include "pax/core/error.h"

namespace pax {
namespace {

constexpr std::array<const char*, kNumPrims> kNames = {
#define PAX_PRIM(id, name, arity, family, cost) name,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<int, kNumPrims> kArities = {
#define PAX_PRIM(id, name, arity, family, cost) arity,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<PrimFamily, kNumPrims> kFamilies = {
#define PAX_PRIM(id, name, arity, family, cost) PrimFamily::family,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<PrimCost, kNumPrims> kCosts = {
#define PAX_PRIM(id, name, arity, family, cost) PrimCost::cost,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

}  // namespace

PrimFamily prim_family(Prim p) { return kFamilies[size_t(p)]; }
PrimCost prim_cost(Prim p) { return kCosts[size_t(p)]; }

const char* prim_name(Prim p) { return kNames[size_t(p)]; }
int prim_arity(Prim p) { return kArities[size_t(p)]; }

Prim prim_from_name(std::string_view name) {
  for (int i = 0; i < kNumPrims; ++i) {
    if (name == kNames[size_t(i)]) return Prim(i);
  }
  PAX_FAIL("unknown primitive '", name, "'");
}

std::ostream& operator<<(std::ostream& os, Prim p) { return os << prim_name(p); }

}  // namespace pax

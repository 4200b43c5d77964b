// The per-primitive tables of prims.def: names, arities, families, costs,
// kernel operations and recompute flags.
#include "pax/ir/prims.h"

#include <array>
#include <ostream>

#include "pax/core/error.h"

namespace pax {
namespace {

constexpr std::array<const char*, kNumPrims> kNames = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) name,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<int, kNumPrims> kArities = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) arity,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<PrimFamily, kNumPrims> kFamilies = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PrimFamily::family,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<PrimCost, kNumPrims> kCosts = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PrimCost::cost,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

#define PAX_ACCEPTS_floating Accepts::floating
#define PAX_ACCEPTS_numeric Accepts::numeric
#define PAX_ACCEPTS_integer Accepts::integer
#define PAX_ACCEPTS_int_or_bool Accepts::int_or_bool
#define PAX_ACCEPTS_any Accepts::any
#define PAX_ACCEPTS_rule std::nullopt
constexpr std::array<std::optional<Accepts>, kNumPrims> kAccepts = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) \
  std::optional<Accepts>(PAX_ACCEPTS_##accepts),
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

constexpr std::array<bool, kNumPrims> kRecomputable = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) recompute,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

}  // namespace

bool prim_recomputable(Prim p) { return kRecomputable[size_t(p)]; }
std::optional<Accepts> prim_accepts(Prim p) { return kAccepts[size_t(p)]; }

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

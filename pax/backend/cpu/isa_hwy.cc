// The Highway target that dynamic dispatch chose (one tiny function compiled
// per target, as every *_hwy.cc file is, so the answer is the dispatcher's).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/isa_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
int64_t CompiledTarget() { return HWY_TARGET; }
}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {
HWY_EXPORT(CompiledTarget);
int64_t hwy_dispatched_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }
}  // namespace pax::cpu
#endif

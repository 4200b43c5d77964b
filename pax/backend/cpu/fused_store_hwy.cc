// Streaming copies (see fused_store.h), compiled per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/fused_store_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstring>

#include "pax/backend/cpu/fused_store.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void StreamCopy(void* dst, const void* src, size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const size_t N = hn::Lanes(d);
  uint8_t* y = static_cast<uint8_t*>(dst);
  const uint8_t* x = static_cast<const uint8_t*>(src);
  size_t i = 0;
  for (; i + N <= bytes; i += N) hn::Stream(hn::LoadU(d, x + i), d, y + i);
  if (i < bytes) std::memcpy(y + i, x + i, bytes - i);
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {

HWY_EXPORT(StreamCopy);

void stream_copy(void* dst, const void* src, size_t bytes) { HWY_DYNAMIC_DISPATCH(StreamCopy)(dst, src, bytes); }

void stream_fence() { hwy::FlushStream(); }

}  // namespace pax::cpu
#endif  // HWY_ONCE

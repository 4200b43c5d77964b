// oneDNN engine, streams, execution and the primitive cache (see dnnl_context.h).
#include "pax/backend/cpu/dnnl_context.h"

#include <cstdlib>
#include <cstring>

#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::data_type dnnl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: break;
  }
  PAX_FAIL("oneDNN: no data type for ", dtype_name(dtype));
}

dnnl::memory::desc strided_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DType dtype) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dnnl_dtype(dtype),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory user_memory(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, dnnl_engine(), const_cast<void*>(data));
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) { return std::strncmp(pd.impl_info_str(), "ref", 3) == 0; }

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void dnnl_execute(const KernelContext& ctx, const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args,
                  size_t scratchpad_bytes) {
  std::shared_ptr<Buffer> scratchpad;
  if (scratchpad_bytes > 0) {
    scratchpad = ctx.allocate_scratch(scratchpad_bytes);
    dnnl::memory::desc md({int64_t(scratchpad_bytes)}, dnnl::memory::data_type::u8, dnnl::memory::dims{1});
    args.emplace(DNNL_ARG_SCRATCHPAD, user_memory(md, scratchpad->data()));
  }
  dnnl_execute(prim, std::move(args));
}

void dnnl_execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args) {
  try {
    dnnl::stream& stream = dnnl_stream();
    prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    PAX_FAIL("oneDNN execution failed: ", e.what());
  }
}

size_t DnnlCache::KeyHash::operator()(const DnnlKey& key) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the 64-bit words
  for (int64_t v : key) h = (h ^ uint64_t(v)) * 0x100000001b3ull;
  return size_t(h ^ (h >> 29));
}

std::shared_ptr<const void> DnnlCache::find(const DnnlKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

std::shared_ptr<const void> DnnlCache::insert(const DnnlKey& key, std::shared_ptr<const void> value) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, std::move(value));
  index_.emplace(key, lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return lru_.front().second;
}

size_t DnnlCache::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

void DnnlCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  lru_.clear();
}

DnnlCache& dnnl_cache() {
  // The engine is created first so that it outlives the cached primitives.
  static DnnlCache cache([] {
    dnnl_engine();
    const char* env = std::getenv("PAX_DNNL_CACHE_CAPACITY");
    long v = env ? std::atol(env) : 0;
    return v > 0 ? size_t(v) : size_t(1024);
  }());
  return cache;
}

}  // namespace pax::cpu

// oneDNN plumbing shared by the GEMM and convolution kernels: the CPU engine,
// the stream, dtype mapping, execution with a scratchpad from the kernel's
// context, and a thread-safe LRU cache of primitives keyed by everything that
// determines them (shapes, strides, dtypes, attributes), so that a repeated
// call costs one hash lookup plus the execution.
// oneDNN stays private to the backend: only files under pax/backend/cpu/ may
// include this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "pax/backend/kernel.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

// The CPU engine (created once).
dnnl::engine& dnnl_engine();
// An in-order stream on that engine. One per thread: a oneDNN stream must not
// be used by two threads at once, and eager calls may come from any thread.
dnnl::stream& dnnl_stream();

// oneDNN data type of a pax dtype; only f32, bf16 and f16 have one here.
dnnl::memory::data_type dnnl_dtype(DType dtype);

// Plain strided memory descriptor (dims and strides in elements).
dnnl::memory::desc strided_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, DType dtype);

// Wraps user memory (never owned by oneDNN).
dnnl::memory user_memory(const dnnl::memory::desc& md, const void* data);

// True when the primitive descriptor selected oneDNN's slow reference code.
bool is_reference_impl(const dnnl::primitive_desc_base& pd);

// Primitive attributes with a user-provided scratchpad (see dnnl_execute).
dnnl::primitive_attr user_scratchpad_attr();

// Executes `prim` (made with user_scratchpad_attr) on this thread's stream
// and waits. A scratchpad of `scratchpad_bytes` (from the primitive
// descriptor) comes from the kernel's context, so concurrent executions of
// one primitive never share one.
void dnnl_execute(const KernelContext& ctx, const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args,
                  size_t scratchpad_bytes);
// Executes a primitive made without a user scratchpad (the reorders) on this
// thread's stream and waits.
void dnnl_execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args);

// A flat integer description of one primitive: a kind tag first, then every
// shape, stride, dtype and attribute it depends on.
using DnnlKey = std::vector<int64_t>;

// Least-recently-used map from keys to immutable, shared entries (a primitive
// and what is needed to run it). Thread-safe; an entry stays alive while in use
// even after eviction.
class DnnlCache {
 public:
  explicit DnnlCache(size_t capacity) : capacity_(capacity) {}
  std::shared_ptr<const void> find(const DnnlKey& key);
  // Inserts unless another thread got there first; returns the cached entry.
  std::shared_ptr<const void> insert(const DnnlKey& key, std::shared_ptr<const void> value);
  size_t size();
  void clear();

 private:
  struct KeyHash {
    size_t operator()(const DnnlKey& key) const;
  };
  using Lru = std::list<std::pair<DnnlKey, std::shared_ptr<const void>>>;  // most recent first
  size_t capacity_;
  std::mutex mutex_;
  Lru lru_;
  std::unordered_map<DnnlKey, Lru::iterator, KeyHash> index_;
};

// The process-wide primitive cache (1024 entries unless
// $PAX_DNNL_CACHE_CAPACITY says otherwise).
DnnlCache& dnnl_cache();

// Returns the cached entry for `key`, building it with make() (which returns a
// V) on a miss. make() runs outside the lock: oneDNN primitive creation is slow.
template <class V, class Make>
std::shared_ptr<const V> dnnl_cached(const DnnlKey& key, Make&& make) {
  if (auto hit = dnnl_cache().find(key)) return std::static_pointer_cast<const V>(hit);
  std::shared_ptr<const void> made = std::make_shared<const V>(make());
  return std::static_pointer_cast<const V>(dnnl_cache().insert(key, std::move(made)));
}

}  // namespace pax::cpu

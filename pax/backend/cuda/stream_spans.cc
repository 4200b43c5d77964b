// CUDA-event spans on a stream, put into the trace (stream_spans.h).
#include "pax/backend/cuda/stream_spans.h"

#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/core/trace.h"

namespace pax::cuda {

StreamSpans::StreamSpans(int device, cudaStream_t stream) : active_(trace::active()), device_(device), stream_(stream) {
  if (!active_) return;
  try {
    base_ = event();
    PAX_CUDA_CHECK(cudaEventRecord(base_, stream_));
    PAX_CUDA_CHECK(cudaEventSynchronize(base_));
  } catch (...) {  // no destructor runs for a constructor that throws
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    throw;
  }
  base_us_ = trace::now_us();
}

StreamSpans::~StreamSpans() {
  try {
    finish();
  } catch (...) {
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t StreamSpans::event() {
  cudaEvent_t e = nullptr;
  PAX_CUDA_CHECK(cudaEventCreate(&e));
  events_.push_back(e);
  return e;
}

void StreamSpans::begin() {
  if (!active_) return;
  open_ = event();
  PAX_CUDA_CHECK(cudaEventRecord(open_, stream_));
}

void StreamSpans::end(const char* category, const std::string& name) {
  if (!active_ || !open_) return;
  cudaEvent_t closed = event();
  PAX_CUDA_CHECK(cudaEventRecord(closed, stream_));
  spans_.push_back(Span{open_, closed, category, name});
  open_ = nullptr;
}

void StreamSpans::finish() {
  if (!active_) return;
  active_ = false;
  const std::vector<Span> spans = std::move(spans_);
  spans_.clear();
  if (!spans.empty()) {
    PAX_CUDA_CHECK(cudaEventSynchronize(spans.back().end));
    const std::string track = "cuda:" + std::to_string(device_) + " stream";
    for (const Span& s : spans) {
      float from_base_ms = 0, length_ms = 0;
      PAX_CUDA_CHECK(cudaEventElapsedTime(&from_base_ms, base_, s.start));
      PAX_CUDA_CHECK(cudaEventElapsedTime(&length_ms, s.start, s.end));
      trace::complete_on_track(track, s.category, s.name, base_us_ + 1e3 * double(from_base_ms),
                               1e3 * double(length_ms));
    }
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  events_.clear();
}

}  // namespace pax::cuda

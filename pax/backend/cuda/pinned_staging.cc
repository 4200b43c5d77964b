// The pinned staging pool (see pinned_staging.h): which buffer a chunk goes
// through, and when a buffer may be taken again.
#include "pax/backend/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cuda {

PinnedStaging::PinnedStaging(PinnedProvider& provider, Options options) : provider_(provider), options_(options) {
  PAX_CHECK(options.buffer_bytes > 0 && options.limit_bytes >= options.buffer_bytes, "pinned staging: buffer_bytes (",
            options.buffer_bytes, ") must be > 0 and at most limit_bytes (", options.limit_bytes, ")");
}

PinnedStaging::~PinnedStaging() = default;

PinnedStaging::Buffer* PinnedStaging::try_acquire_locked() {
  for (auto& b : buffers_) {
    if (b->state == Buffer::State::idle) {
      b->state = Buffer::State::busy;
      return b.get();
    }
  }
  for (auto& b : buffers_) {
    if (b->state == Buffer::State::in_flight && provider_.event_done(b->event)) {
      provider_.release_event(b->event);
      b->state = Buffer::State::busy;
      ++stats_.reuses;
      return b.get();
    }
  }
  if (stats_.pinned_bytes + options_.buffer_bytes <= options_.limit_bytes) {
    void* p = provider_.allocate_pinned(options_.buffer_bytes);
    if (p == nullptr) {
      PAX_CHECK(!buffers_.empty(), "out of pinned host memory: allocating a ",
                format_bytes(double(options_.buffer_bytes)),
                " staging buffer for a host<->device copy failed (no staging buffer is held)");
      return nullptr;
    }
    auto b = std::make_unique<Buffer>();
    b->ptr = static_cast<char*>(p);
    b->state = Buffer::State::busy;
    buffers_.push_back(std::move(b));
    stats_.pinned_bytes += options_.buffer_bytes;
    ++stats_.buffers;
    return buffers_.back().get();
  }
  return nullptr;
}

PinnedStaging::Buffer* PinnedStaging::try_acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  return try_acquire_locked();
}

PinnedStaging::Buffer* PinnedStaging::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (Buffer* b = try_acquire_locked()) return b;
    // Every buffer is busy or still copying and no more may be allocated:
    // wait for the copy that was queued first, which finishes first on its
    // stream.
    Buffer* oldest = nullptr;
    for (auto& b : buffers_) {
      if (b->state == Buffer::State::in_flight && (oldest == nullptr || b->order < oldest->order)) oldest = b.get();
    }
    if (oldest == nullptr) {
      // All held by other callers: one comes back idle or in flight.
      returned_.wait(lock);
      continue;
    }
    oldest->state = Buffer::State::busy;  // no other caller waits for it too
    ++stats_.waits;
    const EventId event = oldest->event;
    lock.unlock();
    provider_.wait_event(event);
    lock.lock();
    provider_.release_event(event);
    ++stats_.reuses;
    return oldest;
  }
}

void PinnedStaging::put_in_flight(Buffer* buffer, EventId event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer->state = Buffer::State::in_flight;
    buffer->event = event;
    buffer->order = next_order_++;
    ++stats_.chunks;
  }
  returned_.notify_one();
}

void PinnedStaging::give_back(Buffer* buffer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer->state = Buffer::State::idle;
  }
  returned_.notify_one();
}

void PinnedStaging::stage_to_device(void* dst, const void* src, size_t n, StreamId stream, const StagedCopyFn& copy) {
  for (size_t offset = 0; offset < n; offset += options_.buffer_bytes) {
    const size_t chunk = std::min(options_.buffer_bytes, n - offset);
    Buffer* buffer = acquire();
    EventId event = 0;
    try {
      std::memcpy(buffer->ptr, static_cast<const char*>(src) + offset, chunk);
      copy(static_cast<char*>(dst) + offset, buffer->ptr, chunk, stream);
    } catch (...) {
      give_back(buffer);  // nothing was queued from it
      throw;
    }
    // Recorded after the copy was queued: the buffer must not be refilled
    // before the device has read it.
    {
      std::lock_guard<std::mutex> lock(mu_);
      event = provider_.record_event(stream);
    }
    put_in_flight(buffer, event);
  }
}

void PinnedStaging::stage_from_device(void* dst, const void* src, size_t n, StreamId stream, const StagedCopyFn& copy) {
  struct Queued {
    Buffer* buffer;
    size_t offset, chunk;
    EventId event;
  };
  // This caller's chunks in flight, oldest first; their buffers stay busy
  // until their bytes are copied out.
  std::deque<Queued> queued;
  auto drain_front = [&] {
    const Queued q = queued.front();
    queued.pop_front();
    provider_.wait_event(q.event);
    {
      std::lock_guard<std::mutex> lock(mu_);
      provider_.release_event(q.event);
    }
    std::memcpy(static_cast<char*>(dst) + q.offset, q.buffer->ptr, q.chunk);
    give_back(q.buffer);
  };
  try {
    for (size_t offset = 0; offset < n; offset += options_.buffer_bytes) {
      const size_t chunk = std::min(options_.buffer_bytes, n - offset);
      Buffer* buffer = try_acquire();
      // Holding buffers while blocking for another could wait forever on
      // callers doing the same: finish own chunks first.
      while (buffer == nullptr && !queued.empty()) {
        drain_front();
        buffer = try_acquire();
      }
      if (buffer == nullptr) buffer = acquire();
      try {
        copy(buffer->ptr, static_cast<const char*>(src) + offset, chunk, stream);
      } catch (...) {
        give_back(buffer);
        throw;
      }
      EventId event = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        event = provider_.record_event(stream);
        ++stats_.chunks;
      }
      queued.push_back({buffer, offset, chunk, event});
    }
    while (!queued.empty()) drain_front();
  } catch (...) {
    // The copies already queued still write into their buffers: keep those
    // in flight behind their events rather than idle.
    for (const Queued& q : queued) {
      std::lock_guard<std::mutex> lock(mu_);
      q.buffer->state = Buffer::State::in_flight;
      q.buffer->event = q.event;
      q.buffer->order = next_order_++;
    }
    returned_.notify_all();
    throw;
  }
}

void PinnedStaging::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::unique_ptr<Buffer>> kept;
  for (std::unique_ptr<Buffer>& b : buffers_) {
    const bool unused = b->state == Buffer::State::idle ||
                        (b->state == Buffer::State::in_flight && provider_.event_done(b->event));
    if (!unused) {
      kept.push_back(std::move(b));
      continue;
    }
    if (b->state == Buffer::State::in_flight) provider_.release_event(b->event);
    provider_.free_pinned(b->ptr, options_.buffer_bytes);
    stats_.pinned_bytes -= options_.buffer_bytes;
    --stats_.buffers;
  }
  buffers_ = std::move(kept);
}

PinnedStagingStats PinnedStaging::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace pax::cuda

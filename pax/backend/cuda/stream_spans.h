// Traces of work on a CUDA stream: each step an executable queues is
// bracketed by two CUDA events, and once the stream has run them their
// times go into the trace (pax/core/trace.h) on the track "cuda:<device>
// stream", on the trace's own clock. A host-side span would time only the
// queueing. The clocks are tied by a first event the host waits for: its
// time on the host is when the wait returns (so the stream's spans sit a
// wake-up later than they ran). Tracing thus waits for the stream twice per
// call (before and after), which a traced call accepts; without tracing none
// of this runs.
//
// A span is the time between the stream reaching its two events: where the
// stream waits for the host to queue a step's kernels (a starved stream),
// that wait is in the span too; and another thread's call queued on the same
// stream meanwhile (calls from several threads at once) is counted in the
// spans it falls between. Traces are meant for one call at a time per
// device.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace pax::cuda {

class StreamSpans {
 public:
  // Active while a trace is being recorded (trace::active()), else every
  // call does nothing.
  StreamSpans(int device, cudaStream_t stream);
  ~StreamSpans();  // finish(), errors dropped
  StreamSpans(const StreamSpans&) = delete;
  StreamSpans& operator=(const StreamSpans&) = delete;

  bool active() const { return active_; }
  // Brackets one step queued on the stream between begin() and end().
  void begin();
  void end(const char* category, const std::string& name);
  // Waits for the stream to run the steps and adds them to the trace.
  void finish();

 private:
  struct Span {
    cudaEvent_t start = nullptr, end = nullptr;
    const char* category;
    std::string name;
  };
  cudaEvent_t event();  // a new event, destroyed by finish()

  bool active_ = false;
  int device_;
  cudaStream_t stream_;
  cudaEvent_t base_ = nullptr;
  double base_us_ = 0;
  cudaEvent_t open_ = nullptr;  // begin()'s event, until end()
  std::vector<Span> spans_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace pax::cuda

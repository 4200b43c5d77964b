// Execution traces in the Chrome trace-event format, the one TensorBoard's
// profile plugin and Perfetto (ui.perfetto.dev) open: one "complete" event
// (ph "X": name, category, start and duration in microseconds, the thread
// that ran it, arguments such as shapes) per traced piece of work.
//
// Recording is off until start() and costs one atomic load per would-be
// event then. While on, events go into a buffer per thread (no lock on the
// hot path) and stop() gathers them:
//
//   pax::trace::start();
//   { pax::trace::Span span("gemm", "dot_general f32[8,256] x f32[256,64]"); ... }
//   std::string json = pax::trace::stop("paxcc rank 0");  // {"traceEvents": [...]}
//
// Threads are named where they start (set_thread_name): the caller's, the
// OpenMP workers, the compile and communication threads. Writing a trace
// (gzipped, PAX_TRACE_DIR) is pax/train/trace_file.h's: the array core has
// no zlib.
#pragma once

#include <cstdint>
#include <string>

namespace pax::trace {

// Whether events are being recorded.
bool active();

// Starts recording (dropping events of an earlier recording not stopped).
void start();

// Stops recording; returns every event since start() as a trace-event JSON
// document, the process named `process_name`. "" when nothing was recorded.
std::string stop(const std::string& process_name);

// Microseconds on the trace's clock (steady, since the process started).
double now_us();

// One event of `category` and `name` from start_us (now_us()) to now, on the
// calling thread; args_json is a JSON object's members ("\"shape\": \"f32[2]\"")
// or empty. Nothing when recording is off.
void complete(const char* category, const std::string& name, double start_us, const std::string& args_json = {});

// One event of `category` and `name` from start_us for dur_us (both on
// now_us()'s clock) on the track named `track` instead of the calling
// thread: work that ran elsewhere and was timed afterwards (a device's
// stream, timed by its events). A track is shown as a thread of that name.
// Nothing when recording is off.
void complete_on_track(const std::string& track, const char* category, const std::string& name, double start_us,
                       double dur_us, const std::string& args_json = {});

// The calling thread's name in traces ("main", "omp worker 1", "compile").
void set_thread_name(const std::string& name);

// An event spanning the object's lifetime; its name is only built when
// recording is on (pass a callable to defer building it).
class Span {
 public:
  Span(const char* category, std::string name) : category_(category), start_(active() ? now_us() : -1) {
    if (start_ >= 0) name_ = std::move(name);
  }
  ~Span() {
    if (start_ >= 0) complete(category_, name_, start_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* category_;
  double start_;
  std::string name_;
};

}  // namespace pax::trace

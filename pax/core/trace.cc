// Trace-event recording (trace.h): a buffer per thread, gathered by stop().
#include "pax/core/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pax::trace {
namespace {

struct Event {
  const char* category;
  std::string name, args;
  double ts, dur;
};

struct ThreadBuffer {
  int tid = 0;
  std::string name;
  std::mutex mu;  // the owner appends, stop() reads
  uint64_t recording = 0;
  std::vector<Event> events;
};

std::atomic<bool> g_active{false};
std::atomic<uint64_t> g_recording{0};
std::mutex g_threads_mu;
std::vector<std::shared_ptr<ThreadBuffer>>& threads() {
  static auto* all = new std::vector<std::shared_ptr<ThreadBuffer>>;
  return *all;
}

// A new buffer, listed; g_threads_mu held.
std::shared_ptr<ThreadBuffer> add_buffer(std::string name) {
  auto b = std::make_shared<ThreadBuffer>();
  b->tid = int(threads().size()) + 1;
  b->name = std::move(name);
  threads().push_back(b);
  return b;
}

ThreadBuffer& mine() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    std::lock_guard<std::mutex> lock(g_threads_mu);
    const bool main = syscall(SYS_gettid) == getpid();
    return add_buffer(main ? "main" : "thread " + std::to_string(threads().size() + 1));
  }();
  return *buffer;
}

// The buffer of the track named `name` (made on first use).
ThreadBuffer& track(const std::string& name) {
  static auto* tracks = new std::map<std::string, std::shared_ptr<ThreadBuffer>>;
  std::lock_guard<std::mutex> lock(g_threads_mu);
  std::shared_ptr<ThreadBuffer>& b = (*tracks)[name];
  if (!b) b = add_buffer(name);
  return *b;
}

// Appends an event to b, dropping those of an earlier recording first.
void append(ThreadBuffer& b, Event event) {
  const uint64_t recording = g_recording.load();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.recording != recording) {
    b.events.clear();
    b.recording = recording;
  }
  b.events.push_back(std::move(event));
}

std::chrono::steady_clock::time_point epoch() {
  static const std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  return t;
}

void append_escaped(std::string& out, const std::string& s) {
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
}

}  // namespace

bool active() { return g_active.load(std::memory_order_relaxed); }

void start() {
  g_recording.fetch_add(1);
  g_active.store(true);
}

double now_us() {
  // The origin first: on the first call it is set now, so the time read
  // after it is not before it (a span that would start at a negative time
  // counts as started while inactive, and is dropped).
  const std::chrono::steady_clock::time_point origin = epoch();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin).count();
}

void complete(const char* category, const std::string& name, double start_us, const std::string& args_json) {
  if (!active()) return;
  const double end = now_us();
  append(mine(), Event{category, name, args_json, start_us, end - start_us});
}

void complete_on_track(const std::string& track_name, const char* category, const std::string& name, double start_us,
                       double dur_us, const std::string& args_json) {
  if (!active()) return;
  append(track(track_name), Event{category, name, args_json, start_us, dur_us});
}

void set_thread_name(const std::string& name) {
  ThreadBuffer& b = mine();
  std::lock_guard<std::mutex> lock(b.mu);
  b.name = name;
}

std::string stop(const std::string& process_name) {
  g_active.store(false);
  const uint64_t recording = g_recording.load();
  const int pid = int(getpid());
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(pid) + ", \"args\": {\"name\": \"";
  append_escaped(out, process_name);
  out += "\"}}";
  size_t events = 0;
  std::lock_guard<std::mutex> threads_lock(g_threads_mu);
  for (const std::shared_ptr<ThreadBuffer>& b : threads()) {
    std::lock_guard<std::mutex> lock(b->mu);
    if (b->recording != recording || b->events.empty()) continue;
    const std::string ids = "\"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(b->tid);
    out += ",\n{\"ph\": \"M\", \"name\": \"thread_name\", " + ids + ", \"args\": {\"name\": \"";
    append_escaped(out, b->name);
    out += "\"}}";
    for (const Event& e : b->events) {
      char times[96];
      std::snprintf(times, sizeof(times), "\"ts\": %.3f, \"dur\": %.3f", e.ts, e.dur);
      out += ",\n{\"ph\": \"X\", \"cat\": \"";
      out += e.category;
      out += "\", \"name\": \"";
      append_escaped(out, e.name);
      out += "\", " + ids + ", " + times;
      if (!e.args.empty()) out += ", \"args\": {" + e.args + "}";
      out += "}";
      ++events;
    }
    b->events.clear();
  }
  out += "\n]}\n";
  return events == 0 ? std::string() : out;
}

}  // namespace pax::trace

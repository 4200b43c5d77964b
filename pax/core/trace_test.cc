// Trace recording: events only while recording, on the threads that made
// them, with names escaped, as a trace-event JSON document.
#include "pax/core/trace.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

namespace pax::trace {
namespace {

using nlohmann::json;

// The "X" events of a document, and the thread names by tid.
struct Parsed {
  std::vector<json> events;
  std::map<int, std::string> thread_names;
};
Parsed parse(const std::string& text) {
  Parsed p;
  const json doc = json::parse(text);
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") p.events.push_back(e);
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      p.thread_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  }
  return p;
}

TEST(Trace, RecordsOnlyWhileOnAndOnTheThreadThatRan) {
  complete("kernel", "before", now_us());  // not recording: dropped
  EXPECT_FALSE(active());
  start();
  EXPECT_TRUE(active());
  { const Span span("gemm", "dot_general f32[2,3] \"quoted\" \\ -> f32[2,4]"); }
  std::thread worker([] {
    set_thread_name("worker");
    const Span span("fusion", "fusion{add}");
  });
  worker.join();
  complete("input", "with args", now_us() - 5.0, "\"shape\": \"f32[8]\"");
  const std::string doc = stop("test process");
  EXPECT_FALSE(active());
  const Parsed p = parse(doc);
  ASSERT_EQ(p.events.size(), 3u) << doc;
  std::set<int> tids;
  for (const json& e : p.events) {
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    tids.insert(e.at("tid").get<int>());
  }
  EXPECT_EQ(tids.size(), 2u);
  EXPECT_EQ(p.events[0].at("name"), "dot_general f32[2,3] \"quoted\" \\ -> f32[2,4]");
  EXPECT_EQ(p.events[0].at("cat"), "gemm");
  bool named = false;
  for (const auto& [tid, name] : p.thread_names) named |= name == "worker";
  EXPECT_TRUE(named) << doc;
  for (const json& e : p.events)
    if (e.at("name") == "with args") EXPECT_EQ(e.at("args").at("shape"), "f32[8]");
  // Nothing recorded: no document.
  start();
  EXPECT_EQ(stop("empty"), "");
}

TEST(Trace, ANewRecordingDropsTheEventsOfAnUnstoppedOne) {
  start();
  { const Span span("kernel", "old"); }
  start();
  { const Span span("kernel", "new"); }
  const std::string doc = stop("test");
  const Parsed p = parse(doc);
  ASSERT_EQ(p.events.size(), 1u) << doc;
  EXPECT_EQ(p.events[0].at("name"), "new");
}

// Work timed elsewhere (a device's stream) goes on a track of its own, with
// the times given, every event of a track on one tid named after it.
TEST(Trace, EventsOnANamedTrackKeepTheirTimes) {
  complete_on_track("cuda:0 stream", "gemm", "before", 1.0, 2.0);  // not recording: dropped
  start();
  complete_on_track("cuda:0 stream", "gemm", "dot_general", 100.0, 25.5);
  complete_on_track("cuda:0 stream", "fusion", "fusion{add}", 130.0, 4.0, "\"step\": 3");
  complete_on_track("cuda:1 stream", "gemm", "other device", 100.0, 1.0);
  { const Span span("kernel", "on the host"); }
  const Parsed p = parse(stop("test"));
  ASSERT_EQ(p.events.size(), 4u);
  std::map<std::string, json> by_name;
  for (const json& e : p.events) by_name[e.at("name").get<std::string>()] = e;
  const json& gemm = by_name.at("dot_general");
  EXPECT_DOUBLE_EQ(gemm.at("ts").get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(gemm.at("dur").get<double>(), 25.5);
  EXPECT_EQ(gemm.at("cat"), "gemm");
  EXPECT_EQ(by_name.at("fusion{add}").at("tid"), gemm.at("tid"));
  EXPECT_EQ(by_name.at("fusion{add}").at("args").at("step"), 3);
  EXPECT_NE(by_name.at("other device").at("tid"), gemm.at("tid"));
  EXPECT_NE(by_name.at("on the host").at("tid"), gemm.at("tid"));
  EXPECT_EQ(p.thread_names.at(gemm.at("tid").get<int>()), "cuda:0 stream");
  EXPECT_EQ(p.thread_names.at(by_name.at("other device").at("tid").get<int>()), "cuda:1 stream");
}

}  // namespace
}  // namespace pax::trace

// Tests for the summary writers: event files read back by an independent
// TFRecord + protobuf reader written here (CRC checks, field decoding, a
// corrupted byte detected), metrics.jsonl lines, and the JobSummaries layout
// of a job directory across a restart.
#include "pax/train/summary.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pax/testing/testing.h"
#include "pax/testing/unprivileged.h"
#include "pax/core/crc32c.h"
#include "pax/data/record_files.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

// --- an event-file reader independent of the writer ---

uint32_t test_unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

uint64_t read_le(const std::string& bytes, size_t at, int n) {
  if (at + size_t(n) > bytes.size()) throw std::runtime_error("truncated record");
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(bytes[at + i])) << (8 * i);
  return v;
}

// The records of a TFRecord file; throws naming the check that failed.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t len = read_le(bytes, at, 8);
    const uint32_t len_crc = uint32_t(read_le(bytes, at + 8, 4));
    if (test_unmask(len_crc) != crc32c(bytes.data() + at, 8)) throw std::runtime_error("bad length crc");
    if (at + 12 + len + 4 > bytes.size()) throw std::runtime_error("truncated record");
    std::string data = bytes.substr(at + 12, len);
    const uint32_t data_crc = uint32_t(read_le(bytes, at + 12 + len, 4));
    if (test_unmask(data_crc) != crc32c(data.data(), data.size())) throw std::runtime_error("bad data crc");
    records.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return records;
}

// A protobuf field: number, wire type and its payload (varint value, fixed
// bits or bytes).
struct Field {
  int number = 0;
  int type = 0;
  uint64_t bits = 0;
  std::string bytes;
};

std::vector<Field> decode_fields(const std::string& msg) {
  std::vector<Field> fields;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= msg.size() || shift > 63) throw std::runtime_error("bad varint");
      uint8_t b = uint8_t(msg[at++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < msg.size()) {
    Field f;
    const uint64_t key = varint();
    f.number = int(key >> 3);
    f.type = int(key & 7);
    if (f.type == 0) {
      f.bits = varint();
    } else if (f.type == 1 || f.type == 5) {
      const int n = f.type == 1 ? 8 : 4;
      f.bits = read_le(msg, at, n);
      at += size_t(n);
    } else if (f.type == 2) {
      const uint64_t n = varint();
      if (at + n > msg.size()) throw std::runtime_error("bad length");
      f.bytes = msg.substr(at, n);
      at += n;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.type));
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

struct DecodedEvent {
  std::optional<double> wall_time;
  std::optional<int64_t> step;
  std::optional<std::string> file_version;
  std::optional<int64_t> session_status;              // SessionLog.status
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
  std::vector<std::pair<std::string, Histogram>> histograms;
};

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// A HistogramProto: five doubles, two packed double lists.
Histogram decode_histogram(const std::string& msg) {
  Histogram h;
  for (const Field& f : decode_fields(msg)) {
    if (f.type == 1 && f.number >= 1 && f.number <= 5) {
      double* scalars[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
      *scalars[f.number - 1] = as_double(f.bits);
    } else if (f.type == 2 && (f.number == 6 || f.number == 7)) {
      auto& list = f.number == 6 ? h.bucket_limit : h.bucket;
      for (size_t at = 0; at + 8 <= f.bytes.size(); at += 8) list.push_back(as_double(read_le(f.bytes, at, 8)));
    } else {
      throw std::runtime_error("bad HistogramProto field " + std::to_string(f.number));
    }
  }
  return h;
}

DecodedEvent decode_event(const std::string& record) {
  DecodedEvent e;
  for (const Field& f : decode_fields(record)) {
    if (f.number == 1 && f.type == 1) {
      double d;
      std::memcpy(&d, &f.bits, 8);
      e.wall_time = d;
    } else if (f.number == 2 && f.type == 0) {
      e.step = int64_t(f.bits);
    } else if (f.number == 3 && f.type == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 7 && f.type == 2) {
      for (const Field& x : decode_fields(f.bytes)) {
        if (x.number != 1 || x.type != 0) throw std::runtime_error("bad SessionLog field");
        e.session_status = int64_t(x.bits);
      }
    } else if (f.number == 5 && f.type == 2) {
      for (const Field& v : decode_fields(f.bytes)) {
        if (v.number != 1 || v.type != 2) throw std::runtime_error("bad Summary field");
        std::pair<std::string, float> value;
        std::optional<Histogram> histo;
        for (const Field& x : decode_fields(v.bytes)) {
          if (x.number == 1 && x.type == 2) {
            value.first = x.bytes;
          } else if (x.number == 2 && x.type == 5) {
            uint32_t bits = uint32_t(x.bits);
            std::memcpy(&value.second, &bits, 4);
          } else if (x.number == 5 && x.type == 2) {
            histo = decode_histogram(x.bytes);
          } else {
            throw std::runtime_error("bad Summary.Value field");
          }
        }
        if (histo) {
          e.histograms.emplace_back(value.first, *histo);
        } else {
          e.values.push_back(value);
        }
      }
    } else {
      throw std::runtime_error("unexpected Event field " + std::to_string(f.number));
    }
  }
  return e;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<DecodedEvent> read_events(const std::string& path) {
  std::vector<DecodedEvent> out;
  for (const std::string& r : read_records(slurp(path))) out.push_back(decode_event(r));
  return out;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

class TempDir {
 public:
  TempDir() {
    path_ = (fs::temp_directory_path() /
             ("pax_summary_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// --- masked CRC ---

TEST(SummaryCrc, MaskMatchesHandValuesAndUnmasks) {
  // crc32c("123456789") and its mask ((crc >> 15 | crc << 17) + 0xa282ead8), by hand.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(data::mask_crc32c(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(data::mask_crc32c(0), 0xA282EAD8u);
  EXPECT_EQ(data::unmask_crc32c(0xC78AB0E5u), 0xE3069283u);
  EXPECT_EQ(test_unmask(0xC78AB0E5u), 0xE3069283u);
  for (uint32_t crc : {0u, 1u, 0x80000000u, 0xFFFFFFFFu, 0x12345678u, 0xDEADBEEFu}) {
    EXPECT_EQ(data::unmask_crc32c(data::mask_crc32c(crc)), crc);
    EXPECT_EQ(test_unmask(data::mask_crc32c(crc)), crc);
  }
  EXPECT_NE(data::mask_crc32c(0x12345678u), 0x12345678u);
}

// --- SummaryWriter ---

TEST(SummaryWriter, FileNameAndFileVersionEvent) {
  TempDir tmp;
  const double before = unix_now();
  SummaryWriter w(tmp / "run");
  const std::string name = fs::path(w.path()).filename().string();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.(\d+)\..+\.(\d+)\.(\d+))"))) << name;
  EXPECT_NE(name.find(std::string(".") + host + "."), std::string::npos) << name;
  const int64_t secs = std::stoll(name.substr(std::strlen("events.out.tfevents.")));
  EXPECT_GE(secs, int64_t(before) - 1);
  EXPECT_LE(secs, int64_t(unix_now()) + 1);

  // The version event is on disk right after construction.
  const std::vector<std::string> records = read_records(slurp(w.path()));
  ASSERT_EQ(records.size(), 1u);
  const std::string& r = records[0];
  // 09 <wall_time f64> 1A 0D "brain.Event:2"; step 0 is left out, as
  // protobuf leaves out proto3 defaults.
  ASSERT_EQ(r.size(), 9u + 2 + 13);
  EXPECT_EQ(uint8_t(r[0]), 0x09);
  EXPECT_EQ(r.substr(9),
            "\x1a\x0d"
            "brain.Event:2");
  DecodedEvent e = decode_event(r);
  ASSERT_TRUE(e.wall_time && e.file_version);
  EXPECT_EQ(*e.file_version, "brain.Event:2");
  EXPECT_FALSE(e.step);
  EXPECT_GE(*e.wall_time, before - 1);
  EXPECT_LE(*e.wall_time, unix_now() + 1);
}

TEST(SummaryWriter, ScalarEventsDecodeAndMatchHandEncoding) {
  TempDir tmp;
  SummaryWriter w(tmp.path(), {.flush_secs = -1});
  w.scalar("loss", 2.5, 300, 1700000000.25);
  w.scalar("eval/accuracy", 0.1, 7, 1700000001.5);
  w.scalar("big_step", -3.75, int64_t(1) << 40, 1.0);
  w.scalar("negative_step", 1e30, -2, 2.0);
  w.scalar("nan", std::numeric_limits<double>::quiet_NaN(), 8, 3.0);
  w.scalar("zero", 0.0, 0, 4.0);
  w.close();
  w.close();  // closing twice is harmless

  const std::string bytes = slurp(w.path());
  const std::vector<std::string> records = read_records(bytes);
  ASSERT_EQ(records.size(), 7u);

  // The loss event byte by byte: wall_time, step 300 (varint AC 02) and
  // summary { value { tag "loss", simple_value 2.5f (00 00 20 40) } }.
  std::string expected = "\x09";
  const double wall = 1700000000.25;
  uint64_t wall_bits;
  std::memcpy(&wall_bits, &wall, 8);
  for (int i = 0; i < 8; ++i) expected.push_back(char(uint8_t(wall_bits >> (8 * i))));
  expected += std::string("\x10\xac\x02\x2a\x0d\x0a\x0b\x0a\x04loss\x15\x00\x00\x20\x40", 18);
  EXPECT_EQ(records[1], expected);

  struct Want {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };
  const Want want[] = {{"loss", 2.5f, 300, 1700000000.25},
                       {"eval/accuracy", 0.1f, 7, 1700000001.5},
                       {"big_step", -3.75f, int64_t(1) << 40, 1.0},
                       {"negative_step", 1e30f, -2, 2.0}};
  for (size_t i = 0; i < std::size(want); ++i) {
    DecodedEvent e = decode_event(records[i + 1]);
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].first, want[i].tag);
    EXPECT_EQ(e.values[0].second, want[i].value);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_EQ(e.wall_time, want[i].wall_time);
    EXPECT_FALSE(e.file_version);
  }
  DecodedEvent nan_event = decode_event(records[5]);
  EXPECT_TRUE(std::isnan(nan_event.values.at(0).second));
  // Step 0 is left out; a zero simple_value (a oneof member) is not.
  EXPECT_EQ(records[6].substr(9), std::string("\x2a\x0d\x0a\x0b\x0a\x04zero\x15\x00\x00\x00\x00", 15));
  DecodedEvent zero = decode_event(records[6]);
  EXPECT_FALSE(zero.step);
  EXPECT_EQ(zero.values.at(0), (std::pair<std::string, float>{"zero", 0.0f}));
}

// Buckets are closed on the right, as TensorBoard reads them; non-finite
// values are left out.
TEST(Histogram, BucketsSumsAndExtremes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Histogram h = Histogram::of({4, 1, 2, 3, nan, 2.5}, 3);
  EXPECT_EQ(h.min, 1);
  EXPECT_EQ(h.max, 4);
  EXPECT_EQ(h.num, 5);
  EXPECT_EQ(h.sum, 12.5);
  EXPECT_EQ(h.sum_squares, 36.25);
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(h.bucket, (std::vector<double>{2, 2, 1}));  // {1, 2}, {2.5, 3}, {4}
  const Histogram same = Histogram::of({7, 7, 7});
  EXPECT_EQ(same.bucket_limit, (std::vector<double>{7}));
  EXPECT_EQ(same.bucket, (std::vector<double>{3}));
  EXPECT_EQ(Histogram::of({nan}).num, 0);
  EXPECT_PAX_ERROR(Histogram::of({1}, 0), "buckets must be >= 1");
}

TEST(SummaryWriter, HistogramEventsDecode) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  const Histogram h = Histogram::of({-1, 0.5, 2, 2, 3}, 4);
  w.histogram("layer/xent", h, 12, 1.5);
  w.close();
  const std::vector<DecodedEvent> events = read_events(w.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 12);
  EXPECT_EQ(events[1].wall_time, 1.5);
  ASSERT_EQ(events[1].histograms.size(), 1u);
  EXPECT_EQ(events[1].histograms[0].first, "layer/xent");
  EXPECT_EQ(events[1].histograms[0].second, h);
  EXPECT_TRUE(events[1].values.empty());
}

TEST(SummaryWriter, ACorruptedByteIsDetected) {
  TempDir tmp;
  std::string path;
  {
    SummaryWriter w(tmp.path());
    w.scalar("loss", 1.0, 1, 10.0);
    path = w.path();
  }
  const std::string good = slurp(path);
  ASSERT_EQ(read_records(good).size(), 2u);
  const size_t second = 12 + read_le(good, 0, 8) + 4;  // start of the second record

  // The reader's complaint about `bytes`, or "" when it reads.
  auto complaint = [](const std::string& bytes) -> std::string {
    try {
      read_records(bytes);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(complaint(good), "");
  std::string bad_data = good;
  bad_data[second + 12 + 3] ^= 0x01;  // a byte of the scalar event's data
  EXPECT_EQ(complaint(bad_data), "bad data crc");
  std::string bad_len = good;
  bad_len[second] ^= 0x01;  // the second record's length
  EXPECT_EQ(complaint(bad_len), "bad length crc");
  std::string bad_crc = good;
  bad_crc[bad_crc.size() - 1] ^= 0x80;  // the stored CRC itself
  EXPECT_EQ(complaint(bad_crc), "bad data crc");
  EXPECT_EQ(complaint(good.substr(0, good.size() - 2)), "truncated record");
}

TEST(SummaryWriter, FlushPolicy) {
  TempDir tmp;
  SummaryWriter manual(tmp / "manual", {.flush_secs = -1});
  const size_t header = slurp(manual.path()).size();
  manual.scalar("x", 1, 1, 1.0);
  EXPECT_EQ(slurp(manual.path()).size(), header);  // buffered
  manual.flush();
  EXPECT_EQ(read_records(slurp(manual.path())).size(), 2u);

  SummaryWriter eager(tmp / "eager", {.flush_secs = 0});
  eager.scalar("x", 1, 1, 1.0);
  EXPECT_EQ(read_records(slurp(eager.path())).size(), 2u);  // written at once
}

TEST(SummaryWriter, EveryWriterGetsItsOwnFile) {
  TempDir tmp;
  SummaryWriter a(tmp.path()), b(tmp.path());
  EXPECT_NE(a.path(), b.path());
  a.scalar("x", 1, 1);
  b.scalar("x", 2, 1);
  a.close();
  b.close();
  EXPECT_EQ(event_files(tmp.path()).size(), 2u);
  EXPECT_EQ(read_events(a.path()).at(1).values.at(0).second, 1.0f);
  EXPECT_EQ(read_events(b.path()).at(1).values.at(0).second, 2.0f);
}

TEST(SummaryWriter, Errors) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  EXPECT_PAX_ERROR(w.scalar("", 1, 1), "tag must not be empty");
  w.close();
  EXPECT_PAX_ERROR(w.scalar("x", 1, 1), "is closed");
  std::ofstream(tmp / "file") << "x";
  EXPECT_PAX_ERROR(SummaryWriter(tmp / "file/run"), "summaries: cannot write to '" + (tmp / "file/run") + "': '" +
                                                        (tmp / "file") + "' is a regular file, not a directory");
}

using pax::testing::Unprivileged;

constexpr fs::perms kReadOnlyDir = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                   fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec;

// An unusable directory is one error naming it, and nothing is left open.
TEST(SummaryWriter, AnUnusableDirectoryIsOneErrorNamingIt) {
  TempDir tmp;
  fs::create_symlink(tmp / "nowhere", tmp / "dangling");
  EXPECT_PAX_ERROR(SummaryWriter(tmp / "dangling"), "summaries: cannot write to '" + (tmp / "dangling") +
                                                        "': it is a dangling symlink to '" + (tmp / "nowhere") + "'");
  std::ofstream(tmp / "file") << "x";
  EXPECT_PAX_ERROR(SummaryWriter(tmp / "file"), "'" + (tmp / "file") + "': it is a regular file, not a directory");
  fs::permissions(tmp.path(), fs::perms::all);
  fs::create_directory(tmp / "ro");
  fs::permissions(tmp / "ro", kReadOnlyDir);
  Unprivileged as_user;
  if (!as_user.ok()) GTEST_SKIP() << "running as root, whom permissions do not bind, and setfsuid failed";
  EXPECT_PAX_ERROR(SummaryWriter(tmp / "ro"), "summaries: cannot write to '" + (tmp / "ro") + "': it is read-only");
}

// --- StepMetrics and metrics.jsonl ---

StepMetrics sample_metrics() {
  StepMetrics m;
  m.step = 1200;
  m.split = "train";
  m.metrics = {{"loss", 2.345678}, {"accuracy", 0.5}};
  m.learning_rate = 1e-3;
  m.grad_norm = 0.75;
  m.steps_per_sec = 3.25;
  m.tokens_per_sec = 13312;
  m.mfu = 0.3125;
  m.wall_time = 1700000000.125;
  m.summaries = {{"lm/x_layers_0/attention_entropy", 1.25}};
  return m;
}

TEST(StepMetrics, ScalarsListMetricsThenPresentFields) {
  const auto scalars = sample_metrics().scalars();
  const std::vector<std::pair<std::string, double>> want = {
      {"accuracy", 0.5},       {"loss", 2.345678},        {"learning_rate", 1e-3}, {"grad_norm", 0.75},
      {"steps_per_sec", 3.25}, {"tokens_per_sec", 13312}, {"mfu", 0.3125}};
  EXPECT_EQ(scalars, want);
}

TEST(MetricsJsonl, LineHasTheFieldsAndParsesBack) {
  const StepMetrics m = sample_metrics();
  const std::string line = metrics_json_line(m);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  // Read independently with nlohmann-json.
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["step"], 1200);
  EXPECT_EQ(j["split"], "train");
  EXPECT_EQ(j["wall_time"].get<double>(), 1700000000.125);
  EXPECT_EQ(j["metrics"]["loss"].get<double>(), 2.345678);
  EXPECT_EQ(j["metrics"]["accuracy"].get<double>(), 0.5);
  EXPECT_EQ(j["learning_rate"].get<double>(), 1e-3);
  EXPECT_EQ(j["grad_norm"].get<double>(), 0.75);
  EXPECT_EQ(j["steps_per_sec"].get<double>(), 3.25);
  EXPECT_EQ(j["tokens_per_sec"].get<double>(), 13312);
  EXPECT_EQ(j["mfu"].get<double>(), 0.3125);
  EXPECT_FALSE(j.contains("examples_per_sec"));  // absent stays absent
  EXPECT_EQ(j["summaries"]["lm/x_layers_0/attention_entropy"].get<double>(), 1.25);
  EXPECT_EQ(line.rfind("{\"step\":1200,\"split\":\"train\"", 0), 0u) << line;

  EXPECT_EQ(parse_metrics_json_line(line), m);
}

TEST(MetricsJsonl, NonFiniteValuesBecomeNullAndReadBackAsNaN) {
  StepMetrics m;
  m.step = 3;
  m.split = "eval_test_x";
  m.metrics = {{"loss", std::numeric_limits<double>::quiet_NaN()},
               {"log_pplx", std::numeric_limits<double>::infinity()}};
  m.grad_norm = -std::numeric_limits<double>::infinity();
  const std::string line = metrics_json_line(m);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["metrics"]["loss"].is_null());
  EXPECT_TRUE(j["metrics"]["log_pplx"].is_null());
  EXPECT_TRUE(j["grad_norm"].is_null());
  const StepMetrics back = parse_metrics_json_line(line);
  EXPECT_TRUE(std::isnan(back.metrics.at("loss")));
  EXPECT_TRUE(std::isnan(back.metrics.at("log_pplx")));
  ASSERT_TRUE(back.grad_norm);
  EXPECT_TRUE(std::isnan(*back.grad_norm));
}

TEST(MetricsJsonl, MalformedLinesAreErrors) {
  EXPECT_PAX_ERROR(parse_metrics_json_line("{\"step\": 1,"), "not JSON");
  EXPECT_PAX_ERROR(parse_metrics_json_line("[1, 2]"), "want an object");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"split": "train"})"), "'step' must be an integer");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"step": 1.5, "split": "train"})"), "'step' must be an integer");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"step": 1, "split": 3})"), "'split' must be a non-empty string");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"step": 1, "split": "train", "metrics": [1]})"),
                   "'metrics' must be an object");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"step": 1, "split": "train", "metrics": {"loss": "2"}})"),
                   "'loss' must be a number or null");
  EXPECT_PAX_ERROR(parse_metrics_json_line(R"({"step": 1, "split": "train", "mfu": true})"),
                   "'mfu' must be a number or null");
  // Unknown keys are ignored (lines written by a later version).
  EXPECT_EQ(parse_metrics_json_line(R"({"step": 4, "split": "train", "future": {}})").step, 4);
}

TEST(MetricsJsonl, ReadSkipsTornLines) {
  TempDir tmp;
  const std::string path = tmp / "metrics.jsonl";
  EXPECT_TRUE(read_metrics_jsonl(path).empty());  // missing file: no history
  StepMetrics a = sample_metrics(), b = sample_metrics();
  b.step = 1300;
  std::ofstream(path) << metrics_json_line(a) << "\n\n"
                      << "{\"step\": 12"
                      << "\n"
                      << metrics_json_line(b) << "\n"
                      << "{\"step\":";
  int64_t skipped = -1;
  const std::vector<StepMetrics> h = read_metrics_jsonl(path, &skipped);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].step, 1200);
  EXPECT_EQ(h[1].step, 1300);
  EXPECT_EQ(skipped, 2);
}

// A FIFO in place of metrics.jsonl would block a read forever (a resume reads it).
TEST(MetricsJsonl, AFifoIsRefusedNotRead) {
  TempDir tmp;
  const std::string path = tmp / "metrics.jsonl";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_PAX_ERROR(read_metrics_jsonl(path), "is a FIFO");
}

// --- JobSummaries ---

StepMetrics train_step(int64_t step, double loss) {
  StepMetrics m;
  m.step = step;
  m.metrics = {{"loss", loss}};
  m.learning_rate = 0.01;
  m.steps_per_sec = 2;
  m.wall_time = 1000.0 + double(step);
  return m;
}

StepMetrics eval_step(int64_t step, double loss) {
  StepMetrics m;
  m.step = step;
  m.split = eval_split("kjv");
  m.metrics = {{"loss", loss}, {"accuracy", 0.25}};
  m.wall_time = 1000.5 + double(step);
  return m;
}

TEST(JobSummaries, WritesEventsJsonlAndReportPerSplit) {
  TempDir tmp;
  const std::string job = tmp / "job";
  {
    JobSummaries s(job);
    s.write(train_step(10, 3.0));
    // Every output is on disk after each write.
    EXPECT_EQ(read_metrics_jsonl(s.metrics_path()).size(), 1u);
    EXPECT_TRUE(fs::exists(s.report_path()));
    ASSERT_EQ(event_files(s.summary_dir("train")).size(), 1u);
    EXPECT_EQ(read_events(event_files(s.summary_dir("train"))[0]).size(), 1u + 3);
    s.write(eval_step(10, 3.5));
    s.write(train_step(20, 2.0));
    EXPECT_EQ(s.summary_dir("eval_test_kjv"), (fs::path(job) / "summaries" / "eval_test_kjv").string());
    s.close();
  }
  const std::vector<std::string> train_files = event_files(job + "/summaries/train");
  const std::vector<std::string> eval_files = event_files(job + "/summaries/eval_test_kjv");
  ASSERT_EQ(train_files.size(), 1u);
  ASSERT_EQ(eval_files.size(), 1u);

  // train: version event, then loss, learning_rate, steps_per_sec for steps 10 and 20.
  const std::vector<DecodedEvent> train = read_events(train_files[0]);
  ASSERT_EQ(train.size(), 7u);
  EXPECT_EQ(train[0].file_version, "brain.Event:2");
  const std::vector<std::string> tags = {"loss", "learning_rate", "steps_per_sec"};
  for (int i = 0; i < 6; ++i) {
    const DecodedEvent& e = train[size_t(i) + 1];
    const int64_t step = i < 3 ? 10 : 20;
    EXPECT_EQ(e.step, step);
    EXPECT_EQ(e.wall_time, 1000.0 + double(step));
    ASSERT_EQ(e.values.size(), 1u);
    EXPECT_EQ(e.values[0].first, tags[size_t(i) % 3]);
  }
  EXPECT_EQ(train[1].values[0].second, 3.0f);
  EXPECT_EQ(train[2].values[0].second, 0.01f);
  EXPECT_EQ(train[4].values[0].second, 2.0f);

  const std::vector<DecodedEvent> eval = read_events(eval_files[0]);
  ASSERT_EQ(eval.size(), 3u);
  EXPECT_EQ(eval[1].values[0], (std::pair<std::string, float>{"accuracy", 0.25f}));
  EXPECT_EQ(eval[2].values[0], (std::pair<std::string, float>{"loss", 3.5f}));

  const std::vector<StepMetrics> lines = read_metrics_jsonl(job + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].split, "train");
  EXPECT_EQ(lines[1].split, "eval_test_kjv");
  EXPECT_EQ(lines[1].metrics.at("accuracy"), 0.25);
  EXPECT_EQ(lines[2].step, 20);
  EXPECT_EQ(lines[2].learning_rate, 0.01);

  const std::string html = slurp(job + "/report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<h1>job</h1>"), std::string::npos);  // titled after the job directory
  EXPECT_NE(html.find("data-series=\"eval_test_kjv\""), std::string::npos);
}

TEST(JobSummaries, ARestartAppendsHistoryAndStartsNewEventFiles) {
  TempDir tmp;
  const std::string job = tmp / "job";
  {
    JobSummaries s(job);
    s.write(train_step(10, 3.0));
    s.write(train_step(20, 2.5));
  }
  // A crash tore the last line of metrics.jsonl.
  std::ofstream(job + "/metrics.jsonl", std::ios::app) << "{\"step\": 30, \"spl";
  {
    JobSummaries s(job, {.title = "resumed"});  // no first step (eval, decode): everything is kept
    ASSERT_EQ(s.history().size(), 2u);          // the history so far, without the torn line
    s.write(train_step(30, 2.0));
    EXPECT_EQ(s.history().size(), 3u);
  }
  EXPECT_EQ(event_files(job + "/summaries/train").size(), 2u);  // one file per run
  int64_t skipped = 0;
  std::vector<StepMetrics> lines = read_metrics_jsonl(job + "/metrics.jsonl", &skipped);
  EXPECT_EQ(skipped, 1);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].step, 30);
  std::string html = slurp(job + "/report.html");
  EXPECT_NE(html.find("<h1>resumed</h1>"), std::string::npos);
  EXPECT_NE(html.find("3 summary steps, steps 10 to 30"), std::string::npos);

  // A training run resumed from the step-10 checkpoint writes steps 20 and 30
  // again: their old lines (of every split) go, so each step appears once.
  {
    JobSummaries s(job, {.title = "resumed", .first_step = 10});
    ASSERT_EQ(s.history().size(), 1u);
    s.write(train_step(20, 2.4));
    s.write(train_step(30, 1.9));
  }
  lines = read_metrics_jsonl(job + "/metrics.jsonl", &skipped);
  EXPECT_EQ(skipped, 0);  // rewritten whole, the torn line with it
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].step, 10);
  EXPECT_EQ(lines[1].step, 20);
  EXPECT_EQ(lines[1].metrics.at("loss"), 2.4);
  EXPECT_EQ(lines[2].step, 30);
  EXPECT_EQ(lines[2].metrics.at("loss"), 1.9);
  EXPECT_FALSE(std::filesystem::exists(job + "/metrics.jsonl.tmp"));
  // The third run's event file starts with a SessionLog START at step 11, so
  // that TensorBoard drops the older files' steps 20 and 30.
  std::vector<std::string> files = event_files(job + "/summaries/train");
  ASSERT_EQ(files.size(), 3u);
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return std::filesystem::last_write_time(a) < std::filesystem::last_write_time(b);
  });
  const std::vector<DecodedEvent> third = read_events(files.back());
  ASSERT_GE(third.size(), 2u);
  EXPECT_EQ(third[1].session_status, 1);
  EXPECT_EQ(third[1].step, 11);
  for (const std::string& f : files)
    if (f != files.back())
      for (const DecodedEvent& e : read_events(f)) EXPECT_FALSE(e.session_status.has_value()) << f;
  html = slurp(job + "/report.html");
  EXPECT_NE(html.find("3 summary steps, steps 10 to 30"), std::string::npos);
}

TEST(JobSummaries, OptionsTurnOutputsOff) {
  TempDir tmp;
  {
    JobSummaries s(tmp / "job", {.tensorboard = false, .report = false});
    s.write(train_step(1, 1.0));
  }
  EXPECT_FALSE(fs::exists(tmp / "job/summaries"));
  EXPECT_FALSE(fs::exists(tmp / "job/report.html"));
  EXPECT_EQ(read_metrics_jsonl(tmp / "job/metrics.jsonl").size(), 1u);
}

TEST(JobSummaries, ReportIsRegeneratedAtMostEveryInterval) {
  TempDir tmp;
  const std::string job = tmp / "job";
  JobSummaries s(job, {.tensorboard = false, .report_interval_secs = 3600});
  s.write(train_step(10, 3.0));
  EXPECT_NE(slurp(job + "/report.html").find("1 summary steps, steps 10 to 10"), std::string::npos);
  s.write(train_step(20, 2.0));  // within the interval: the page stays as it was
  EXPECT_NE(slurp(job + "/report.html").find("1 summary steps, steps 10 to 10"), std::string::npos);
  s.close();  // close always regenerates it
  EXPECT_NE(slurp(job + "/report.html").find("2 summary steps, steps 10 to 20"), std::string::npos);
}

TEST(JobSummaries, SplitNames) {
  EXPECT_EQ(StepMetrics{}.split, "train");
  EXPECT_EQ(kTrainSplit, "train");
  EXPECT_EQ(eval_split("kjv"), "eval_test_kjv");
  EXPECT_PAX_ERROR(eval_split(""), "name must not be empty");
}

// Each unusable output of a job directory is one error at construction,
// naming the path and why, before anything is written.
TEST(JobSummaries, AnUnusableOutputIsOneErrorAtConstruction) {
  TempDir tmp;
  const std::string job = tmp / "job";
  fs::create_directories(job);
  fs::create_symlink(tmp / "nowhere", job + "/summaries");
  EXPECT_PAX_ERROR(JobSummaries{job}, "summaries: cannot write to '" + job +
                                          "/summaries': it is a dangling symlink to '" + (tmp / "nowhere") + "'");
  fs::remove(job + "/summaries");
  std::ofstream(job + "/summaries") << "x";
  EXPECT_PAX_ERROR(JobSummaries{job}, "'" + job + "/summaries': it is a regular file, not a directory");
  // Without event files, summaries/ is not used.
  JobSummaries(job, {.tensorboard = false}).close();
  for (const char* name : {"summaries", "report.html", "metrics.jsonl"}) fs::remove(job + "/" + name);

  fs::create_directories(job + "/report.html");
  EXPECT_PAX_ERROR(JobSummaries{job},
                   "report.html: cannot write to '" + job + "/report.html': it is a directory, not a regular file");
  fs::remove(job + "/report.html");
  fs::create_symlink(tmp / "gone", job + "/metrics.jsonl");
  EXPECT_PAX_ERROR(JobSummaries{job}, "metrics.jsonl: cannot write to '" + job +
                                          "/metrics.jsonl': it is a dangling symlink to '" + (tmp / "gone") + "'");
  fs::remove(job + "/metrics.jsonl");
  std::ofstream(tmp / "file") << "x";
  EXPECT_PAX_ERROR(JobSummaries{tmp / "file/job"}, "job directory: cannot write to '" + (tmp / "file/job") + "': '" +
                                                       (tmp / "file") + "' is a regular file, not a directory");
  EXPECT_FALSE(fs::exists(tmp / "nowhere"));
  EXPECT_FALSE(fs::exists(tmp / "gone"));
}

TEST(JobSummaries, AReadOnlySummariesDirectoryIsOneError) {
  TempDir tmp;
  const std::string job = tmp / "job";
  fs::create_directories(job + "/summaries");
  fs::permissions(tmp.path(), fs::perms::all);
  fs::permissions(job, fs::perms::all);
  fs::permissions(job + "/summaries", kReadOnlyDir);
  Unprivileged as_user;
  if (!as_user.ok()) GTEST_SKIP() << "running as root, whom permissions do not bind, and setfsuid failed";
  EXPECT_PAX_ERROR(JobSummaries{job}, "summaries: cannot write to '" + job + "/summaries': it is read-only");
}

// A split directory that cannot be made fails that write with one error
// naming it; the summaries are then destroyed while the error unwinds (which
// once flushed the writer that was never made), and close what they hold.
TEST(JobSummaries, ASplitDirectoryThatIsAFileFailsItsWriteAndUnwindsCleanly) {
  TempDir tmp;
  const std::string job = tmp / "job";
  fs::create_directories(job + "/summaries");
  std::ofstream(job + "/summaries/eval_test_kjv") << "x";
  std::string message;
  try {
    JobSummaries s(job);
    s.write(train_step(10, 2.0));
    s.write(eval_step(10, 2.5));
    ADD_FAILURE() << "the eval write should fail";
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("summaries: cannot write to '" + job +
                         "/summaries/eval_test_kjv': it is a regular file, not a directory"),
            std::string::npos)
      << message;
  // The destructor closed the train split and wrote the final report.
  EXPECT_EQ(read_metrics_jsonl(job + "/metrics.jsonl").size(), 1u);
  EXPECT_EQ(event_files(job + "/summaries/train").size(), 1u);
  EXPECT_TRUE(fs::exists(job + "/report.html"));

  // The same with close() called by hand, and a later write of that split
  // failing again the same way.
  JobSummaries s(job);
  EXPECT_PAX_ERROR(s.write(eval_step(20, 2.0)), "eval_test_kjv': it is a regular file");
  EXPECT_PAX_ERROR(s.write(eval_step(30, 2.0)), "eval_test_kjv': it is a regular file");
  s.write(train_step(20, 1.5));
  s.close();
  EXPECT_EQ(read_metrics_jsonl(job + "/metrics.jsonl").size(), 2u);
}

// A write that fails part way (the split's directory turned into a file after
// construction) leaves the object destructible during unwinding.
TEST(JobSummaries, ASummariesDirectoryReplacedByADanglingLinkUnwindsCleanly) {
  TempDir tmp;
  const std::string job = tmp / "job";
  try {
    JobSummaries s(job);
    fs::remove_all(job + "/summaries");
    fs::create_symlink(tmp / "nowhere", job + "/summaries");
    s.write(train_step(10, 2.0));
    ADD_FAILURE() << "the write should fail";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("'" + job + "/summaries' is a dangling symlink to '" + (tmp / "nowhere") + "'"),
        std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(job + "/report.html"));
}

TEST(JobSummaries, Errors) {
  TempDir tmp;
  EXPECT_PAX_ERROR(JobSummaries(""), "job directory must not be empty");
  JobSummaries s(tmp / "job");
  StepMetrics m = train_step(1, 1.0);
  for (const char* split : {"", ".", "..", "../escape", "a/b"}) {
    m.split = split;
    EXPECT_PAX_ERROR(s.write(m), "plain directory name");
  }
  s.close();
  EXPECT_PAX_ERROR(s.write(train_step(2, 1.0)), "closed");
}

}  // namespace
}  // namespace pax::train

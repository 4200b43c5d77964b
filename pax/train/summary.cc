// Event files (TFRecord + hand-encoded Event protos), metrics.jsonl and the
// JobSummaries facade.
#include "pax/train/summary.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/data/record_files.h"
#include "pax/train/fs_util.h"
#include "pax/train/report.h"

namespace pax::train {

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

double steady_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// --- protobuf wire format (only what Event / Summary / Summary.Value need) ---
// Field keys are (field_number << 3) | wire_type.
enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(bits >> (8 * i))));
}

void put_key(std::string& out, int field, WireType type) { put_varint(out, uint64_t(field) << 3 | type); }

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

// tensorflow/core/util/event.proto and framework/summary.proto field numbers.
constexpr int kEventWallTime = 1;          // double
constexpr int kEventStep = 2;              // int64
constexpr int kEventFileVersionField = 3;  // string
constexpr int kEventSummary = 5;           // Summary
constexpr int kEventSessionLog = 7;        // SessionLog
constexpr int kSessionLogStatus = 1;       // enum SessionStatus
constexpr int kSessionStart = 1;           // SessionStatus.START
constexpr int kSummaryValue = 1;           // repeated Summary.Value
constexpr int kValueTag = 1;               // string
constexpr int kValueSimpleValue = 2;       // float
constexpr int kValueHisto = 5;             // HistogramProto
constexpr int kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5;  // double
constexpr int kHistoBucketLimit = 6, kHistoBucket = 7;                                           // packed double

// proto3's canonical encoding leaves out fields at their default value (a
// zero step), so that these bytes are what protobuf itself would write.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  if (wall_time != 0 || std::signbit(wall_time)) put_double(e, kEventWallTime, wall_time);
  if (step != 0) {
    put_key(e, kEventStep, kVarint);
    put_varint(e, uint64_t(step));  // int64: negative values take ten bytes
  }
  return e;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, kEventFileVersionField, kEventFileVersion);
  return e;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;
  put_key(log, kSessionLogStatus, kVarint);
  put_varint(log, kSessionStart);
  std::string e = event_header(wall_time, step);
  put_bytes(e, kEventSessionLog, log);
  return e;
}

// An event whose summary holds one Summary.Value: the tag, then `value_fields`.
std::string summary_event(double wall_time, int64_t step, std::string_view tag, const std::string& value_fields) {
  std::string v;
  put_bytes(v, kValueTag, tag);
  v += value_fields;
  std::string summary;
  put_bytes(summary, kSummaryValue, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, kEventSummary, summary);
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  // simple_value is a oneof member: written even when it is 0.
  std::string value_fields;
  put_float(value_fields, kValueSimpleValue, value);
  return summary_event(wall_time, step, tag, value_fields);
}

std::string histogram_event(double wall_time, int64_t step, std::string_view tag, const Histogram& h) {
  std::string histo;
  // proto3 leaves out zero scalars; packed repeated fields are one length-delimited run.
  for (const auto& [field, value] : {std::pair{kHistoMin, h.min},
                                     {kHistoMax, h.max},
                                     {kHistoNum, h.num},
                                     {kHistoSum, h.sum},
                                     {kHistoSumSquares, h.sum_squares}})
    if (value != 0 || std::signbit(value)) put_double(histo, field, value);
  for (const auto& [field, values] : {std::pair{kHistoBucketLimit, &h.bucket_limit}, {kHistoBucket, &h.bucket}}) {
    if (values->empty()) continue;
    std::string packed;
    for (double v : *values) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      put_fixed(packed, bits, 8);
    }
    put_bytes(histo, field, packed);
  }
  std::string value_fields;
  put_bytes(value_fields, kValueHisto, histo);
  return summary_event(wall_time, step, tag, value_fields);
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

// Every byte of `data` to `fd`, retrying short writes and EINTR.
void write_fully(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    PAX_CHECK(n > 0, "summaries: write to '", path, "' failed: ", std::strerror(errno));
    data.remove_prefix(size_t(n));
  }
}

void close_fd(int& fd, const std::string& path) {
  if (fd < 0) return;
  int rc = ::close(fd);
  fd = -1;
  PAX_CHECK(rc == 0, "summaries: closing '", path, "' failed: ", std::strerror(errno));
}

}  // namespace

// --- SummaryWriter ---

SummaryWriter::SummaryWriter(std::string dir, Options options) : options_(options) {
  fs::ensure_writable_directory(dir, "summaries");
  const double wall = unix_now();
  // TensorBoard finds files by the "tfevents" in their name; the pid and a
  // counter keep writers started within the same second apart.
  const std::string stem = "events.out.tfevents." + std::to_string(int64_t(wall)) + "." + hostname() + "." +
                           std::to_string(::getpid()) + ".";
  for (int n = 0; fd_ < 0; ++n) {
    path_ = (std::filesystem::path(dir) / (stem + std::to_string(n))).string();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    PAX_CHECK(fd_ >= 0 || errno == EEXIST, "SummaryWriter: cannot create '", path_, "': ", std::strerror(errno));
  }
  append_event(file_version_event(wall));
  flush_or_close();  // no destructor runs for an object whose constructor throws
}

void SummaryWriter::flush_or_close() {
  try {
    flush();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SummaryWriter::~SummaryWriter() {
  // A destructor runs while other errors unwind: it must neither throw nor
  // let its own failure replace the error being reported.
  try {
    close();
  } catch (...) {
  }
}

void SummaryWriter::scalar(std::string_view tag, double value, int64_t step, double wall_time) {
  PAX_CHECK(fd_ >= 0, "SummaryWriter::scalar: '", path_, "' is closed");
  PAX_CHECK(!tag.empty(), "SummaryWriter::scalar: the tag must not be empty (step ", step, ")");
  append_event(scalar_event(wall_time < 0 ? unix_now() : wall_time, step, tag, float(value)));
  if (options_.flush_secs >= 0 && steady_now() - last_flush_ >= options_.flush_secs) flush();
}

void SummaryWriter::histogram(std::string_view tag, const Histogram& h, int64_t step, double wall_time) {
  PAX_CHECK(fd_ >= 0, "SummaryWriter::histogram: '", path_, "' is closed");
  PAX_CHECK(!tag.empty(), "SummaryWriter::histogram: the tag must not be empty (step ", step, ")");
  append_event(histogram_event(wall_time < 0 ? unix_now() : wall_time, step, tag, h));
  if (options_.flush_secs >= 0 && steady_now() - last_flush_ >= options_.flush_secs) flush();
}

Histogram Histogram::of(const std::vector<double>& values, int buckets) {
  PAX_CHECK(buckets >= 1, "Histogram::of: buckets must be >= 1, got ", buckets);
  Histogram h;
  std::vector<double> finite;
  for (double v : values)
    if (std::isfinite(v)) finite.push_back(v);
  if (finite.empty()) return h;
  h.min = *std::min_element(finite.begin(), finite.end());
  h.max = *std::max_element(finite.begin(), finite.end());
  h.num = double(finite.size());
  for (double v : finite) {
    h.sum += v;
    h.sum_squares += v * v;
  }
  const int n = h.max > h.min ? buckets : 1;
  const double width = (h.max - h.min) / n;
  for (int i = 0; i < n; ++i) h.bucket_limit.push_back(i + 1 == n ? h.max : h.min + width * (i + 1));
  h.bucket.assign(size_t(n), 0.0);
  for (double v : finite) {
    // The first limit >= v: buckets are closed on the right.
    const size_t i = size_t(std::lower_bound(h.bucket_limit.begin(), h.bucket_limit.end(), v) - h.bucket_limit.begin());
    h.bucket[std::min(i, size_t(n - 1))] += 1;
  }
  return h;
}

void SummaryWriter::session_start(int64_t step, double wall_time) {
  PAX_CHECK(fd_ >= 0, "SummaryWriter::session_start: '", path_, "' is closed");
  append_event(session_start_event(wall_time < 0 ? unix_now() : wall_time, step));
}

void SummaryWriter::append_event(const std::string& event) { data::append_tfrecord(pending_, event); }

void SummaryWriter::flush() {
  if (fd_ < 0) return;
  write_fully(fd_, pending_, path_);
  pending_.clear();
  last_flush_ = steady_now();
}

void SummaryWriter::close() {
  if (fd_ < 0) return;
  flush_or_close();
  close_fd(fd_, path_);
}

// --- StepMetrics and metrics.jsonl ---

std::string eval_split(std::string_view eval_name) {
  PAX_CHECK(!eval_name.empty(), "eval_split: the eval set's name must not be empty");
  return "eval_test_" + std::string(eval_name);
}

namespace {

// The optional fields of StepMetrics by their tag (and JSON key).
template <class M>
auto optional_fields(M& m) {
  using Field = decltype(&m.mfu);
  return std::array<std::pair<std::string_view, Field>, 8>{{{kTagLearningRate, &m.learning_rate},
                                                            {kTagGradNorm, &m.grad_norm},
                                                            {kTagStepsPerSec, &m.steps_per_sec},
                                                            {kTagTokensPerSec, &m.tokens_per_sec},
                                                            {kTagExamplesPerSec, &m.examples_per_sec},
                                                            {kTagMfu, &m.mfu},
                                                            {kTagSkippedSteps, &m.skipped_steps},
                                                            {kTagInputWait, &m.input_wait}}};
}

}  // namespace

std::vector<std::pair<std::string, double>> StepMetrics::scalars() const {
  std::vector<std::pair<std::string, double>> out(metrics.begin(), metrics.end());
  for (const auto& [tag, value] : optional_fields(*this)) {
    if (value->has_value()) out.emplace_back(std::string(tag), **value);
  }
  return out;
}

namespace {

using Json = nlohmann::ordered_json;

// A finite double as a JSON number, anything else as null.
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

double number_from(const Json& j, std::string_view key) {
  if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();
  PAX_CHECK(j.is_number(), "parse_metrics_json_line: '", key, "' must be a number or null, got ", j.dump());
  return j.get<double>();
}

}  // namespace

std::string metrics_json_line(const StepMetrics& m) {
  Json j;
  j["step"] = m.step;
  j["split"] = m.split;
  j["wall_time"] = number(m.wall_time);
  Json metrics = Json::object();
  for (const auto& [name, value] : m.metrics) metrics[name] = number(value);
  j["metrics"] = std::move(metrics);
  for (const auto& [key, field] : optional_fields(m)) {
    if (field->has_value()) j[std::string(key)] = number(**field);
  }
  if (!m.summaries.empty()) {
    Json summaries = Json::object();
    for (const auto& [name, value] : m.summaries) summaries[name] = number(value);
    j["summaries"] = std::move(summaries);
  }
  // Replacement of invalid UTF-8 keeps a bad metric name from failing the write.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StepMetrics parse_metrics_json_line(std::string_view line) {
  Json j;
  try {
    j = Json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    PAX_FAIL("parse_metrics_json_line: not JSON (", e.what(), ")");
  }
  PAX_CHECK(j.is_object(), "parse_metrics_json_line: want an object, got ", j.dump());
  StepMetrics m;
  PAX_CHECK(j.contains("step") && j["step"].is_number_integer(),
            "parse_metrics_json_line: 'step' must be an integer in ", j.dump());
  m.step = j["step"].get<int64_t>();
  PAX_CHECK(j.contains("split") && j["split"].is_string() && !j["split"].get<std::string>().empty(),
            "parse_metrics_json_line: 'split' must be a non-empty string in ", j.dump());
  m.split = j["split"].get<std::string>();
  if (j.contains("wall_time")) m.wall_time = number_from(j["wall_time"], "wall_time");
  if (j.contains("metrics")) {
    PAX_CHECK(j["metrics"].is_object(), "parse_metrics_json_line: 'metrics' must be an object in ", j.dump());
    for (const auto& [name, value] : j["metrics"].items()) m.metrics[name] = number_from(value, name);
  }
  if (j.contains("summaries")) {
    PAX_CHECK(j["summaries"].is_object(), "parse_metrics_json_line: 'summaries' must be an object in ", j.dump());
    for (const auto& [name, value] : j["summaries"].items()) m.summaries[name] = number_from(value, name);
  }
  for (const auto& [key, field] : optional_fields(m)) {
    const std::string k(key);
    if (j.contains(k)) *field = number_from(j[k], key);
  }
  return m;
}

std::vector<StepMetrics> read_metrics_jsonl(const std::string& path, int64_t* skipped) {
  std::vector<StepMetrics> out;
  int64_t bad = 0;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (skipped) *skipped = 0;
    return out;  // no history yet
  }
  std::istringstream in(data::read_file(path));  // a regular file only: a FIFO would block
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(parse_metrics_json_line(line));
    } catch (const Error&) {
      ++bad;
    }
  }
  if (skipped) *skipped = bad;
  return out;
}

// --- JobSummaries ---

namespace {

void check_split(const std::string& split) {
  PAX_CHECK(!split.empty() && split != "." && split != ".." && split.find('/') == std::string::npos &&
                split.find('\0') == std::string::npos,
            "JobSummaries: the split must be a plain directory name such as \"train\" or "
            "\"eval_test_<name>\", got \"",
            split, "\"");
}

}  // namespace

JobSummaries::JobSummaries(std::string job_dir, Options options)
    : job_dir_(std::move(job_dir)), options_(std::move(options)) {
  PAX_CHECK(!job_dir_.empty(), "JobSummaries: the job directory must not be empty");
  // Every output is checked here, so that an unusable one is an error before
  // the run starts rather than at its first summary step.
  fs::ensure_writable_directory(job_dir_, "job directory");
  fs::ensure_writable_file(metrics_path(), "metrics.jsonl");
  if (options_.report) fs::ensure_writable_file(report_path(), "report.html");
  if (options_.tensorboard)
    fs::ensure_writable_directory((std::filesystem::path(job_dir_) / "summaries").string(), "summaries");
  if (options_.title.empty()) {
    std::filesystem::path p = std::filesystem::path(job_dir_).lexically_normal();
    options_.title = p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
  }
  const std::string path = metrics_path();
  history_ = read_metrics_jsonl(path);
  if (options_.first_step) drop_after(*options_.first_step);
  jsonl_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  PAX_CHECK(jsonl_fd_ >= 0, "metrics.jsonl: cannot open '", path, "': ", std::strerror(errno));
  // A line torn by a crash must not swallow the first line appended now.
  const off_t size = ::lseek(jsonl_fd_, 0, SEEK_END);
  if (size > 0) {
    char last = '\n';
    int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (rfd >= 0) {
      if (::pread(rfd, &last, 1, size - 1) != 1) last = '\n';
      ::close(rfd);
    }
    try {
      if (last != '\n') write_fully(jsonl_fd_, "\n", path);
    } catch (...) {
      ::close(jsonl_fd_);  // no destructor runs for an object whose constructor throws
      jsonl_fd_ = -1;
      throw;
    }
  }
}

void JobSummaries::drop_after(int64_t step) {
  const size_t before = history_.size();
  std::erase_if(history_, [&](const StepMetrics& m) { return m.step > step; });
  if (history_.size() == before) return;
  // Rewritten beside and renamed over, so that a crash leaves one version whole.
  const std::string path = metrics_path(), tmp = path + ".tmp";
  std::string text;
  for (const StepMetrics& m : history_) text += metrics_json_line(m) + "\n";
  try {
    fs::write_file_synced(tmp, text);
    fs::rename(tmp, path);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
}

JobSummaries::~JobSummaries() {
  // Runs while the error that ended the run unwinds (a summary directory that
  // cannot be written, a failed step): it must neither throw nor replace that
  // error, which is the one reported.
  try {
    close();
  } catch (...) {
  }
}

std::string JobSummaries::metrics_path() const { return (std::filesystem::path(job_dir_) / "metrics.jsonl").string(); }

std::string JobSummaries::report_path() const { return (std::filesystem::path(job_dir_) / "report.html").string(); }

std::string JobSummaries::summary_dir(const std::string& split) const {
  check_split(split);
  return (std::filesystem::path(job_dir_) / "summaries" / split).string();
}

void JobSummaries::write(const StepMetrics& metrics) {
  PAX_CHECK(!closed_, "JobSummaries::write: the summaries of '", job_dir_, "' are closed");
  check_split(metrics.split);
  StepMetrics m = metrics;
  if (m.wall_time == 0) m.wall_time = unix_now();
  if (options_.tensorboard) {
    auto it = writers_.find(m.split);
    if (it == writers_.end()) {
      // Made whole before it enters the map: a writer whose directory or file
      // could not be made is never there to be flushed or closed.
      auto made = std::make_unique<SummaryWriter>(summary_dir(m.split), SummaryWriter::Options{-1});
      if (options_.first_step) made->session_start(*options_.first_step + 1, m.wall_time);
      it = writers_.emplace(m.split, std::move(made)).first;
    }
    SummaryWriter* writer = it->second.get();
    for (const auto& [tag, value] : m.scalars()) writer->scalar(tag, value, m.step, m.wall_time);
    for (const auto& [tag, value] : m.summaries) writer->scalar(tag, value, m.step, m.wall_time);
    for (const auto& [tag, h] : m.histograms) writer->histogram(tag, h, m.step, m.wall_time);
    writer->flush();
  }
  write_fully(jsonl_fd_, metrics_json_line(m) + "\n", metrics_path());
  history_.push_back(std::move(m));
  if (options_.report && (last_report_time_ < 0 || steady_now() - last_report_time_ >= options_.report_interval_secs))
    write_report();
}

void JobSummaries::write_report() {
  write_report_file(report_path(), history_, options_.title, options_.report_context);
  last_report_time_ = steady_now();
}

void JobSummaries::close() {
  if (closed_) return;
  closed_ = true;
  // Everything is closed even when one step fails; the first error is rethrown.
  std::exception_ptr error;
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  };
  for (auto& [split, writer] : writers_) {
    if (writer) attempt([&] { writer->close(); });
  }
  if (options_.report) attempt([&] { write_report(); });
  attempt([&] { close_fd(jsonl_fd_, metrics_path()); });
  if (error) std::rethrow_exception(error);
}

}  // namespace pax::train

// Training summaries written into the job directory, the way Pax does:
//
//   <job_dir>/summaries/train/events.out.tfevents.<secs>.<host>.<pid>.<n>
//   <job_dir>/summaries/eval_test_<name>/events.out.tfevents...
//   <job_dir>/metrics.jsonl      one JSON object per summary step and split
//   <job_dir>/report.html        charts of the whole history (pax/train/report.h)
//
// Event files are TensorBoard's: TFRecord framing (u64 length, masked CRC32C
// of the length, the data, masked CRC32C of the data) around hand-encoded
// tensorflow.Event protos; the first event of a file carries file_version
// "brain.Event:2", the others one scalar each (wall_time, step, summary {
// value { tag, simple_value } }). A writer never appends to an existing file:
// a restarted job gets a new file in the same directory, and TensorBoard
// reads all of them.
//
//   JobSummaries summaries(job_dir);
//   StepMetrics m{.step = step, .metrics = {{"loss", loss}}};
//   m.learning_rate = lr; m.steps_per_sec = rate;
//   summaries.write(m);          // events + metrics.jsonl + report.html
//   summaries.write({.step = step, .split = eval_split("kjv"), .metrics = eval_metrics});
//   ...
//   summaries.close();           // flushes and writes the final report
//
// In a multi-process job only process 0 should write summaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pax/train/report_context.h"

namespace pax::train {

// The version string of the first event of every file.
inline constexpr std::string_view kEventFileVersion = "brain.Event:2";

// The distribution of a set of values, as TensorBoard's HistogramProto:
// bucket i counts the values in (bucket_limit[i-1], bucket_limit[i]] (the
// first bucket from -infinity). Non-finite values are left out.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
  // `buckets` equal-width buckets between the smallest and largest value
  // (one bucket when they are equal; none for no finite value).
  static Histogram of(const std::vector<double>& values, int buckets = 30);
  bool operator==(const Histogram&) const = default;
};

// Appends scalar and histogram summaries to one new event file in a directory (one
// TensorBoard "run"). Not thread-safe. Every I/O failure throws pax::Error
// naming the file.
class SummaryWriter {
 public:
  struct Options {
    // Buffered events are written out when this many seconds have passed
    // since the last flush (checked on each scalar()); < 0: only on flush().
    double flush_secs = 10;
  };

  // Creates `dir` if needed and a new file in it whose first event is the
  // file_version event. A `dir` that cannot be written (a dangling symlink, a
  // regular file, read-only) is one pax::Error naming it (fs::ensure_writable_directory).
  explicit SummaryWriter(std::string dir, Options options);
  explicit SummaryWriter(std::string dir) : SummaryWriter(std::move(dir), Options{}) {}
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;
  // Closes the file; errors are swallowed here (call close() to see them),
  // so that it never throws while another error unwinds.
  ~SummaryWriter();

  // One scalar event. `wall_time` is in unix seconds; < 0 means now. The
  // value is stored as float (simple_value), as TensorBoard's scalars are.
  void scalar(std::string_view tag, double value, int64_t step, double wall_time = -1);
  // One histogram event (a Summary.Value whose histo is `h`).
  void histogram(std::string_view tag, const Histogram& h, int64_t step, double wall_time = -1);
  // A SessionLog START event at `step`: TensorBoard then drops the events of
  // this directory's earlier files from `step` on (a run resumed from a
  // checkpoint before them writes those steps again).
  void session_start(int64_t step, double wall_time = -1);
  // Writes the buffered events to the file (visible to readers, not fsynced).
  void flush();
  // Flushes and closes; later scalar() calls throw. Closing twice is a no-op.
  void close();

  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& event);
  // flush(); when it throws, the file is closed before the error goes on.
  void flush_or_close();
  std::string path_;
  Options options_;
  int fd_ = -1;
  std::string pending_;    // framed records not yet written
  double last_flush_ = 0;  // steady-clock seconds
};

// Tag names shared by the event files, metrics.jsonl, the report and the console.
inline constexpr std::string_view kTagLoss = "loss";
inline constexpr std::string_view kTagLearningRate = "learning_rate";
inline constexpr std::string_view kTagGradNorm = "grad_norm";
inline constexpr std::string_view kTagStepsPerSec = "steps_per_sec";
inline constexpr std::string_view kTagTokensPerSec = "tokens_per_sec";
inline constexpr std::string_view kTagExamplesPerSec = "examples_per_sec";
inline constexpr std::string_view kTagMfu = "mfu";
inline constexpr std::string_view kTagSkippedSteps = "skipped_steps";
inline constexpr std::string_view kTagInputWait = "input_wait";

// The split of the training metrics, and of the eval set `eval_name`
// ("eval_test_<eval_name>", Pax's name); each is a directory under summaries/.
inline constexpr std::string_view kTrainSplit = "train";
std::string eval_split(std::string_view eval_name);

// What one summary step reports for one split.
struct StepMetrics {
  int64_t step = 0;
  std::string split = std::string(kTrainSplit);  // kTrainSplit, eval_split(name), ...: a directory name
  std::map<std::string, double> metrics;         // "loss", "log_pplx", "accuracy", ...
  std::optional<double> learning_rate;
  std::optional<double> grad_norm;  // global L2 norm of the gradients
  std::optional<double> steps_per_sec;
  std::optional<double> tokens_per_sec;    // language models
  std::optional<double> examples_per_sec;  // everything else
  std::optional<double> mfu;               // model FLOPs utilisation, a fraction in [0, 1]
  std::optional<double> skipped_steps;     // train steps of the interval whose update was skipped
  std::optional<double> input_wait;        // fraction of the steps' time spent waiting for their batches
  double wall_time = 0;                    // unix seconds; 0: the time of the write
  // The layers' summaries (nn::Layer::add_summary), by their path: scalars
  // (in the event file and metrics.jsonl's "summaries") and histograms (in
  // the event file only). The report charts neither.
  std::map<std::string, double> summaries;
  std::map<std::string, Histogram> histograms;

  bool operator==(const StepMetrics&) const = default;

  // The metrics, then the present optional fields under their kTag* names:
  // what goes into the event file, one scalar per entry.
  std::vector<std::pair<std::string, double>> scalars() const;
};

// One line of metrics.jsonl (no newline):
//   {"step":100,"split":"train","wall_time":1.7e9,"metrics":{"loss":2.3},
//    "learning_rate":0.001,"grad_norm":1.2,"steps_per_sec":3.4,...,
//    "summaries":{"lm/transformer/x_layers_0/output_rms":1.1,...}}
// Absent optional fields are left out; NaN and infinities become null (JSON
// has no such numbers) and read back as NaN.
std::string metrics_json_line(const StepMetrics& m);
// The inverse; pax::Error naming the problem for a malformed line.
StepMetrics parse_metrics_json_line(std::string_view line);
// Every well-formed line of a metrics.jsonl file, in file order; malformed
// lines (a line torn by a crash) are skipped and counted in `*skipped`. A
// missing file is an empty history.
std::vector<StepMetrics> read_metrics_jsonl(const std::string& path, int64_t* skipped = nullptr);

// The facade a training loop talks to: routes each StepMetrics to the event
// writer of its split, metrics.jsonl and report.html.
class JobSummaries {
 public:
  struct Options {
    bool tensorboard = true;  // write event files under <job_dir>/summaries/
    bool report = true;       // regenerate report.html on write() and on close()
    // write() regenerates the report at most this often (the first write and
    // close() always do): each regeneration renders the whole history, so a
    // long run must not do it at every summary step.
    double report_interval_secs = 10;
    std::string title;  // the report's title; empty: the job directory's name
    // The step a training run continues from (its restored checkpoint, 0 for
    // a new run): lines of later steps in an existing metrics.jsonl, written
    // by a run cut short after its last checkpoint, are dropped, since this
    // run writes those steps again. Unset (eval, decode): everything is kept.
    std::optional<int64_t> first_step;
    // The report's sections besides the charts (machine, configuration,
    // parameters, decoded samples); empty: charts and values only.
    ReportContext report_context;
  };

  // Creates the job directory if needed. An existing metrics.jsonl is kept
  // (up to options.first_step) and appended to, so that a resumed job's
  // report covers the whole history with each step once. Every output that is
  // in use (the job directory, metrics.jsonl, report.html, summaries/) is
  // checked first: one that cannot be written is one pax::Error naming it.
  // A split's directory is checked when its first write() makes it.
  explicit JobSummaries(std::string job_dir, Options options);
  explicit JobSummaries(std::string job_dir) : JobSummaries(std::move(job_dir), Options{}) {}
  JobSummaries(const JobSummaries&) = delete;
  JobSummaries& operator=(const JobSummaries&) = delete;
  // close(), with its errors swallowed: it runs while the error that ended a
  // run unwinds, and must not replace it.
  ~JobSummaries();

  // Writes one summary step of one split and flushes every output, so that
  // a crash loses nothing that was written.
  void write(const StepMetrics& m);
  // Regenerates report.html from the history (metrics.jsonl's lines).
  void write_report();
  // Flushes, writes the final report and closes the event files.
  void close();

  const std::string& job_dir() const { return job_dir_; }
  std::string metrics_path() const;
  std::string report_path() const;
  // <job_dir>/summaries/<split>
  std::string summary_dir(const std::string& split) const;
  // The history so far: metrics.jsonl as read at construction plus every write().
  const std::vector<StepMetrics>& history() const { return history_; }

 private:
  // Drops the lines of steps after `step` from the history and metrics.jsonl.
  void drop_after(int64_t step);

  std::string job_dir_;
  Options options_;
  std::map<std::string, std::unique_ptr<SummaryWriter>> writers_;  // by split
  int jsonl_fd_ = -1;
  std::vector<StepMetrics> history_;
  bool closed_ = false;
  double last_report_time_ = -1;  // steady-clock seconds of the last regeneration
};

}  // namespace pax::train

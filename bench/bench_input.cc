// Reading a corpus into TextLmInput (read whole) and StreamingTextLmInput
// (batches of 8 rows through a shuffle buffer of 1,024), per format: plain text lines, gzipped
// JSON lines and TFRecord files of tf.Example, each holding the same
// documents (the corpus fixtures of pax/data/testdata repeated: TFRecord
// records and gzip members concatenate into valid files). Counts documents
// and their tokens (byte tokenizer) per second; build with the source tree
// at hand (it reads the fixtures).
//   ./build/bench/bench_input --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "pax/data/record_files.h"
#include "pax/data/text_lm.h"
#include "pax/data/text_stream.h"

namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(PAX_SOURCE_DIR) + "/pax/data/testdata/";
constexpr int kCopies = 2000;  // 6 documents each (5 not empty)

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `bytes` repeated kCopies times into file `as` of a scratch directory.
std::string repeated(const std::string& as, const std::string& bytes) {
  const fs::path dir = fs::temp_directory_path() / ("pax_bench_input_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / as).string();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < kCopies; ++i) out << bytes;
  return path;
}

void read_corpus(benchmark::State& state, const std::string& path) {
  pax::data::TextLmInput::HParams hp;
  hp.files = {path};
  hp.seq_length = 512;
  hp.batch_size = 8;
  int64_t docs = 0, tokens = 0;
  for (auto _ : state) {
    const pax::data::TextLmInput input(hp);
    docs = input.num_documents();
    tokens = 0;
    for (int32_t id : input.rows().segment_ids) tokens += id != 0;
  }
  state.counters["docs/s"] = benchmark::Counter(double(docs), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

// One epoch of the corpus as batches of 8 rows of 512 (about 1,300 of them),
// shuffled in windows of 1,024 rows.
void stream_corpus(benchmark::State& state, const std::string& path) {
  pax::data::StreamingTextLmInput::HParams hp;
  hp.files = {path};
  hp.seq_length = 512;
  hp.batch_size = 8;
  hp.repeat = false;
  hp.shuffle = true;
  int64_t docs = 0, tokens = 0;
  for (auto _ : state) {
    pax::data::StreamingTextLmInput input(hp);
    tokens = 0;
    docs = 0;
    try {
      while (true) {
        const pax::Tree batch = input.get_next();
        const pax::Array seg = batch["segment_ids"].leaf();
        const std::vector<int32_t> p = seg.to_vector<int32_t>();
        for (size_t i = 0; i < p.size(); ++i) {
          tokens += p[i] != 0;
          docs += p[i] != 0 && (i % size_t(hp.seq_length) == 0 || p[i - 1] != p[i]);
        }
      }
    } catch (const pax::data::OutOfRange&) {
    }
  }
  state.counters["docs/s"] = benchmark::Counter(double(docs), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

int register_cases() {
  // The same documents as text lines: the JSON-lines fixture's texts, one a line.
  pax::data::BadRecords bad;
  std::string text;
  for (const std::string& doc : pax::data::read_record_documents(
           kFixtures + "c4-mini.json.gz", pax::data::RecordFormat::json_lines, "text", false, bad))
    if (!doc.empty()) text += doc + "\n";
  const std::string tfrecord =
      slurp(kFixtures + "c4-mini.tfrecord-00000-of-00002") + slurp(kFixtures + "c4-mini.tfrecord-00001-of-00002");
  const std::string cases[][2] = {
      {"text", repeated("corpus.txt", text)},
      {"json_lines_gz", repeated("corpus.json.gz", slurp(kFixtures + "c4-mini.json.gz"))},
      {"tfrecord", repeated("corpus.tfrecord-00000-of-00001", tfrecord)},
  };
  for (const auto& [name, path] : cases)
    benchmark::RegisterBenchmark(("read/" + name).c_str(), read_corpus, path)->Unit(benchmark::kMillisecond);
  for (const auto& [name, path] : cases)
    benchmark::RegisterBenchmark(("stream/" + name).c_str(), stream_corpus, path)->Unit(benchmark::kMillisecond);
  return 0;
}
const int registered = register_cases();

}  // namespace

BENCHMARK_MAIN();

// StreamingTextLmInput: one window equals TextLmInput's packing, every
// document once per epoch through small shuffled windows, the exact stream
// after a restore (across windows and epochs), each host its own files or
// records, the corpus fixtures, and errors.
#include "pax/data/text_stream.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "pax/data/file_io.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

std::string write_lines(const std::string& name, int first, int count, bool gzip = false) {
  const std::filesystem::path dir = process_temp_dir() / "text_stream";
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = first; i < first + count; ++i) text += "document " + std::to_string(i) + "\n";
  const std::string path = (dir / (name + (gzip ? ".txt.gz" : ".txt"))).string();
  write_file_atomic(path, text, gzip);
  return path;
}

std::set<std::string> documents(int first, int count) {
  std::set<std::string> out;
  for (int i = first; i < first + count; ++i) out.insert("document " + std::to_string(i));
  return out;
}

StreamingTextLmInput::HParams stream_params(std::vector<std::string> files, int64_t seq_length, int64_t batch_size) {
  StreamingTextLmInput::HParams hp;
  hp.files = std::move(files);
  hp.seq_length = seq_length;
  hp.batch_size = batch_size;
  return hp;
}

// TextLmInput over the same files, for one epoch (the reference).
TextLmInput::HParams whole_params(std::vector<std::string> files, int64_t seq_length, int64_t batch_size, bool pack) {
  TextLmInput::HParams hp;
  hp.files = std::move(files);
  hp.seq_length = seq_length;
  hp.batch_size = batch_size;
  hp.pack = pack;
  hp.repeat = false;
  return hp;
}

// The documents of the next `rows` rows (pack = false: a row per document);
// rows should be a multiple of the batch size (the rest of a batch is lost).
std::vector<std::string> next_documents(StreamingTextLmInput& input, int64_t rows) {
  std::vector<std::string> out;
  while (int64_t(out.size()) < rows) {
    const Tree b = input.get_next();
    for (const std::string& d : input.ids_to_strings(b["labels"].leaf())) out.push_back(d);
  }
  out.resize(size_t(rows));
  return out;
}

void expect_same_batch(const Tree& a, const Tree& b, const std::string& where) {
  ASSERT_EQ(a.keys(), b.keys()) << where;
  for (const std::string& k : a.keys()) EXPECT_TRUE(testing::all_close(a[k].leaf(), b[k].leaf(), 0, 0)) << where << k;
}

TEST(StreamingTextLmInput, OneWindowPacksAsTextLmInputDoes) {
  const std::vector<std::string> files = {write_lines("one_a", 0, 30), write_lines("one_b", 30, 20, true)};
  StreamingTextLmInput::HParams hp = stream_params(files, 16, 3);
  hp.repeat = false;
  hp.shuffle_buffer_size = 1000;
  StreamingTextLmInput stream(hp);
  TextLmInput reference(whole_params(files, 16, 3, true));
  int batches = 0;
  while (true) {
    Tree expected;
    try {
      expected = reference.get_next();
    } catch (const OutOfRange&) {
      EXPECT_THROW(stream.get_next(), OutOfRange);
      break;
    }
    expect_same_batch(stream.get_next(), expected, "batch " + std::to_string(batches++) + " ");
  }
  EXPECT_GT(batches, 10);
  // reset() starts the epoch again.
  stream.reset();
  reference.reset();
  expect_same_batch(stream.get_next(), reference.get_next(), "after reset ");
}

TEST(StreamingTextLmInput, SmallShuffledWindowsGiveEveryDocumentOncePerEpoch) {
  StreamingTextLmInput::HParams hp =
      stream_params({write_lines("win_a", 0, 23), write_lines("win_b", 23, 18), write_lines("win_c", 41, 9)}, 32, 2);
  hp.pack = false;
  hp.shuffle = true;
  hp.shuffle_buffer_size = 5;
  StreamingTextLmInput input(hp);
  const std::vector<std::string> epoch0 = next_documents(input, 50), epoch1 = next_documents(input, 50);
  EXPECT_EQ(std::set<std::string>(epoch0.begin(), epoch0.end()), documents(0, 50));
  EXPECT_EQ(std::set<std::string>(epoch1.begin(), epoch1.end()), documents(0, 50));
  EXPECT_NE(epoch0, epoch1);  // files and rows in a new order each epoch
  hp.shuffle = false;
  StreamingTextLmInput in_order(hp);
  std::vector<std::string> expected;
  for (int i = 0; i < 50; ++i) expected.push_back("document " + std::to_string(i));
  EXPECT_EQ(next_documents(in_order, 50), expected);
  EXPECT_NE(epoch0, expected);
  // Another seed, another order.
  hp.shuffle = true;
  hp.input_random_seed = 7;
  StreamingTextLmInput other_seed(hp);
  EXPECT_NE(next_documents(other_seed, 50), epoch0);
}

TEST(StreamingTextLmInput, ARestoredInputContinuesTheExactStream) {
  StreamingTextLmInput::HParams hp = stream_params(
      {write_lines("res_a", 0, 17), write_lines("res_b", 17, 11, true), write_lines("res_c", 28, 6)}, 12, 2);
  hp.shuffle = true;
  hp.shuffle_buffer_size = 3;
  hp.input_random_seed = 11;
  StreamingTextLmInput straight(hp);
  std::vector<Tree> expected;
  std::vector<Tree> states;
  for (int i = 0; i < 60; ++i) {  // several epochs of about 14 batches
    states.push_back(straight.state());
    expected.push_back(straight.get_next());
  }
  for (int k : {0, 1, 4, 13, 14, 15, 29, 44}) {
    StreamingTextLmInput resumed(hp);
    resumed.restore_state(states[size_t(k)]);
    for (int i = k; i < std::min(k + 16, 60); ++i)
      expect_same_batch(resumed.get_next(), expected[size_t(i)],
                        "resumed at " + std::to_string(k) + ", batch " + std::to_string(i) + " ");
  }
  EXPECT_GT(state_value(states[59], "epoch", "test"), 2);
}

TEST(StreamingTextLmInput, EachHostReadsItsOwnFiles) {
  const std::vector<std::string> files = {write_lines("host_a", 0, 7), write_lines("host_b", 7, 5),
                                          write_lines("host_c", 12, 9), write_lines("host_d", 21, 4)};
  StreamingTextLmInput::HParams hp = stream_params(files, 32, 1);
  hp.pack = false;
  hp.num_infeed_hosts = 2;
  std::multiset<std::string> both;
  for (int64_t host : {0, 1}) {
    hp.infeed_host_index = host;
    StreamingTextLmInput input(hp);
    EXPECT_EQ(input.host_files(), (std::vector<std::string>{files[size_t(host)], files[size_t(host) + 2]}));
    const int64_t mine = host == 0 ? 16 : 9;
    const std::vector<std::string> docs = next_documents(input, mine);
    both.insert(docs.begin(), docs.end());
  }
  const std::set<std::string> all = documents(0, 25);
  EXPECT_EQ(both, std::multiset<std::string>(all.begin(), all.end()));
}

TEST(StreamingTextLmInput, FewerFilesThanHostsSplitTheRecords) {
  StreamingTextLmInput::HParams hp = stream_params({write_lines("stride", 0, 10)}, 32, 1);
  hp.pack = false;
  hp.num_infeed_hosts = 3;
  for (int64_t host : {0, 1, 2}) {
    hp.infeed_host_index = host;
    StreamingTextLmInput input(hp);
    std::vector<std::string> expected;
    for (int i = int(host); i < 10; i += 3) expected.push_back("document " + std::to_string(i));
    EXPECT_EQ(next_documents(input, int64_t(expected.size())), expected) << host;
  }
}

TEST(StreamingTextLmInput, ReadsTheCorpusFixturesAsTextLmInputDoes) {
  const std::string dir = std::string(PAX_SOURCE_DIR) + "/pax/data/testdata/";
  for (const std::string& pattern : {dir + "c4-mini.tfrecord-*-of-00002", dir + "c4-mini.json.gz"}) {
    StreamingTextLmInput::HParams hp = stream_params({pattern}, 256, 1);
    hp.pack = false;
    hp.repeat = false;
    StreamingTextLmInput stream(hp);
    TextLmInput reference(whole_params({pattern}, 256, 1, false));
    for (int i = 0;; ++i) {
      Tree expected;
      try {
        expected = reference.get_next();
      } catch (const OutOfRange&) {
        EXPECT_THROW(stream.get_next(), OutOfRange) << pattern;
        break;
      }
      expect_same_batch(stream.get_next(), expected, pattern + " row " + std::to_string(i) + " ");
    }
  }
}

TEST(StreamingTextLmInput, ExplainsBadConfigsAndStates) {
  const std::string file = write_lines("bad", 0, 5);
  StreamingTextLmInput::HParams hp = stream_params({}, 16, 2);
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "`files` is empty");
  hp.files = {file + ".missing"};
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "no such file: '" + file + ".missing'");
  hp.files = {file};
  hp.tokenizer = "spm:100";
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "trains a model on the whole corpus");
  hp.tokenizer = "bytes";
  hp.repeat = false;
  hp.num_infeed_hosts = 2;
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "repeat = false with 2 hosts");
  hp.repeat = true;
  hp.num_infeed_hosts = 1;
  hp.shuffle_buffer_size = 0;
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "shuffle_buffer_size must be >= 1");
  hp.shuffle_buffer_size = 4;
  hp.files = {write_lines("blank", 0, 0)};
  EXPECT_PAX_ERROR(StreamingTextLmInput{hp}, "no documents in this host's 1 file(s)");
  hp.files = {file};
  StreamingTextLmInput a(hp);
  a.get_next();
  const Tree saved = a.state();
  hp.input_random_seed = 3;
  EXPECT_PAX_ERROR(StreamingTextLmInput(hp).restore_state(saved),
                   "the saved stream position is of seed = 0 but this input has 3");
  hp.input_random_seed = 0;
  hp.shuffle_buffer_size = 8;
  EXPECT_PAX_ERROR(StreamingTextLmInput(hp).restore_state(saved), "shuffle_buffer_size = 4");
}

}  // namespace
}  // namespace pax::data

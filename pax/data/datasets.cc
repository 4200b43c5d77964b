// The data directory, KJV preparation from the `bible` command, and locating
// Fashion-MNIST.
#include "pax/data/datasets.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sys/wait.h>
#include <unistd.h>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/data/prepared_file.h"
#include "pax/data/tokenizer.h"

namespace pax::data {
namespace {

std::mutex& default_dir_mutex() {
  static std::mutex m;
  return m;
}
std::string& default_dir() {
  static std::string d;
  return d;
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// An executable `name` on $PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / name;
    if (end > start && is_file(candidate) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

bool blank(std::string_view line) {
  for (char c : line) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

constexpr const char* kKjvRange = "Gen1:1-Rev22:21";
constexpr const char* kFashionMnistFiles[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

}  // namespace

void set_default_data_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(default_dir_mutex());
  default_dir() = dir;
}

std::string resolve_data_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  {
    std::lock_guard<std::mutex> lock(default_dir_mutex());
    if (!default_dir().empty()) return default_dir();
  }
  const char* env = std::getenv("PAX_DATA_DIR");
  if (env && *env) return env;
  return "data";
}

// ---------------------------------------------------------------------------
// KJV

std::string run_bible_command() {
  const std::string bible = find_on_path("bible");
  PAX_CHECK(!bible.empty(),
            "KJV text not found: the `bible` command is missing; install it with `apt-get install bible-kjv` "
            "(run scripts/setup.sh)");
  const std::string command = "'" + bible + "' '" + kKjvRange + "' </dev/null 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  PAX_CHECK(pipe, "KJV text: cannot run ", bible);
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  PAX_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "KJV text: `", bible, " ", kKjvRange,
            "` failed (status ", status, "): ", out.substr(0, 400));
  return out;
}

std::string parse_bible_output(std::string_view text) {
  // Layout: "\nGenesis 1\n\n  1 In the beginning ...\nwrapped rest\n  2 ...".
  // A verse starts with spaces, its number and a space; a line after a blank
  // one that does not is a chapter heading; other lines continue the verse.
  std::string out;
  bool in_verse = false, after_blank = true;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (blank(line)) {
      after_blank = true;
      if (pos > text.size()) break;
      continue;
    }
    size_t i = 0;
    while (i < line.size() && line[i] == ' ') ++i;
    size_t digits = i;
    while (digits < line.size() && std::isdigit(static_cast<unsigned char>(line[digits]))) ++digits;
    const bool verse_start = i > 0 && digits > i && digits < line.size() && line[digits] == ' ';
    if (verse_start) {
      if (in_verse) out += '\n';
      out.append(line.substr(digits + 1));
      in_verse = true;
    } else if (after_blank) {
      if (in_verse) out += '\n';  // a chapter heading ends the verse before it
      in_verse = false;
    } else if (in_verse) {
      out += ' ';
      out.append(line.substr(i));
    }
    after_blank = false;
  }
  if (in_verse) out += '\n';
  return out;
}

std::string kjv_text_path(const std::string& data_dir) {
  const std::filesystem::path path = std::filesystem::path(resolve_data_dir(data_dir)) / "kjv" / "kjv.txt";
  return ensure_prepared_file(path.string(), std::string("the `bible` command (") + kKjvRange + ")", [] {
    std::string verses = parse_bible_output(run_bible_command());
    PAX_CHECK(!verses.empty(), "KJV text: the `bible` command printed no verses; is bible-kjv-text installed?");
    return verses;
  });
}

std::string kjv_sentencepiece_path(int64_t vocab_size, const std::string& data_dir) {
  PAX_CHECK(vocab_size >= 64 && vocab_size <= 65536, "KJV SentencePiece model: vocab_size must be in [64, 65536], got ",
            vocab_size);
  const std::string text = kjv_text_path(data_dir);
  const std::filesystem::path path =
      std::filesystem::path(text).parent_path() / ("spm_" + std::to_string(vocab_size) + ".model");
  return ensure_prepared_file(path.string(), "the KJV text " + text + " (kjv_spm:" + std::to_string(vocab_size) + ")",
                              [&] {
                                SentencePieceTrainOptions options;
                                options.vocab_size = vocab_size;
                                return train_sentencepiece_model(read_file(text), "'" + text + "'", options);
                              });
}

std::string resolve_tokenizer_spec(const std::string& spec, const std::string& data_dir) {
  PAX_CHECK(spec.rfind("spm:", 0) != 0, "tokenizer '", spec,
            "' is trained on a TextLmInput's own files and only a TextLmInput takes it; give the path of the model "
            "it trained instead (in ",
            resolve_data_dir(data_dir), "/text_spm/)");
  const std::string prefix = "kjv_spm:";
  if (spec.rfind(prefix, 0) != 0) return spec;
  const std::string vocab = spec.substr(prefix.size());
  PAX_CHECK(!vocab.empty() && vocab.size() <= 6 && vocab.find_first_not_of("0123456789") == std::string::npos,
            "tokenizer '", spec, "' must be kjv_spm:<vocab size>, e.g. kjv_spm:4096");
  return kjv_sentencepiece_path(std::stoll(vocab), data_dir);
}

// ---------------------------------------------------------------------------
// Fashion-MNIST

std::string fashion_mnist_dir(const std::string& data_dir) {
  const std::filesystem::path local = std::filesystem::path(resolve_data_dir(data_dir)) / "fashion-mnist";
  for (const std::filesystem::path& dir : {local, std::filesystem::path(kSystemFashionMnistDir)}) {
    bool all = true;
    for (const char* f : kFashionMnistFiles) all = all && is_file(dir / f);
    if (all) return dir.string();
  }
  PAX_FAIL("Fashion-MNIST not found in ", local.string(), " or ", kSystemFashionMnistDir,
           ": install it with `apt-get install dataset-fashion-mnist` (run scripts/setup.sh), or put the four IDX "
           "files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, "
           "t10k-labels-idx1-ubyte.gz) in ",
           local.string());
}

}  // namespace pax::data

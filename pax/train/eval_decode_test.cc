// Tests for the decode samples' files: their name and contents, and an
// unusable decode directory as one error naming it.
#include "pax/train/eval_decode.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pax/testing/testing.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = (fs::temp_directory_path() /
             ("pax_eval_decode_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

DecodeResult two_samples() {
  DecodeResult r;
  r.prompts = {"In the", "And God"};
  r.outputs = {"In the beginning", "And God said"};
  r.batches = 1;
  return r;
}

TEST(DecodeSamples, OneLinePerOutputInANamedFile) {
  TempDir tmp;
  EXPECT_EQ(decode_samples_path("job/decode", "kjv", 20), "job/decode/kjv_step_00000020.txt");
  const std::string path = write_decode_samples(tmp / "decode", "kjv", 20, two_samples());
  EXPECT_EQ(path, tmp / "decode/kjv_step_00000020.txt");
  EXPECT_EQ(slurp(path), "In the beginning\nAnd God said\n");
  EXPECT_PAX_ERROR(decode_samples_path("d", "a/b", 1), "plain file name");
  EXPECT_PAX_ERROR(decode_samples_path("", "kjv", 1), "output directory must not be empty");
}

TEST(DecodeSamples, AnUnusableDecodeDirectoryIsOneErrorNamingIt) {
  TempDir tmp;
  std::ofstream(tmp / "decode") << "x";
  EXPECT_PAX_ERROR(write_decode_samples(tmp / "decode", "kjv", 20, two_samples()),
                   "decode samples: cannot write to '" + (tmp / "decode") + "': it is a regular file, not a directory");
  fs::create_symlink(tmp / "nowhere", tmp / "linked");
  EXPECT_PAX_ERROR(write_decode_samples(tmp / "linked", "kjv", 20, two_samples()),
                   "decode samples: cannot write to '" + (tmp / "linked") + "': it is a dangling symlink to '" +
                       (tmp / "nowhere") + "'");
  EXPECT_FALSE(fs::exists(tmp / "nowhere"));
  fs::create_directories(tmp / "ok/kjv_step_00000020.txt");
  EXPECT_PAX_ERROR(write_decode_samples(tmp / "ok", "kjv", 20, two_samples()),
                   "decode samples: cannot write to '" + (tmp / "ok/kjv_step_00000020.txt") +
                       "': it is a directory, not a regular file");
}

}  // namespace
}  // namespace pax::train

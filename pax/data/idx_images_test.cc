// IDX files and IdxImageInput: small gzip files written here (values, padding,
// normalisation), every malformed-file error, and the real Fashion-MNIST
// files when the Debian package is installed.
#include "pax/data/idx_images.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "pax/data/datasets.h"
#include "pax/data/file_io.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

// A fresh directory for one test, inside this process's own (test programs
// may run concurrently).
std::string temp_dir(const std::string& name) {
  std::filesystem::path p = process_temp_dir() / ("idx_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// 3 images of 2x2 with pixels 0, 51, 102, ... and labels 7, 8, 9.
std::string write_small_set(const std::string& name, const std::string& prefix = "train") {
  const std::string dir = temp_dir(name);
  IdxArray images{{3, 2, 2}, {}}, labels{{3}, {7, 8, 9}};
  for (int i = 0; i < 12; ++i) images.data.push_back(uint8_t(i * 51 % 256));
  write_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz", images);
  write_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", labels);
  return dir;
}

TEST(Idx, WritesAndReadsGzipAndPlainFiles) {
  const std::string dir = temp_dir("roundtrip");
  IdxArray a{{2, 3}, {1, 2, 3, 4, 5, 6}};
  for (const char* name : {"/a.gz", "/a.idx"}) {
    write_idx(dir + name, a);
    IdxArray b = read_idx(dir + name);
    EXPECT_EQ(b.dims, a.dims);
    EXPECT_EQ(b.data, a.data);
  }
  // The .gz one is compressed: its first bytes are the gzip magic.
  std::string raw;
  {
    FILE* f = std::fopen((dir + "/a.gz").c_str(), "rb");
    ASSERT_TRUE(f);
    raw.resize(2);
    ASSERT_EQ(std::fread(raw.data(), 1, 2, f), 2u);
    std::fclose(f);
  }
  EXPECT_EQ(uint8_t(raw[0]), 0x1f);
  EXPECT_EQ(uint8_t(raw[1]), 0x8b);
  EXPECT_PAX_ERROR(write_idx(dir + "/bad.gz", IdxArray{{2, 2}, {1, 2, 3}}), "hold 4 bytes, data has 3");
}

TEST(IdxImageInput, BatchesScaledImagesLabelsAndWeights) {
  IdxImageInput::HParams hp;
  hp.dir = write_small_set("input");
  hp.batch_size = 2;
  hp.repeat = false;
  IdxImageInput input(hp);
  EXPECT_EQ(input.order().num_examples(), 3);
  Tree b = input.get_next();
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"inputs", "labels", "weights"}));
  EXPECT_EQ(b["inputs"].leaf().aval().str(), "f32[2,2,2,1]");
  EXPECT_EQ(b["labels"].leaf().aval().str(), "i32[2]");
  EXPECT_EQ(b["weights"].leaf().aval().str(), "f32[2]");
  // Pixels i * 51 mod 256: image 0 is 0, 51, 102, 153; image 1 204, 255, 50, 101.
  EXPECT_TRUE(testing::all_close(b["inputs"].leaf(), {0, 0.2, 0.4, 0.6, 0.8, 1.0, 50 / 255.0, 101 / 255.0}));
  EXPECT_TRUE(testing::all_close(b["labels"].leaf(), {7, 8}));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {1, 1}));
  // The last batch: one image and one padding example.
  b = input.get_next();
  EXPECT_TRUE(testing::all_close(b["inputs"].leaf(), {152 / 255.0, 203 / 255.0, 254 / 255.0, 49 / 255.0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["labels"].leaf(), {9, 0}));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {1, 0}));
  EXPECT_THROW(input.get_next(), OutOfRange);
}

TEST(IdxImageInput, NormalisesAndReadsTheTestSplit) {
  IdxImageInput::HParams hp;
  hp.dir = write_small_set("test_split", "t10k");
  hp.split = ImageSplit::test;
  hp.pixel_mean = 0.5;
  hp.pixel_stddev = 0.25;
  hp.batch_size = 1;
  IdxImageInput input(hp);
  EXPECT_TRUE(testing::all_close(input.get_next()["inputs"].leaf(), {-2, -1.2, -0.4, 0.4}, 1e-6, 1e-6));
  hp.split = ImageSplit::train;
  EXPECT_PAX_ERROR(IdxImageInput{hp}, "train-images-idx3-ubyte.gz");
  hp.split = ImageSplit::test;
  hp.pixel_stddev = 0;
  EXPECT_PAX_ERROR(IdxImageInput{hp}, "pixel_stddev must be > 0");
}

// Writes raw bytes (gzip-compressed) and returns the path.
std::string write_raw(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir + "/" + name;
  write_file_atomic(path, bytes, true);
  return path;
}

std::string header(uint8_t type, std::vector<uint32_t> dims) {
  std::string h = {0, 0, char(type), char(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(char((d >> s) & 0xff));
  }
  return h;
}

TEST(Idx, MalformedFilesAreNamedInTheError) {
  const std::string dir = temp_dir("errors");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "magic.gz", std::string("\x12\x34\x08\x01\0\0\0\0", 8))),
                   "magic.gz' is not an IDX file (magic 0x12340801");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "type.gz", header(0x0d, {1}) + "abcd")),
                   "type.gz' holds IDX type 0x0000000d");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "short.gz", "\0\0")), "too short for an IDX header");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "header.gz", header(0x08, {3, 2}).substr(0, 9))),
                   "header.gz' is truncated: its header needs 12 bytes");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "truncated.gz", header(0x08, {3, 2}) + "12345")),
                   "truncated.gz' is truncated: the header promises 6 data bytes");
  EXPECT_PAX_ERROR(read_idx(write_raw(dir, "trailing.gz", header(0x08, {2}) + "123")),
                   "trailing.gz' has 1 bytes after the 2 data bytes");
  EXPECT_PAX_ERROR(read_idx(dir + "/missing.gz"), "no such file");
  // A gzip stream cut in half (random bytes, so that it stays long).
  std::string noise;
  for (uint32_t i = 0, x = 1; i < 4096; ++i) noise.push_back(char((x = x * 1664525u + 1013904223u) >> 24));
  write_raw(dir, "whole.gz", header(0x08, {4096}) + noise);
  std::string gz;
  {
    FILE* f = std::fopen((dir + "/whole.gz").c_str(), "rb");
    ASSERT_TRUE(f);
    char buf[16384];
    size_t n = std::fread(buf, 1, sizeof(buf), f);
    std::fclose(f);
    gz.assign(buf, n / 2);
  }
  write_file_atomic(dir + "/cut.gz", gz);
  EXPECT_PAX_ERROR(read_idx(dir + "/cut.gz"), "damaged or truncated gzip");
}

TEST(Idx, ImagesAndLabelsMustMatch) {
  const std::string dir = temp_dir("mismatch");
  write_idx(dir + "/images.gz", IdxArray{{3, 2, 2}, std::vector<uint8_t>(12)});
  write_idx(dir + "/labels.gz", IdxArray{{4}, std::vector<uint8_t>(4)});
  write_idx(dir + "/flat.gz", IdxArray{{12}, std::vector<uint8_t>(12)});
  EXPECT_PAX_ERROR(load_idx_images(dir + "/images.gz", dir + "/labels.gz"),
                   "images.gz' has 3 images but '" + dir + "/labels.gz' has 4 labels");
  EXPECT_PAX_ERROR(load_idx_images(dir + "/flat.gz", dir + "/labels.gz"),
                   "must hold images (n, rows, cols) (magic 0x00000803), it has 1 dimensions (magic 0x00000801)");
  EXPECT_PAX_ERROR(load_idx_images(dir + "/images.gz", dir + "/images.gz"), "must hold labels (n,)");
}

TEST(FashionMnist, RealFilesHave60000TrainAnd10000TestImages) {
  if (!std::filesystem::exists(std::string(kSystemFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  IdxImageInput::HParams hp;
  hp.data_dir = temp_dir("fashion_data_dir");  // empty: falls back to the package's files
  hp.batch_size = 8;
  IdxImageInput train(hp);
  EXPECT_EQ(train.images().count, 60000);
  EXPECT_EQ(train.images().rows, 28);
  EXPECT_EQ(train.images().cols, 28);
  for (uint8_t l : train.images().labels) ASSERT_LT(l, 10);
  Tree b = train.get_next();
  EXPECT_EQ(b["inputs"].leaf().aval().str(), "f32[8,28,28,1]");
  for (float v : b["inputs"].leaf().to_vector<float>()) ASSERT_TRUE(v >= 0 && v <= 1);
  hp.split = ImageSplit::test;
  IdxImageInput test(hp);
  EXPECT_EQ(test.images().count, 10000);
  EXPECT_EQ(fashion_mnist_dir(hp.data_dir), kSystemFashionMnistDir);
}

}  // namespace
}  // namespace pax::data

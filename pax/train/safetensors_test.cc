// safetensors: round trips of every dtype, byte-exact agreement with the
// reference serializer's layout, alignment, foreign files, and one test per
// kind of malformed file (each checking that the error names file and tensor).
#include "pax/train/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "pax/testing/checkpoint_testing.h"
#include "pax/core/crc32c.h"

namespace pax::train {
namespace {

using testing::random_array;
using testing::TempDir;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xFF);
  return s;
}

// A file image from a header text and data bytes (no padding added).
std::string image(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

SafetensorsContents read_image(const std::string& bytes, const std::string& what = "mem.safetensors") {
  return read_safetensors(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), what);
}

std::vector<NamedArray> every_dtype() {
  std::vector<NamedArray> t;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,  DType::i32,
                          DType::i64, DType::u8,   DType::u32, DType::bool_};
  uint32_t seed = 1;
  for (DType d : dtypes) {
    const std::string n = dtype_short_name(d);
    t.push_back({"m/" + n, random_array({3, 5}, d, seed++, 0, 100)});
    t.push_back({"s/" + n, random_array({}, d, seed++, 0, 100)});      // 0-d
    t.push_back({"z/" + n, random_array({0, 4}, d, seed++, 0, 100)});  // zero-size
  }
  return t;
}

void expect_same(const std::vector<NamedArray>& want, const SafetensorsContents& got) {
  ASSERT_EQ(got.tensors.size(), want.size());
  for (const NamedArray& w : want) {
    auto it =
        std::find_if(got.tensors.begin(), got.tensors.end(), [&](const NamedArray& g) { return g.name == w.name; });
    ASSERT_NE(it, got.tensors.end()) << w.name;
    EXPECT_EQ(it->array.aval(), w.array.aval()) << w.name;
    EXPECT_EQ(std::memcmp(it->array.data(), w.array.data(), w.array.nbytes()), 0) << w.name;
    EXPECT_EQ(got.crc32c[size_t(it - got.tensors.begin())], crc32c(w.array.data(), w.array.nbytes())) << w.name;
  }
}

TEST(Safetensors, RoundTripEveryDtypeInMemoryAndOnDisk) {
  const std::vector<NamedArray> tensors = every_dtype();
  const std::map<std::string, std::string> metadata{{"format", "paxcc"}, {"note", "\"quoted\" \u00e9"}};
  const std::string bytes = serialize_safetensors(tensors, metadata);
  const SafetensorsContents mem = read_image(bytes);
  expect_same(tensors, mem);
  EXPECT_EQ(mem.metadata, metadata);

  TempDir dir;
  const std::vector<uint32_t> crcs = write_safetensors(dir / "t.safetensors", tensors, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(crcs[i], crc32c(tensors[i].array.data(), tensors[i].array.nbytes()));
  }
  EXPECT_EQ(testing::read_bytes(dir / "t.safetensors"), bytes);
  const SafetensorsContents file = read_safetensors(dir / "t.safetensors");
  expect_same(tensors, file);
  EXPECT_EQ(file.metadata, metadata);
}

TEST(Safetensors, EmptyFile) {
  const std::string bytes = serialize_safetensors({});
  EXPECT_EQ(bytes, le64(8) + "{}      ");  // the reference serializer's bytes for no tensors
  EXPECT_TRUE(read_image(bytes).tensors.empty());
}

// The layout the reference (Rust) serializer produces for one F32 tensor:
// fields dtype, shape, data_offsets, and the header padded with spaces to a
// multiple of 8 bytes (no padding for 64 bytes, 7 spaces for 65).
TEST(Safetensors, MatchesTheReferenceLayout) {
  const std::vector<float> v{0, 1, 2, 3, 4, 5};
  std::string data(24, '\0');
  std::memcpy(data.data(), v.data(), 24);

  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  EXPECT_EQ(serialize_safetensors(std::vector<NamedArray>{{"attn.0", array(v, Shape{1, 2, 3})}}),
            le64(64) + header + data);

  const std::string odd = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(odd.size(), 65u);
  EXPECT_EQ(serialize_safetensors(std::vector<NamedArray>{{"attn0", array(v, Shape{1, 1, 2, 3})}}),
            le64(72) + odd + std::string(7, ' ') + data);
}

TEST(Safetensors, DataIsAlignedByElementSize) {
  const std::vector<NamedArray> t{{"a_u8", random_array({3}, DType::u8, 1, 0, 9)},
                                  {"b_f64", random_array({2}, DType::f64, 2)},
                                  {"c_bf16", random_array({3}, DType::bf16, 3)},
                                  {"d_i32", random_array({1}, DType::i32, 4, 0, 9)}};
  const std::string bytes = serialize_safetensors(t);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const SafetensorsHeader h = parse_safetensors_header(std::string_view(bytes).substr(8, n), bytes.size() - 8 - n, "x");
  for (const SafetensorsEntry& e : h.tensors) EXPECT_EQ(e.begin % itemsize(e.dtype), 0u) << e.name;
  EXPECT_EQ(h.tensors.front().name, "b_f64");
  expect_same(t, read_image(bytes));
}

TEST(Safetensors, ReadsFilesFromOtherWriters) {
  // Entries in any order, unpadded header, whitespace, metadata first or last.
  std::string data(12, '\0');
  const int32_t a[2] = {7, -8};
  const uint16_t b[2] = {0x3F80, 0xC000};  // bf16 1.0, -2.0
  std::memcpy(data.data(), b, 4);
  std::memcpy(data.data() + 4, a, 8);
  const std::string header =
      "{ \"a\" : {\"data_offsets\": [4, 12], \"shape\": [2], \"dtype\": \"I32\"},\n"
      "  \"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
      "  \"__metadata__\": {\"format\": \"pt\"} }\n\t ";
  const SafetensorsContents c = read_image(image(header, data));
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].name, "b");  // data order
  EXPECT_TRUE(testing::all_close(c.tensors[0].array, {1.0, -2.0}));
  EXPECT_EQ(c.tensors[1].array.to_vector<int32_t>(), (std::vector<int32_t>{7, -8}));
  EXPECT_EQ(c.metadata.at("format"), "pt");
}

TEST(Safetensors, WriterRejectsBadNames) {
  const Array x = random_array({2}, DType::f32, 1);
  EXPECT_PAX_ERROR(serialize_safetensors(std::vector<NamedArray>{{"a", x}, {"a", x}}), "two tensors are named 'a'");
  EXPECT_PAX_ERROR(serialize_safetensors(std::vector<NamedArray>{{"__metadata__", x}}), "__metadata__");
}

// ---- malformed files: one test per case ----

const std::string kGoodHeader = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(SafetensorsMalformed, FileShorterThanTheLengthField) {
  EXPECT_PAX_ERROR(read_image("abcde", "short.safetensors"),
                   "safetensors file 'short.safetensors': the file is 5 bytes");
}

TEST(SafetensorsMalformed, HeaderLengthPastTheEnd) {
  const std::string bytes = le64(1000) + kGoodHeader + std::string(8, '\0');
  EXPECT_PAX_ERROR(read_image(bytes, "len.safetensors"), "'len.safetensors': header length 1000 runs past the end");
}

TEST(SafetensorsMalformed, HeaderOver100MB) {
  const std::string bytes = le64(100'000'001) + kGoodHeader;
  EXPECT_PAX_ERROR(read_image(bytes, "big.safetensors"),
                   "'big.safetensors': header length 100000001 is over the 100 MB");
  EXPECT_PAX_ERROR(read_image(le64(~uint64_t(0)) + kGoodHeader), "over the 100 MB");
}

TEST(SafetensorsMalformed, NotJson) {
  EXPECT_PAX_ERROR(read_image(image("{\"w\": {\"dtype\": F32}}", ""), "nj.safetensors"),
                   "'nj.safetensors': header: not valid JSON");
  EXPECT_PAX_ERROR(read_image(image("[1, 2]", "")), "does not start with '{'");
  EXPECT_PAX_ERROR(read_image(image("{} {}", "")), "not valid JSON");
  EXPECT_PAX_ERROR(read_image(image(std::string("{\"w\xff\": 1}"), "")), "not valid JSON");  // bad UTF-8
}

TEST(SafetensorsMalformed, DuplicateNames) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_PAX_ERROR(read_image(image(header, std::string(8, '\0')), "dup.safetensors"),
                   "'dup.safetensors': header: duplicate key \"w\"");
  const std::string field = R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_PAX_ERROR(read_image(image(field, std::string(4, '\0'))), "duplicate key \"dtype\" in object \"w\"");
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_PAX_ERROR(read_image(image(header, std::string(12, '\0')), "ov.safetensors"),
                   "'ov.safetensors': tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
}

TEST(SafetensorsMalformed, OutOfRangeOffsets) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  EXPECT_PAX_ERROR(read_image(image(header, std::string(12, '\0')), "oor.safetensors"),
                   "'oor.safetensors': tensor 'b': data_offsets [8, 24] extend past the end of the data (12 bytes)");
  const std::string huge =
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})";
  EXPECT_PAX_ERROR(read_image(image(huge, "")), "tensor 'a': data_offsets [18446744073709551615");
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_PAX_ERROR(read_image(image(header, std::string(12, '\0'))),
                   "tensor 'b': data_offsets [8, 12] leave bytes [4, 8)");
}

TEST(SafetensorsMalformed, TrailingBytes) {
  EXPECT_PAX_ERROR(read_image(image(kGoodHeader, std::string(9, '\0')), "tail.safetensors"),
                   "'tail.safetensors': the data is 9 bytes but the tensors end at 8 (last tensor 'w')");
}

TEST(SafetensorsMalformed, TruncatedFile) {
  TempDir dir;
  const std::vector<NamedArray> t{{"first", random_array({100}, DType::f32, 1)},
                                  {"last", random_array({100}, DType::f32, 2)}};
  write_safetensors(dir / "t.safetensors", t);
  std::string bytes = testing::read_bytes(dir / "t.safetensors");
  testing::write_bytes(dir / "t.safetensors", bytes.substr(0, bytes.size() - 1));
  EXPECT_PAX_ERROR(
      SafetensorsReader(dir / "t.safetensors"),
      "safetensors file '" + (dir / "t.safetensors") + "': tensor 'last': data_offsets [400, 800] extend past");
  testing::write_bytes(dir / "t.safetensors", bytes.substr(0, 20));  // inside the header
  EXPECT_PAX_ERROR(SafetensorsReader(dir / "t.safetensors"), "runs past the end of the file (20 bytes)");
}

TEST(SafetensorsMalformed, OffsetsDisagreeWithShape) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  EXPECT_PAX_ERROR(read_image(image(header, std::string(8, '\0'))),
                   "tensor 'w': data_offsets [0, 8] hold 8 bytes but dtype F32 and shape [3] need 12");
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})";
  EXPECT_PAX_ERROR(read_image(image(header, "")),
                   "tensor 'w': shape [4611686018427387904,4] has more elements than fit");
  const std::string bytes_overflow = R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  EXPECT_PAX_ERROR(read_image(image(bytes_overflow, "")), "has more bytes than fit in 64 bits");
  const std::string empty_but_huge = R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})";
  EXPECT_PAX_ERROR(read_image(image(empty_but_huge, "")), "has more elements than fit");
}

TEST(SafetensorsMalformed, BadShapeValues) {
  for (const char* shape : {"[-1]", "[1.5]", "[\"2\"]", "3", "[9223372036854775808]"}) {
    const std::string header = std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,4]}})";
    EXPECT_PAX_ERROR(read_image(image(header, std::string(4, '\0'))),
                     "tensor 'w': shape must be a list of non-negative");
  }
}

TEST(SafetensorsMalformed, BadOffsetsValues) {
  for (const char* off : {"[0]", "[0,4,8]", "[-4,0]", "[0,4.0]", "{\"a\":1}"}) {
    const std::string header = std::string(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)") + off + "}}";
    EXPECT_PAX_ERROR(read_image(image(header, std::string(4, '\0'))), "tensor 'w': data_offsets");
  }
  const std::string reversed = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})";
  EXPECT_PAX_ERROR(read_image(image(reversed, std::string(4, '\0'))), "end before they begin");
}

TEST(SafetensorsMalformed, Dtypes) {
  const std::string foreign = R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_PAX_ERROR(read_image(image(foreign, std::string(1, '\0'))), "tensor 'w': dtype I8 has no paxcc array type");
  const std::string unknown = R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_PAX_ERROR(read_image(image(unknown, std::string(4, '\0'))), "tensor 'w': unknown dtype \"F33\"");
  const std::string number = R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})";
  EXPECT_PAX_ERROR(read_image(image(number, std::string(4, '\0'))), "tensor 'w': dtype must be a string");
}

TEST(SafetensorsMalformed, EntryFields) {
  const std::string extra = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})";
  EXPECT_PAX_ERROR(read_image(image(extra, std::string(4, '\0'))), "tensor 'w': unexpected field \"x\"");
  const std::string missing = R"({"w":{"dtype":"F32","shape":[1]}})";
  EXPECT_PAX_ERROR(read_image(image(missing, std::string(4, '\0'))), "tensor 'w': needs the fields");
  EXPECT_PAX_ERROR(read_image(image(R"({"w":[1,2]})", "")), "tensor 'w': expected an object");
}

TEST(SafetensorsMalformed, Metadata) {
  EXPECT_PAX_ERROR(read_image(image(R"({"__metadata__":{"a":1}})", "")), "__metadata__ entry \"a\" must be a string");
  EXPECT_PAX_ERROR(read_image(image(R"({"__metadata__":[]})", "")), "__metadata__ must be an object");
}

TEST(SafetensorsMalformed, BoolBytesOtherThanZeroOrOne) {
  const std::string header = R"({"m":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,4]}})";
  const std::string data("\x01\x00\x02\x01", 4);
  EXPECT_PAX_ERROR(read_image(image(header, data), "b.safetensors"),
                   "'b.safetensors': tensor 'm': element 2 of a BOOL tensor is byte 2");
  TempDir dir;
  testing::write_bytes(dir / "b.safetensors", image(header, data));
  SafetensorsReader reader(dir / "b.safetensors");
  EXPECT_PAX_ERROR(reader.read(reader.header().tensors[0]), "tensor 'm': element 2 of a BOOL tensor is byte 2");
  const std::string ok("\x01\x00\x00\x01", 4);
  EXPECT_EQ(read_image(image(header, ok)).tensors[0].array.to_vector<bool>(),
            (std::vector<bool>{true, false, false, true}));
}

TEST(SafetensorsMalformed, DeepNesting) {
  const std::string deep = "{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_PAX_ERROR(read_image(image(deep, "")), "nested deeper than");
}

}  // namespace
}  // namespace pax::train

// Corpus record files (record_files.h): TFRecord framing, the few protobuf
// fields of a tf.Example that hold its features, JSON lines and globs.
#include "pax/data/record_files.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "pax/core/crc32c.h"
#include "pax/core/error.h"
#include "pax/data/file_io.h"

namespace pax::data {
namespace {

uint64_t read_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Protobuf's wire format, as far as tf.Example needs it: a cursor over one
// message's fields.
class Fields {
 public:
  explicit Fields(std::string_view bytes) : p_(bytes) {}
  // The next field's number and wire type; false at the end.
  bool next(uint32_t& number, uint32_t& wire) {
    if (p_.empty()) return false;
    const uint64_t tag = varint();
    number = uint32_t(tag >> 3);
    wire = uint32_t(tag & 7);
    return true;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    PAX_CHECK(n <= p_.size(), "a length of ", n, " bytes runs past the message's end");
    std::string_view out = p_.substr(0, size_t(n));
    p_.remove_prefix(size_t(n));
    return out;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1: advance(8); return;
      case 2: bytes(); return;
      case 5: advance(4); return;
      default: PAX_FAIL("wire type ", wire, " is not one protobuf writes");
    }
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      PAX_CHECK(!p_.empty(), "a varint runs past the message's end");
      const auto byte = static_cast<unsigned char>(p_[0]);
      p_.remove_prefix(1);
      v |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
    PAX_FAIL("a varint longer than 10 bytes");
  }
  void advance(size_t n) {
    PAX_CHECK(n <= p_.size(), "a fixed-width field runs past the message's end");
    p_.remove_prefix(n);
  }
  std::string_view p_;
};

// tf.Example: features (1) -> Features: feature (1, repeated map entries of
// key (1) and Feature (2)) -> Feature: bytes_list (1) / float_list (2) /
// int64_list (3) -> BytesList: value (1, repeated bytes).
std::optional<std::string> find_bytes_feature(std::string_view example, const std::string& name) {
  uint32_t number = 0, wire = 0;
  for (Fields ex(example); ex.next(number, wire);) {
    if (number != 1 || wire != 2) {
      ex.skip(wire);
      continue;
    }
    const std::string_view features = ex.bytes();
    for (Fields fs(features); fs.next(number, wire);) {
      if (number != 1 || wire != 2) {
        fs.skip(wire);
        continue;
      }
      std::string_view key, feature;
      bool has_feature = false;
      const std::string_view entry = fs.bytes();
      for (Fields e(entry); e.next(number, wire);) {
        if (number == 1 && wire == 2) {
          key = e.bytes();
        } else if (number == 2 && wire == 2) {
          feature = e.bytes();
          has_feature = true;
        } else {
          e.skip(wire);
        }
      }
      if (key != name || !has_feature) continue;
      for (Fields f(feature); f.next(number, wire);) {
        if (wire != 2) {
          f.skip(wire);
          continue;
        }
        PAX_CHECK(number == 1, "feature '", name, "' is a ", number == 2 ? "float" : "int64",
                  " list, not the bytes list of a text");
        const std::string_view list = f.bytes();
        for (Fields values(list); values.next(number, wire);) {
          if (number == 1 && wire == 2) return std::string(values.bytes());
          values.skip(wire);
        }
        return std::string();  // an empty bytes list: an empty document
      }
      PAX_FAIL("feature '", name, "' holds no list");
    }
  }
  return std::nullopt;
}

}  // namespace

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

void append_tfrecord(std::string& out, std::string_view data) {
  std::string len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, mask_crc32c(crc32c(len.data(), len.size())), 4);
  out.append(data);
  put_le(out, mask_crc32c(crc32c(data.data(), data.size())), 4);
}

RecordFormat record_format(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  if (ends_with(name, ".jsonl") || ends_with(name, ".json")) return RecordFormat::json_lines;
  if (name.find("tfrecord") != std::string::npos) return RecordFormat::tfrecord;
  return RecordFormat::text;
}

std::vector<std::string_view> tfrecord_records(std::string_view bytes, const std::string& file, bool skip_bad,
                                               BadRecords& bad) {
  std::vector<std::string_view> records;
  auto fail = [&](size_t at, const std::string& what) {
    const std::string why = "TFRecord file '" + file + "', record " + std::to_string(records.size()) + " (byte " +
                            std::to_string(at) + "): " + what;
    PAX_CHECK(skip_bad, why, " (set skip_bad_records=true to leave bad records out)");
    if (bad.count++ == 0) bad.first = why;
  };
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      fail(at, "the file ends inside a record's header (12 bytes: length and its CRC)");
      break;
    }
    const uint64_t length = read_le(bytes.data() + at, 8);
    const uint32_t length_crc = uint32_t(read_le(bytes.data() + at + 8, 4));
    if (unmask_crc32c(length_crc) != crc32c(bytes.data() + at, 8)) {
      fail(at, "the length's CRC does not match (not a TFRecord file, or damaged); the rest of the file is lost");
      break;
    }
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) {
      fail(at, "the file ends inside a record of " + std::to_string(length) + " bytes (cut short?)");
      break;
    }
    const std::string_view data = bytes.substr(at + 12, size_t(length));
    const uint32_t data_crc = uint32_t(read_le(bytes.data() + at + 12 + length, 4));
    at += 12 + size_t(length) + 4;
    if (unmask_crc32c(data_crc) != crc32c(data.data(), data.size())) {
      fail(at - length - 16, "the data's CRC does not match (damaged)");
      continue;
    }
    records.push_back(data);
  }
  return records;
}

std::optional<std::string> example_bytes_feature(std::string_view example, const std::string& name) {
  try {
    return find_bytes_feature(example, name);
  } catch (const Error& e) {
    PAX_FAIL("not a tf.Example: ", e.what());
  }
}

std::vector<std::string> read_record_documents(const std::string& path, RecordFormat format, const std::string& field,
                                               bool skip_bad, BadRecords& bad) {
  auto left_out = [&](const std::string& why) {
    PAX_CHECK(skip_bad, why, " (set skip_bad_records=true to leave bad records out)");
    if (bad.count++ == 0) bad.first = why;
  };
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const Error& e) {
    if (!skip_bad) throw;
    left_out(std::string("the whole file: ") + e.what());
    return {};
  }
  std::vector<std::string> docs;
  if (format == RecordFormat::tfrecord) {
    const std::vector<std::string_view> records = tfrecord_records(bytes, path, skip_bad, bad);
    for (size_t i = 0; i < records.size(); ++i) {
      const std::string where = "TFRecord file '" + path + "', record " + std::to_string(i);
      try {
        std::optional<std::string> text = example_bytes_feature(records[i], field);
        if (text) {
          docs.push_back(std::move(*text));
        } else {
          left_out(where + ": the tf.Example has no feature '" + field + "' (set text_field to its text feature)");
        }
      } catch (const Error& e) {
        if (!skip_bad) PAX_FAIL(where, ": ", e.what());
        left_out(where + ": " + e.what());
      }
    }
    return docs;
  }
  PAX_CHECK(format == RecordFormat::json_lines, "read_record_documents: '", path, "' is not a record file");
  size_t line_start = 0;
  for (int64_t line = 1; line_start < bytes.size(); ++line) {
    size_t end = bytes.find('\n', line_start);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view text = std::string_view(bytes).substr(line_start, end - line_start);
    line_start = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = "JSON-lines file '" + path + "', line " + std::to_string(line);
    const nlohmann::json record = nlohmann::json::parse(text, nullptr, false);
    if (record.is_discarded()) {
      left_out(where + ": not a JSON value");
      continue;
    }
    if (!record.is_object() || !record.contains(field)) {
      left_out(where + ": no field '" + field + "' (set text_field to the field that holds the text)");
      continue;
    }
    if (!record[field].is_string()) {
      left_out(where + ": field '" + field + "' is " + record[field].type_name() + ", not a string");
      continue;
    }
    docs.push_back(record[field].get<std::string>());
  }
  return docs;
}

std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& p : patterns) {
    check_local_path(p, "the data file");
    if (p.find_first_of("*?[") == std::string::npos) {
      files.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = glob(p.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    PAX_CHECK(!matches.empty(), "the file pattern '", p, "' matches no file");
    std::sort(matches.begin(), matches.end());
    files.insert(files.end(), matches.begin(), matches.end());
  }
  return files;
}

}  // namespace pax::data

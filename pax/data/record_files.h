// The corpus files a Pax user has: JSON lines (one {"text": ...} object per
// line, as C4's c4-train.*.json.gz shards) and TFRecord files of tf.Example
// (TFDS's c4-train.tfrecord-*-of-01024 shards, the text as a bytes feature),
// plain or gzip-compressed, named one by one or by shard patterns and globs.
// Each record is one document. Every TFRecord record's framing is checked
// (its length and data against their masked CRC-32C); a bad record, a
// truncated gzip member or a record without its field is an error naming
// the file, the record and what was expected, or, with skip_bad, counted and
// left out.
//
// TFRecord framing (also what TensorBoard's event files are):
//   u64 length (little endian) | u32 masked CRC of those 8 bytes | data | u32 masked CRC of data
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pax::data {

// TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so
// that a CRC stored beside the data it covers does not checksum to a fixed value.
uint32_t mask_crc32c(uint32_t crc);
uint32_t unmask_crc32c(uint32_t masked);

// Appends one framed record to `out`.
void append_tfrecord(std::string& out, std::string_view data);

enum class RecordFormat { text, json_lines, tfrecord };

// By the file's name: .jsonl / .json (optionally .gz) are JSON lines, a name
// with "tfrecord" in it TFRecord, anything else text.
RecordFormat record_format(const std::string& path);

// What reading records left out (skip_bad) and the first reason.
struct BadRecords {
  int64_t count = 0;
  std::string first;
};

// The records of a TFRecord file's bytes, views into `bytes`. A record whose
// data CRC is wrong is skipped on its own; a wrong length (or its CRC) loses
// the framing, and the rest of the file is skipped as one bad record.
std::vector<std::string_view> tfrecord_records(std::string_view bytes, const std::string& file, bool skip_bad,
                                               BadRecords& bad);

// The first value of bytes feature `name` of a serialized tf.Example;
// nullopt when it has no such feature. pax::Error when the bytes are not a
// tf.Example or the feature is not a bytes list.
std::optional<std::string> example_bytes_feature(std::string_view example, const std::string& name);

// The documents of one corpus file: the lines of a JSON-lines file's `field`
// (a string), or the `field` bytes feature of a TFRecord file's tf.Examples.
std::vector<std::string> read_record_documents(const std::string& path, RecordFormat format, const std::string& field,
                                               bool skip_bad, BadRecords& bad);

// The files of `patterns`: a name with * ? or [ is a glob (sorted matches;
// TFDS's c4-train.tfrecord-*-of-01024 is one); others are kept as given.
// pax::Error naming a pattern that matches no file.
std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns);

}  // namespace pax::data

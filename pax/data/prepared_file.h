// Files paxcc prepares from a source it can read again (the KJV text from the
// `bible` command, SentencePiece models trained on it or on an input's own
// files) carry a record beside them, <file>.crc32: one line of JSON,
//
//   {"size": 4306134, "crc32": "8c1e02a7"}
//
// the file's size in bytes and the CRC-32 (zlib's) of its bytes, written
// atomically after the file itself is complete. A prepared file that does not
// match its record — a model cut short, bytes written over the text — or has
// none (prepared before records existed, or edited by hand) is prepared again
// from its source, with one notice on stderr naming it, so that training,
// evaluation and decoding never run on damaged data. Files paxcc did not
// prepare (a user's model path) have no record and are read as they are; one
// that has a record it does not match, and that cannot be prepared again
// where it is read, is an error naming it.
//
// Processes that prepare the same file at once (every rank under mpirun
// builds its inputs) take turns on an exclusive lock, <file>.lock, and look
// at the file again once they hold it: one prepares, the others read its work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pax::data {

struct FileRecord {
  uint64_t size = 0;
  uint32_t crc32 = 0;
  bool operator==(const FileRecord&) const = default;
};

// The record of `bytes`.
FileRecord file_record_of(std::string_view bytes);
// Where the record of `path` lives: path + ".crc32".
std::string record_path(const std::string& path);

// Writes `bytes` to `path`, then its record, each atomically (a reader that
// finds the record finds the whole file before it).
void write_prepared_file(const std::string& path, std::string_view bytes);

// What is wrong with the prepared file `path`: "" when it matches its record;
// otherwise why not ("is missing", "has no record <path>.crc32", "is 10 bytes
// where its record says 20", "has CRC-32 ... where its record says ...").
std::string prepared_file_problem(const std::string& path);

// Makes sure `path` is there and matches its record, and returns it. When it
// is missing, `make()` returns its bytes (written with write_prepared_file);
// when it is damaged, the same, after the notice
//   paxcc: <path> <problem>; preparing it again from <source>
// on stderr. An error while preparing it again is rethrown naming the file. A
// file without a record (made before records were kept) is taken as it is and
// recorded, with one notice: preparing it again could change it.
std::string ensure_prepared_file(const std::string& path, const std::string& source,
                                 const std::function<std::string()>& make);

// For a file read where it cannot be prepared again (a model given by its
// path): throws pax::Error naming it when it has a record it does not match;
// a file without a record passes (it is not one paxcc prepared).
void check_against_record(const std::string& path, const std::string& what);

}  // namespace pax::data

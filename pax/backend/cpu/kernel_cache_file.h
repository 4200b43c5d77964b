// Files of the kernel cache (native_compiler.h) read and written without
// trusting what is found there, and the record that vouches for a library.
//
// The cache is a directory that anything may have touched: a torn copy, a
// full disk, a FIFO, a device or a symbolic link can stand in place of an
// entry. dlopen of a library cut short maps pages past its end and dies of
// SIGBUS on the compiler thread, and any open() of a FIFO blocks until a
// writer comes. So a file is opened only after lstat finds a regular file,
// with O_NOFOLLOW | O_NONBLOCK (a FIFO swapped in between cannot block the
// open) and a second check on the descriptor; and a library is loaded only
// when its size and checksum are those of its record, written when it was
// built and renamed into place after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pax::cpu {

// A 64-bit checksum of `bytes` (a multiply-xorshift over 8-byte words): a
// change confined to one word always changes it.
uint64_t kernel_cache_checksum(std::string_view bytes);

// The bytes of `path` when it is a regular file (not a symbolic link) of at
// most `max_bytes`; otherwise std::nullopt and, in *why, what was found, as a
// predicate to follow the path ("does not exist", "is a FIFO (named pipe),
// not a regular file", "is larger than 1024 bytes").
std::optional<std::string> read_kernel_cache_file(const std::string& path, size_t max_bytes, std::string* why);

// Writes `bytes` to `path` as a new regular file (anything already there that
// is not a regular file is removed first, never opened); false and *why when
// it cannot be written.
bool write_kernel_cache_file(const std::string& path, std::string_view bytes, std::string* why);

// The record of a library built for `key`: one line with its size and
// checksum.
std::string kernel_library_record(const std::string& key, std::string_view library);

// "" when `library_path` is a regular file whose size and checksum are those
// that the record at `record_path` gives for `key`; otherwise what is wrong,
// as a predicate to follow the library's path ("is 70000 bytes where its
// record says 1843200", "has no checksum record (<path> does not exist)").
std::string check_kernel_library(const std::string& library_path, const std::string& record_path,
                                 const std::string& key);

// Removes whatever stands at `path` (a file, a FIFO, a link, an empty
// directory); true when nothing is left there, else false and *why.
bool remove_kernel_cache_file(const std::string& path, std::string* why);

// Why directory `dir` cannot take new entries ("" when it can), creating
// it first.
std::string kernel_cache_dir_unwritable(const std::string& dir);

// Prints "paxcc: <text>" to stderr once per process and key.
void notice_once(const std::string& key, const std::string& text);

}  // namespace pax::cpu

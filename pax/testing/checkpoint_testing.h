// Test helpers for the checkpoint suites: temporary directories (one per
// process, or process 0's shared by the group), a tree with
// every dtype and every kind of node, bit-exact tree comparison, and raw file
// edits for corruption tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/testing/testing.h"

namespace pax::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/paxcc_ckpt_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Process 0's temporary directory, seen by every process of the group;
// removed once every process is done with it.
class SharedDir {
 public:
  SharedDir() {
    if (dist::process_index() == 0) own_.emplace();
    path_ = dist::broadcast_string(own_ ? own_->path() : "");
  }
  ~SharedDir() { dist::process_group().barrier(); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::optional<TempDir> own_;
  std::string path_;
};

// Every dtype, a 0-d array, a zero-size array, None, an empty dict, an empty
// list and nesting; values depend on `seed`.
inline Tree every_kind_tree(uint32_t seed) {
  Tree t = Tree::dict({
      {"params", Tree::dict({{"w", random_array({3, 4}, DType::f32, seed)},
                             {"b", random_array({4}, DType::bf16, seed + 1)},
                             {"h", random_array({2, 2}, DType::f16, seed + 2)},
                             {"d", random_array({5}, DType::f64, seed + 3)}})},
      {"count", scalar(int32_t(int32_t(seed) * 7 - 3))},
      {"big", random_array({2, 3}, DType::i64, seed + 4, -1e12, 1e12)},
      {"bytes", random_array({6}, DType::u8, seed + 5, 0, 255)},
      {"mask", from_host(std::vector<uint8_t>{1, 0, uint8_t(seed & 1), 1}.data(), Shape{2, 2}, DType::bool_)},
      {"ids", random_array({3}, DType::u32, seed + 7, 0, 4e9)},
      {"scalar_bf16", scalar(bf16(1.5f + float(seed)))},
      {"empty", random_array({0, 3}, DType::f32, seed + 8)},
      {"none", Tree()},
      {"no_keys", Tree::dict()},
      {"no_items", Tree::list()},
      {"layers", Tree::list({Tree::dict({{"k", random_array({2}, DType::i32, seed + 9, -100, 100)}}), Tree(),
                             Tree::list({random_array({1, 1, 1}, DType::f32, seed + 10)})})},
  });
  return t;
}

// Same structure, dtypes, shapes, weak types and bytes.
inline ::testing::AssertionResult trees_identical(const Tree& a, const Tree& b) {
  const std::string diff = tree_structure_diff(a, b);
  if (!diff.empty()) return ::testing::AssertionFailure() << "structures differ " << diff;
  const std::vector<Array> la = tree_leaves(a), lb = tree_leaves(b);
  const std::vector<std::string> paths = tree_paths(a);
  for (size_t i = 0; i < la.size(); ++i) {
    if (la[i].aval() != lb[i].aval()) {
      return ::testing::AssertionFailure() << paths[i] << ": " << la[i].aval().str() << " vs " << lb[i].aval().str()
                                           << " (weak " << la[i].weak_type() << " vs " << lb[i].weak_type() << ")";
    }
    if (la[i].nbytes() > 0 && std::memcmp(la[i].data(), lb[i].data(), la[i].nbytes()) != 0) {
      return ::testing::AssertionFailure() << paths[i] << ": values differ";
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace pax::testing

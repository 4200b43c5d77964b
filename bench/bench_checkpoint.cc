// Checkpoint throughput and training-loop blocking time, for a 100 MiB tree
// (25 f32 arrays of 1024 x 1024):
//   BM_Save              save_checkpoint, synchronous (write, fsync, commit, prune)
//   BM_RestoreWarm       restore_checkpoint with the files in the page cache
//   BM_RestoreCold       the same after evicting the files from the page cache
//   BM_Blocked/sync      how long a save blocks the caller when synchronous
//   BM_Blocked/async_ref ... when asynchronous, holding references to the arrays
//   BM_Blocked/async_copy ... when asynchronous after copying the arrays
// The blocked times exclude waiting for a previous save: a training loop that
// saves less often than a write takes never waits.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "pax/core/tree.h"
#include "pax/train/checkpoint.h"

namespace {

using namespace pax;
using namespace pax::train;

constexpr int kLeaves = 25;
constexpr int64_t kRows = 1024, kCols = 1024;

Tree big_tree() {
  Tree::Dict d;
  std::vector<float> v(size_t(kRows * kCols));
  for (int i = 0; i < kLeaves; ++i) {
    for (size_t j = 0; j < v.size(); ++j) v[j] = float(i) + float(j % 1000) * 1e-3f;
    d.emplace_back("w" + std::to_string(i), array(v, Shape{kRows, kCols}));
  }
  return Tree::dict(std::move(d));
}

int64_t tree_bytes(const Tree& t) {
  int64_t n = 0;
  for (const Array& a : tree_leaves(t)) n += int64_t(a.nbytes());
  return n;
}

std::string make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/paxcc_bench_ckpt_XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) std::abort();
  return templ;
}

// Drops a checkpoint's files from the page cache (they are clean after fsync).
void evict(const std::string& path) {
  for (const auto& e : std::filesystem::directory_iterator(path)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
}

void BM_Save(benchmark::State& state) {
  const Tree tree = big_tree();
  const std::string dir = make_temp_dir();
  int64_t step = 0;
  for (auto _ : state) save_checkpoint(dir, tree, step++, {.keep = 1});
  state.SetBytesProcessed(state.iterations() * tree_bytes(tree));
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Save)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

void restore_bench(benchmark::State& state, bool cold) {
  const Tree tree = big_tree();
  const std::string dir = make_temp_dir();
  const std::string path = save_checkpoint(dir, tree, 1);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict(path);
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(restore_checkpoint(dir, tree));
  }
  state.SetBytesProcessed(state.iterations() * tree_bytes(tree));
  std::filesystem::remove_all(dir);
}
void BM_RestoreWarm(benchmark::State& state) { restore_bench(state, false); }
void BM_RestoreCold(benchmark::State& state) { restore_bench(state, true); }
BENCHMARK(BM_RestoreWarm)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);
BENCHMARK(BM_RestoreCold)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

Tree copy_tree(const Tree& t) {
  return tree_map([](const Array& a) { return from_host(a.data(), a.shape(), a.dtype()); }, t);
}

// 0: sync, 1: async holding references, 2: async after a copy.
void BM_Blocked(benchmark::State& state) {
  const int mode = int(state.range(0));
  const Tree tree = big_tree();
  const std::string dir = make_temp_dir();
  AsyncManager async;
  int64_t step = 0;
  for (auto _ : state) {
    if (mode == 0) {
      save_checkpoint(dir, tree, step++, {.keep = 1});
    } else {
      const Tree snapshot = mode == 2 ? copy_tree(tree) : tree;
      save_checkpoint(dir, snapshot, step++, {.keep = 1, .async_manager = &async});
    }
    state.PauseTiming();
    async.wait_previous_save();  // outside the measured time: the loop goes on training meanwhile
    state.ResumeTiming();
  }
  state.SetLabel(mode == 0 ? "sync" : mode == 1 ? "async_ref" : "async_copy");
  std::filesystem::remove_all(dir);
}
// A fixed count: the measured part of an async save is ~1000x shorter than the
// paused wait, so a minimum measured time would take hours of writing.
BENCHMARK(BM_Blocked)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(30);

}  // namespace

BENCHMARK_MAIN();

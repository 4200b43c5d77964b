// parallel_for (and parallel_for_dynamic) across threads: an exception
// thrown by a chunk on a worker thread reaches the caller (it would otherwise
// end the process), the other chunks still finish, and the workers see the
// caller's AllocationPurpose, so that a failed operator new there is recorded
// with its size and purpose.
#include "pax/core/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "pax/core/buffer.h"
#include "pax/core/error.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

constexpr size_t kImpossible = size_t(1) << 62;  // 4.6 EB: no machine gives it

// Two OpenMP threads for the test's duration; chunk c of a static schedule
// over two chunks then runs on thread c.
class TwoThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(2);
  }
  void TearDown() override { omp_set_num_threads(saved_); }

 private:
  int saved_ = 1;
};

TEST_F(TwoThreads, AnExceptionOnAWorkerReachesTheCaller) {
  // The worker throws while the caller's chunk is running; that chunk still
  // runs to its end.
  std::atomic<bool> caller_started{false}, worker_throwing{false};
  std::vector<int> thread_of_chunk(2, -1);
  EXPECT_PAX_ERROR(parallel_for(2, 1,
                                [&](int64_t begin, int64_t) {
                                  if (omp_get_thread_num() == 1) {
                                    while (!caller_started) {
                                    }
                                    thread_of_chunk[size_t(begin)] = 1;
                                    worker_throwing = true;
                                    PAX_FAIL("chunk ", begin, " failed on a worker");
                                  }
                                  caller_started = true;
                                  while (!worker_throwing) {
                                  }
                                  thread_of_chunk[size_t(begin)] = omp_get_thread_num();
                                }),
                   "chunk 1 failed on a worker");
  EXPECT_EQ(thread_of_chunk, (std::vector<int>{0, 1}));
}

TEST_F(TwoThreads, TheFirstOfSeveralExceptionsIsRethrownAndLaterChunksAreSkipped) {
  std::atomic<int> ran{0};
  try {
    parallel_for(1000, 1, [&](int64_t begin, int64_t) {
      ++ran;
      throw std::runtime_error("chunk " + std::to_string(begin));
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("chunk ", 0), 0u) << e.what();
  }
  // Each thread stops at its first failure.
  EXPECT_LE(ran.load(), 2);
  EXPECT_GE(ran.load(), 1);
}

TEST_F(TwoThreads, WorkersSeeTheCallersAllocationPurpose) {
  std::vector<std::string> seen(2);
  {
    const AllocationPurpose outer("training step 7");
    const AllocationPurpose inner("the input batches");
    parallel_for(2, 1, [&](int64_t begin, int64_t) { seen[size_t(begin)] = AllocationPurpose::describe_current(); });
  }
  EXPECT_EQ(seen[0], "for the input batches (while training step 7)");
  EXPECT_EQ(seen[1], "for the input batches (while training step 7)");
  // Once the loop is over, the workers' own (none) is back.
  parallel_for(2, 1, [&](int64_t begin, int64_t) { seen[size_t(begin)] = AllocationPurpose::describe_current(); });
  EXPECT_EQ(seen[1], "");
}

TEST_F(TwoThreads, AFailedOperatorNewOnAWorkerRecordsItsSizeAndTheCallersPurpose) {
  bool thrown = false;
  int failed_on = -1;
  {
    const AllocationPurpose outer("training step 7");
    const AllocationPurpose purpose("tokenizing the documents");
    try {
      parallel_for(2, 1, [&](int64_t, int64_t) {
        if (omp_get_thread_num() != 1) return;
        failed_on = omp_get_thread_num();
        // A call, not a new-expression, which the compiler may elide.
        void* p = ::operator new(kImpossible + 64);
        ::operator delete(p);
      });
    } catch (const std::bad_alloc&) {
      thrown = true;
    }
  }
  EXPECT_TRUE(thrown);
  EXPECT_EQ(failed_on, 1);
  EXPECT_EQ(failed_allocation_bytes(), kImpossible + 64);
  EXPECT_EQ(failed_allocation_purpose(), "tokenizing the documents (while training step 7)");
}

// The dynamic schedule: every chunk runs once, with its own bounds, when one
// thread is held up (the other takes the chunks it would have had), and an
// exception reaches the caller as with the static one.
TEST_F(TwoThreads, DynamicChunksRunOnceEachAndAFreeThreadTakesTheRest) {
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  if (team < 2) GTEST_SKIP() << "OpenMP gives this process " << team << " thread(s); the test needs 2";
  std::vector<std::atomic<int>> runs(101);
  std::vector<int> thread_of_chunk(101, -1);
  std::atomic<bool> others_done{false};
  std::atomic<int> done{0};
  parallel_for_dynamic(1010, 10, [&](int64_t begin, int64_t end) {
    const size_t c = size_t(begin / 10);
    EXPECT_EQ(end, std::min<int64_t>(begin + 10, 1010));
    ++runs[c];
    thread_of_chunk[c] = omp_get_thread_num();
    if (c == 0) {  // the first chunk waits until every other chunk has run (10 s at most)
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!others_done && std::chrono::steady_clock::now() < limit) {
      }
    }
    if (++done == 100) others_done = true;
  });
  for (size_t c = 0; c < runs.size(); ++c) EXPECT_EQ(runs[c].load(), 1) << "chunk " << c;
  // The thread holding chunk 0 ran no other: the other thread took them all.
  for (size_t c = 1; c < runs.size(); ++c) EXPECT_NE(thread_of_chunk[c], thread_of_chunk[0]) << "chunk " << c;
  EXPECT_PAX_ERROR(parallel_for_dynamic(8, 1,
                                        [&](int64_t begin, int64_t) {
                                          if (begin == 5) PAX_FAIL("chunk ", begin, " failed");
                                        }),
                   "chunk 5 failed");
}

TEST(ParallelFor, OneThreadRunsTheChunksInOrderAndPassesExceptionsOn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<int64_t> begins;
  EXPECT_PAX_ERROR(parallel_for(10, 3,
                                [&](int64_t begin, int64_t end) {
                                  begins.push_back(begin);
                                  if (end == 9) PAX_FAIL("chunk [", begin, ", ", end, ") failed");
                                }),
                   "chunk [6, 9) failed");
  omp_set_num_threads(saved);
  EXPECT_EQ(begins, (std::vector<int64_t>{0, 3, 6}));
}

}  // namespace
}  // namespace pax

// save_checkpoint_multiprocess: as one process it is save_checkpoint; under
// `mpirun -np 2` (ctest train_mpirun_checkpoint_multiprocess) process 0
// alone writes its target, no process returns before the commit, and an
// error (process 0's, or processes naming different checkpoints) is thrown
// on every process.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/ops/numpy.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"

namespace pax::train {
namespace {

using dist::process_count;
using dist::process_index;
using testing::SharedDir;

// The replica process r passes: its values differ, so that what is restored
// tells whose target was written.
Tree replica(int r, int64_t n = 4) { return Tree::dict({{"w", full({n}, float(r + 1))}}); }

bool all_equal(const Tree& t, float value) {
  const std::vector<float> v = t["w"].leaf().to_vector<float>();
  return std::all_of(v.begin(), v.end(), [&](float x) { return x == value; });
}

TEST(CheckpointMultiprocess, ProcessZeroWritesAndNoProcessReturnsBeforeTheCommit) {
  SharedDir dir;
  const int me = process_index();
  // 16 MiB: process 0 takes a while to write and sync it, so a process that
  // did not wait for the commit would look too early.
  const std::string path = save_checkpoint_multiprocess(dir.path(), replica(me, int64_t(1) << 22), 7);
  EXPECT_EQ(path, dir.path() + "/checkpoint_7");
  EXPECT_TRUE(is_committed_checkpoint(path));
  EXPECT_TRUE(all_equal(restore_checkpoint(dir.path(), Tree()), 1.0f));
  // flax's options work as in save_checkpoint: keep, float steps.
  save_checkpoint_multiprocess(dir.path(), replica(me), 7.5, {.keep = 1});
  EXPECT_EQ(available_float_steps(dir.path()), (std::vector<double>{7.5}));
  EXPECT_TRUE(all_equal(restore_checkpoint(dir.path(), Tree()), 1.0f));
}

TEST(CheckpointMultiprocess, ErrorsReachEveryProcess) {
  SharedDir dir;
  const int me = process_index();
  save_checkpoint_multiprocess(dir.path(), replica(me), 3);
  EXPECT_PAX_ERROR(save_checkpoint_multiprocess(dir.path(), replica(me), 2),
                   "step 2 is older than the latest checkpoint (step 3)");
  AsyncManager async;
  if (process_count() == 1) {
    // One process: save_checkpoint itself, async_manager included.
    save_checkpoint_multiprocess(dir.path(), replica(me), 4, {.keep = 5, .async_manager = &async});
    async.wait_previous_save();
    EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{3, 4}));
    return;
  }
  EXPECT_PAX_ERROR(save_checkpoint_multiprocess(dir.path(), replica(me), 10 + me),
                   "every process must save the same checkpoint; process(es) 1 differ from process 0 (ckpt_dir '" +
                       dir.path() + "', step 10, prefix 'checkpoint_')");
  EXPECT_PAX_ERROR(save_checkpoint_multiprocess(dir.path(), replica(me), 4, {.async_manager = &async}),
                   "async_manager works for a single process only");
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{3}));
}

}  // namespace
}  // namespace pax::train

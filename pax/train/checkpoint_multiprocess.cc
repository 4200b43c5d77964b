// save_checkpoint_multiprocess: flax's multi-process save on top of the
// process group. Process 0 writes; the others wait for its commit.
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/train/checkpoint.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

// Throws on every process when one of them names another checkpoint than
// process 0 does (a per-process directory or step would make process 0's
// save the only one, silently).
void check_same_checkpoint(dist::ProcessGroup& group, const std::string& ckpt_dir, const CheckpointStep& step,
                           const SaveCheckpointOptions& options) {
  const std::string mine = "ckpt_dir '" + ckpt_dir + "', step " + step.str() + ", prefix '" + options.prefix + "'" +
                           (options.async_manager ? ", an async_manager" : "");
  const std::string chief = dist::broadcast_string(mine);
  const std::vector<int32_t> differs = group.all_gather(scalar(int32_t(mine != chief ? 1 : 0))).to_vector<int32_t>();
  std::string ranks;
  for (size_t r = 0; r < differs.size(); ++r)
    if (differs[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  PAX_CHECK(ranks.empty(), "save_checkpoint_multiprocess: every process must save the same checkpoint; process(es) ",
            ranks, " differ from process 0 (", chief, ")", mine != chief ? "; this process has " + mine : "");
}

}  // namespace

std::string save_checkpoint_multiprocess(const std::string& ckpt_dir, const Tree& target, CheckpointStep step,
                                         const SaveCheckpointOptions& options) {
  dist::ProcessGroup& group = dist::process_group();
  if (group.process_count() == 1) return save_checkpoint(ckpt_dir, target, step, options);
  check_same_checkpoint(group, ckpt_dir, step, options);
  PAX_CHECK(options.async_manager == nullptr,
            "save_checkpoint_multiprocess: async_manager works for a single process only (flax: \"only works for "
            "single host\"); with ",
            group.process_count(), " processes the save is synchronous, so pass async_manager = nullptr");
  // run_on_root ends with a barrier after process 0's save (write, commit,
  // pruning), then gives its error, if any, to every process.
  dist::run_on_root([&] { save_checkpoint(ckpt_dir, target, step, options); });
  return fs::join(ckpt_dir, checkpoint_dir_name(options.prefix, step, StepNames::flax));
}

}  // namespace pax::train

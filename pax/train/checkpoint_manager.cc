// CheckpointManager: the step list kept in memory (so that should_save and
// latest_step count a save still in flight), orbax's retention rule, and
// saves through the shared write-and-commit layer.
#include "pax/train/checkpoint_manager.h"

#include <algorithm>
#include <memory>

#include "pax/core/error.h"
#include "pax/dist/process_group.h"
#include "pax/train/fs_util.h"

namespace pax::train {

CheckpointManager::CheckpointManager(std::string directory, CheckpointManagerOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  PAX_CHECK(options_.save_interval_steps >= 1, "CheckpointManager: save_interval_steps must be >= 1, got ",
            options_.save_interval_steps);
  PAX_CHECK(!options_.max_to_keep || *options_.max_to_keep >= 1, "CheckpointManager: max_to_keep must be >= 1, got ",
            options_.max_to_keep.value_or(0));
  PAX_CHECK(!options_.keep_period || *options_.keep_period >= 1, "CheckpointManager: keep_period must be >= 1, got ",
            options_.keep_period.value_or(0));
  if (options_.read_only) {
    // A trainer may be writing beside a reader: its tmp_ directory stays.
    if (fs::is_dir(directory_)) steps_ = available_steps(directory_, kDefaultCheckpointPrefix);
    return;
  }
  fs::make_dirs(directory_);
  // Only process 0 cleans up: with sharded saves every process makes a
  // manager, and a late one must not remove a tmp_ directory being written.
  if (dist::process_index() == 0) remove_tmp_checkpoints(directory_, kDefaultCheckpointPrefix);
  steps_ = available_steps(directory_, kDefaultCheckpointPrefix);
}

CheckpointManager::~CheckpointManager() = default;  // async_'s destructor waits

std::optional<int64_t> CheckpointManager::latest_step() const {
  if (steps_.empty()) return std::nullopt;
  return steps_.back();
}

bool CheckpointManager::should_save(int64_t step) const {
  if (!steps_.empty() && step <= steps_.back()) return false;
  return step % options_.save_interval_steps == 0;
}

// orbax: all but the newest max_to_keep go, except multiples of keep_period.
std::vector<int64_t> CheckpointManager::steps_to_remove(int64_t new_step) const {
  std::vector<int64_t> remove;
  if (!options_.max_to_keep) return remove;
  std::vector<int64_t> steps = steps_;
  steps.push_back(new_step);
  const size_t keep = size_t(*options_.max_to_keep);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    if (options_.keep_period && steps[i] % *options_.keep_period == 0) continue;
    remove.push_back(steps[i]);
  }
  return remove;
}

std::optional<std::vector<int64_t>> CheckpointManager::begin_save(int64_t step, const CheckpointSaveArgs& args,
                                                                  const char* what) {
  if (!args.force && !should_save(step)) {
    collect_background_error(/*block=*/false);  // not saving must not hide a failed write
    return std::nullopt;
  }
  PAX_CHECK(!options_.read_only, "CheckpointManager::", what, ": '", directory_,
            "' was opened read-only (for restores)");
  wait_until_finished();
  PAX_CHECK(step >= 0, "CheckpointManager::", what, ": step must be >= 0, got ", step);
  PAX_CHECK(steps_.empty() || step > steps_.back(), "CheckpointManager::", what, ": step ", step,
            " is not newer than the latest checkpoint (step ", steps_.back(), ") in '", directory_, "'");
  return steps_to_remove(step);
}

bool CheckpointManager::save(int64_t step, const CheckpointItems& items, const CheckpointSaveArgs& args) {
  const std::optional<std::vector<int64_t>> to_remove = begin_save(step, args, "save");
  if (!to_remove) return false;
  const std::vector<int64_t>& remove = *to_remove;
  auto prepared = std::make_shared<const PreparedCheckpoint>(prepare_checkpoint(items, step, options_.config_json));
  auto work = [prepared, dir = directory_, remove] {
    write_checkpoint(*prepared, dir, kDefaultCheckpointPrefix);
    for (int64_t s : remove) remove_checkpoint(dir, kDefaultCheckpointPrefix, s);
  };
  // The list is updated now: should_save and latest_step see the save in flight.
  steps_.push_back(step);
  in_flight_step_ = step;
  std::erase_if(steps_, [&](int64_t s) { return std::binary_search(remove.begin(), remove.end(), s); });
  if (options_.async) {
    async_.run(std::move(work));
  } else {
    try {
      work();
    } catch (...) {
      forget_failed_save();
      throw;
    }
  }
  return true;
}

bool CheckpointManager::save_sharded(int64_t step, const CheckpointItems& items, const ItemShardSpecs& specs,
                                     const CheckpointSaveArgs& args) {
  const std::optional<std::vector<int64_t>> to_remove = begin_save(step, args, "save_sharded");
  if (!to_remove) return false;
  const std::vector<int64_t>& remove = *to_remove;
  steps_.push_back(step);
  in_flight_step_ = step;
  std::erase_if(steps_, [&](int64_t s) { return std::binary_search(remove.begin(), remove.end(), s); });
  ShardedSaveOptions o;
  o.config_json = options_.config_json;
  o.crc_chunk_bytes = options_.crc_chunk_bytes;
  o.after_commit = [&] {
    for (int64_t s : remove) remove_checkpoint(directory_, kDefaultCheckpointPrefix, s);
  };
  try {
    save_sharded_checkpoint(directory_, items, specs, step, o);
  } catch (...) {
    forget_failed_save();
    throw;
  }
  return true;
}

void CheckpointManager::wait_until_finished() { collect_background_error(/*block=*/true); }

void CheckpointManager::collect_background_error(bool block) {
  try {
    if (block) {
      async_.wait_previous_save();
    } else {
      async_.rethrow_if_failed();
    }
  } catch (...) {
    forget_failed_save();
    throw;
  }
}

void CheckpointManager::forget_failed_save() {
  // The failed save (and perhaps some of its pruning) did not happen: re-list,
  // or where even that fails, at least drop the step that was not written.
  try {
    steps_ = available_steps(directory_, kDefaultCheckpointPrefix);
  } catch (const Error&) {
    std::erase(steps_, in_flight_step_);
  }
}

std::string CheckpointManager::restore_path(std::optional<int64_t> step) {
  wait_until_finished();
  if (!step) {
    PAX_CHECK(!steps_.empty(), "CheckpointManager::restore: no checkpoint in '", directory_, "'");
    step = steps_.back();
  }
  PAX_CHECK(std::binary_search(steps_.begin(), steps_.end(), *step),
            "CheckpointManager::restore: no checkpoint for step ", *step, " in '", directory_, "'");
  return checkpoint_path_of(directory_, kDefaultCheckpointPrefix, *step);
}

CheckpointItems CheckpointManager::restore(std::optional<int64_t> step, const std::map<std::string, Tree>& targets) {
  return read_checkpoint(restore_path(step), targets);
}

CheckpointItems CheckpointManager::restore_sharded(std::optional<int64_t> step,
                                                   const std::map<std::string, Tree>& targets,
                                                   const ItemShardSpecs& specs) {
  return read_checkpoint_sharded(restore_path(step), targets, specs);
}

}  // namespace pax::train

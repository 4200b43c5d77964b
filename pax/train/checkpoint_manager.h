// CheckpointManager (orbax-style): saves named items every
// save_interval_steps, keeps the newest max_to_keep checkpoints plus every
// keep_period-th step, and restores the latest or a given step. The layout
// on disk is checkpoint.h's (<dir>/checkpoint_<step>/<item>.safetensors,
// <name>.json, metadata.json, commit_success.txt), so the functional API can
// list and read what a manager writes.
//
//   CheckpointManager mgr(workdir + "/checkpoints", {.save_interval_steps = 1000, .max_to_keep = 3,
//                                                    .async = true});
//   if (auto step = mgr.latest_step()) {
//     CheckpointItems r = mgr.restore(*step, {{"model", state}});
//     state = r.trees.at("model");
//     input.set_state(r.json.at("input"));
//   }
//   for (...) {
//     ...
//     mgr.save(step, {.trees = {{"model", state}}, .json = {{"input", input.state()}}});
//   }
//   mgr.wait_until_finished();
//
// Sharded train states (FSDP, see sharded_checkpoint.h): every process
// makes the same manager and the same calls, with its own blocks and specs;
// save_sharded is always synchronous (its commit needs every process), and
// restore_sharded reads just the blocks each process needs, whatever the
// process count and splits of the save:
//
//   mgr.save_sharded(step, {.trees = {{"model", local_state}}}, {{"model", specs}});
//   CheckpointItems r = mgr.restore_sharded(std::nullopt, {{"model", local_target}}, {{"model", specs}});
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pax/train/async_manager.h"
#include "pax/train/checkpoint.h"
#include "pax/train/sharded_checkpoint.h"

namespace pax::train {

struct CheckpointManagerOptions {
  // should_save(step) is true for multiples of this (>= 1).
  int64_t save_interval_steps = 1;
  // Keep only the newest max_to_keep checkpoints (>= 1); nullopt keeps all.
  std::optional<int64_t> max_to_keep;
  // Never remove checkpoints whose step is a multiple of this (>= 1).
  std::optional<int64_t> keep_period;
  // Write on a background thread; save() returns once the arrays are held.
  bool async = false;
  // An experiment config (JSON); its hash is stored in every metadata.json.
  std::string config_json;
  // Sharded saves: the chunk size of the per-chunk CRC32Cs of large blocks.
  uint64_t crc_chunk_bytes = kDefaultCrcChunkBytes;
  // Restores only (eval, decode): the directory is neither created nor
  // cleaned of a trainer's save in progress, and a save throws.
  bool read_only = false;
};

struct CheckpointSaveArgs {
  // Save even when should_save(step) is false (a final or preemption save).
  bool force = false;
};

class CheckpointManager {
 public:
  // Creates `directory` if needed and (on process 0 of the process group)
  // removes leftovers of interrupted saves; read_only does neither.
  explicit CheckpointManager(std::string directory, CheckpointManagerOptions options = {});
  // Waits for a save in flight (an error nobody collected is printed to stderr).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // True when `step` is newer than every saved step and a multiple of save_interval_steps.
  bool should_save(int64_t step) const;
  // Saves `items` at `step` when should_save(step) or args.force; returns
  // whether it saved. Saving at a step <= the latest one throws. With async,
  // an error of the previous background save is rethrown here (also by a
  // call that does not save, once that write has failed).
  bool save(int64_t step, const CheckpointItems& items, const CheckpointSaveArgs& args = {});
  // Restores `step` (the latest when nullopt; throws when there is none).
  // Tree items named in `targets` are checked against them (None rebuilds
  // the tree); with no targets every tree item is restored. JSON items are
  // always returned. Waits for a save in flight first.
  CheckpointItems restore(std::optional<int64_t> step = std::nullopt, const std::map<std::string, Tree>& targets = {});
  // save for a sharded state: every process calls it with the same step and
  // its own blocks of the tree items (`specs`: by item, by tree path; a leaf
  // not listed is replicated). Synchronous, also with options.async; process
  // 0 commits once every process's shards are written and checked, and
  // prunes. An error on any process is thrown on every process and leaves
  // nothing committed.
  bool save_sharded(int64_t step, const CheckpointItems& items, const ItemShardSpecs& specs,
                    const CheckpointSaveArgs& args = {});
  // restore of this process's blocks (`specs`, any split and process count;
  // a leaf not listed is restored whole); targets hold local shapes.
  CheckpointItems restore_sharded(std::optional<int64_t> step, const std::map<std::string, Tree>& targets,
                                  const ItemShardSpecs& specs);
  // Steps saved or being saved, ascending.
  std::vector<int64_t> all_steps() const { return steps_; }
  std::optional<int64_t> latest_step() const;
  // Blocks until the save in flight is committed; rethrows its error.
  void wait_until_finished();
  // Rethrows the error of a background write that has already failed,
  // without waiting for one in flight.
  void check_background_error() { collect_background_error(/*block=*/false); }
  const std::string& directory() const { return directory_; }

 private:
  std::vector<int64_t> steps_to_remove(int64_t new_step) const;
  // The checks and step bookkeeping shared by save and save_sharded: nullopt
  // when this step is not saved, else the steps to prune after its commit.
  std::optional<std::vector<int64_t>> begin_save(int64_t step, const CheckpointSaveArgs& args, const char* what);
  // The committed checkpoint's path of `step` (the latest when nullopt).
  std::string restore_path(std::optional<int64_t> step);
  // Rethrows the error of a failed background write (waiting for the write
  // in flight when `block`), after updating the step list.
  void collect_background_error(bool block);
  void forget_failed_save();

  std::string directory_;
  CheckpointManagerOptions options_;
  std::vector<int64_t> steps_;   // committed, plus the one in flight
  int64_t in_flight_step_ = -1;  // the step of the latest save started
  AsyncManager async_;
};

}  // namespace pax::train

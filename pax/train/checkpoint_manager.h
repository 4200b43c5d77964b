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
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pax/train/async_manager.h"
#include "pax/train/checkpoint.h"

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
};

struct CheckpointSaveArgs {
  // Save even when should_save(step) is false (a final or preemption save).
  bool force = false;
};

class CheckpointManager {
 public:
  // Creates `directory` if needed and removes leftovers of interrupted saves.
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

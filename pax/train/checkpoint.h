// Crash-safe checkpoints: flax.training.checkpoints' functional API
// (save_checkpoint, latest_checkpoint, available_steps, restore_checkpoint)
// and the layer beneath it that CheckpointManager shares.
//
// On disk, one directory per step:
//
//   <ckpt_dir>/<prefix><step>/        prefix "checkpoint_", step zero-padded to
//                                     8 digits ("checkpoint_00001200"; larger
//                                     steps print more digits); unpadded
//                                     names (flax's "checkpoint_1200") are
//                                     listed and restored too
//     <item>.safetensors              one per tree item: standard safetensors
//                                     (see safetensors.h); tensor names are the
//                                     leaves' tree paths ("params/ff/w"), dtypes
//                                     F32 BF16 F16 F64 I32 I64 U32 U8 BOOL
//     <name>.json                     one per JSON item (input iterator state,
//                                     anything else), stored verbatim
//     metadata.json                   format, format_version (1), paxcc_version,
//                                     step, config_hash (optional; see
//                                     config_hash()), and per item its tree
//                                     structure and every tensor's name, dtype,
//                                     shape and CRC32C (JSON items: size, CRC32C)
//     commit_success.txt              the commit marker; it also holds the
//                                     CRC32C of metadata.json
//
// The functional API saves its target as the tree item "state"
// (kTargetItemName): <ckpt_dir>/checkpoint_00000100/state.safetensors.
//
// A save writes everything into tmp_<prefix><step>/, fsyncs each file,
// writes and fsyncs the marker, fsyncs the directory, renames it into place
// and fsyncs <ckpt_dir>. Replacing an existing step swaps the two directories
// atomically (renameat2 RENAME_EXCHANGE; where a file system lacks it, the old
// one is moved aside to tmp_<name>.old first and moved back by the next start
// if the new one never landed). Old checkpoints are pruned only after the new
// one is committed, by renaming them to tmp_<name>.del before deleting their
// files. So at every instant the newest committed step is complete: a
// directory without commit_success.txt is never listed or restored, and
// leftover tmp_ directories are removed when a save or a CheckpointManager
// starts. One writer per directory at a time.
//
// Restore reads metadata.json, checks it against the marker, checks the
// stored tree against the target (structure, dtypes, shapes), checks each
// safetensors header against metadata.json and every tensor's CRC32C while
// reading it; any mismatch or malformed file is a pax::Error naming the file
// and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pax/core/tree.h"
#include "pax/train/async_manager.h"
#include "pax/train/checkpoint_metadata.h"
#include "pax/train/safetensors.h"

namespace pax::train {

inline constexpr const char* kDefaultCheckpointPrefix = "checkpoint_";
inline constexpr const char* kTargetItemName = "state";
inline constexpr const char* kCommitMarkerFile = "commit_success.txt";
inline constexpr const char* kMetadataFile = "metadata.json";

// What one checkpoint holds.
struct CheckpointItems {
  std::map<std::string, Tree> trees;        // each -> <name>.safetensors
  std::map<std::string, std::string> json;  // each -> <name>.json (a JSON document)
};

// ---------------------------------------------------------------------------
// Functional API

struct SaveCheckpointOptions {
  std::string prefix = kDefaultCheckpointPrefix;
  // The newest `keep` committed checkpoints are kept (>= 1).
  int64_t keep = 1;
  // Allows saving at a step <= the latest one: an existing checkpoint of that
  // step is replaced and newer ones are removed (after the commit).
  bool overwrite = false;
  // Also keep, among the older checkpoints, one at least every n steps
  // (walking from the oldest).
  std::optional<int64_t> keep_every_n_steps;
  // When set, the write, commit and pruning run on its background thread and
  // save_checkpoint returns once the arrays are held (see AsyncManager).
  // Holding them is the snapshot: arrays are immutable host buffers, and a
  // jitted step that donates its state cannot reuse a buffer a save holds.
  AsyncManager* async_manager = nullptr;
  // An experiment config (JSON); its hash is stored in metadata.json.
  std::string config_json;
};

// Saves `target` at `step` (>= 0) and returns the checkpoint's path. Throws
// when a checkpoint of this step or a newer one exists, unless overwrite.
std::string save_checkpoint(const std::string& ckpt_dir, const Tree& target, int64_t step,
                            const SaveCheckpointOptions& options = {});

// Path of the newest committed checkpoint; nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& ckpt_dir,
                                             const std::string& prefix = kDefaultCheckpointPrefix);
// Steps of the committed checkpoints, ascending (empty when the directory does not exist).
std::vector<int64_t> available_steps(const std::string& ckpt_dir, const std::string& prefix = kDefaultCheckpointPrefix);

struct RestoreCheckpointOptions {
  // Restore this step instead of the latest; it must exist.
  std::optional<int64_t> step;
  std::string prefix = kDefaultCheckpointPrefix;
};

// Restores from a checkpoint directory (`ckpt_dir_or_path` is then the path
// save_checkpoint returned) or from the latest (or options.step) checkpoint
// in a directory of checkpoints. With target None the tree is rebuilt from
// metadata.json (flax's raw state dict); otherwise it must match the target's
// structure, dtypes and shapes, and leaves keep the target's weak types.
// As in flax, a path that does not exist (a directory not created yet, or a
// checkpoint path that was never saved, a mistyped one too) and a directory
// without checkpoints return `target` unchanged: check latest_checkpoint or
// available_steps first where a missing checkpoint must stop the program.
// An explicit step that does not exist, and a checkpoint that was never
// committed, are errors.
Tree restore_checkpoint(const std::string& ckpt_dir_or_path, const Tree& target,
                        const RestoreCheckpointOptions& options = {});

// ---------------------------------------------------------------------------
// The layer both APIs share

// prefix + step zero-padded to 8 digits (the name saves write); and back,
// from any decimal spelling of the step (flax's unpadded "checkpoint_42" too;
// nullopt for anything else).
std::string checkpoint_dir_name(const std::string& prefix, int64_t step);
std::optional<int64_t> parse_checkpoint_dir_name(std::string_view name, const std::string& prefix);
bool is_committed_checkpoint(const std::string& path);
// The directory of a step in ckpt_dir: the padded name saves write, or
// another spelling of the step that is committed (flax's "checkpoint_42").
std::string checkpoint_path_of(const std::string& ckpt_dir, const std::string& prefix, int64_t step);
// Removes tmp_ leftovers of interrupted saves and deletions (and moves back a
// checkpoint set aside by an overwrite that never landed).
void remove_tmp_checkpoints(const std::string& ckpt_dir, const std::string& prefix);

// A validated save holding references to its arrays: they are immutable, so
// the references are a snapshot that later training steps cannot change.
struct PreparedCheckpoint {
  CheckpointMetadata metadata;                           // CRCs are filled in while writing
  std::map<std::string, std::vector<NamedArray>> trees;  // per item, leaves in pre-order
  std::map<std::string, std::string> json;
};
// Validates items (names, concrete host arrays, unique tensor paths, JSON
// documents) without touching the disk.
PreparedCheckpoint prepare_checkpoint(const CheckpointItems& items, int64_t step, const std::string& config_json);
// Writes and commits (replacing an existing checkpoint of that step); returns its path.
std::string write_checkpoint(const PreparedCheckpoint& checkpoint, const std::string& ckpt_dir,
                             const std::string& prefix);
// Deletes the checkpoint of a step under every spelling of its name (a
// missing one is not an error); with keep_padded, all but the padded one.
void remove_checkpoint(const std::string& ckpt_dir, const std::string& prefix, int64_t step, bool keep_padded = false);

// metadata.json of a committed checkpoint, validated against its marker.
CheckpointMetadata read_checkpoint_metadata(const std::string& path);
// Reads the tree items named in `targets` (all of them when `targets` is
// empty) and every JSON item of the committed checkpoint at `path`. A target
// that is not None must match the stored tree; None rebuilds it.
CheckpointItems read_checkpoint(const std::string& path, const std::map<std::string, Tree>& targets = {});

}  // namespace pax::train

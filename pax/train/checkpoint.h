// Crash-safe checkpoints: flax.training.checkpoints' functional API
// (save_checkpoint, save_checkpoint_multiprocess, latest_checkpoint,
// available_steps, restore_checkpoint)
// and the layer beneath it that CheckpointManager shares.
//
// On disk, one directory per step:
//
//   <ckpt_dir>/<prefix><step>/        prefix "checkpoint_", an integer step
//                                     >= 0 zero-padded to 8 digits
//                                     ("checkpoint_00001200"; larger steps
//                                     print more digits), other steps as flax
//                                     spells them ("checkpoint_-3",
//                                     "checkpoint_0.5", "checkpoint_1e-05");
//                                     any spelling of a step (flax's unpadded
//                                     "checkpoint_1200", "checkpoint_1e5") is
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
// A sharded save (sharded_checkpoint.h: every process of an FSDP job saves
// its blocks) writes, for each tree item, one file per process instead:
//
//     <item>.process-00000.safetensors   process 0's blocks (and the
//     <item>.process-00001.safetensors   replicated arrays), process 1's, ...:
//     ...                                standard safetensors, a tensor's name
//                                        is its tree path and its shape the
//                                        block's; a file may hold no tensor
//
// and metadata.json says format_version 2 and records per sharded item its
// files (name and size) and crc_chunk_bytes, and per tensor its global shape,
// dtype, split ({"dim", "count"}, null when replicated) and, for each block
// in order, the file index, the block's CRC32C and (for blocks larger than
// crc_chunk_bytes) one CRC32C per chunk of that many bytes. Version 1
// checkpoints (every item unsharded) are still written when nothing is
// sharded and are read by both readers; read_checkpoint and restore give
// whole arrays from a sharded item.
//
// The functional API saves its target as the tree item "state"
// (kTargetItemName): <ckpt_dir>/checkpoint_00000100/state.safetensors.
// Its steps are flax's: integers or floats (a metric value), negative ones
// too (see checkpoint_step.h), ordered by value as flax's natural sort orders
// the names: ckpt_0.001 < ckpt_0.01 < ckpt_0.1 and ckpt_-1.0 < ckpt_1.0 <
// ckpt_1e5. Two spellings of one value (checkpoint_2, checkpoint_2.0) are one
// step. CheckpointManager's steps are integers >= 0.
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
#include "pax/train/checkpoint_step.h"
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
  // step is replaced and newer ones (larger values) are removed (after the
  // commit).
  bool overwrite = false;
  // Also keep, among the older checkpoints, one at least every n steps
  // (walking from the oldest; flax never keeps a step of value 0 for it).
  std::optional<int64_t> keep_every_n_steps;
  // When set, the write, commit and pruning run on its background thread and
  // save_checkpoint returns once the arrays are held (see AsyncManager).
  // Holding them is the snapshot: arrays are immutable host buffers, and a
  // jitted step that donates its state cannot reuse a buffer a save holds.
  AsyncManager* async_manager = nullptr;
  // An experiment config (JSON); its hash is stored in metadata.json.
  std::string config_json;
};

// Saves `target` at `step` (an integer or a float: save_checkpoint(dir, t,
// 0.5) writes checkpoint_0.5) and returns the checkpoint's path. Throws when a
// checkpoint of this step's value or a larger one exists, unless overwrite.
std::string save_checkpoint(const std::string& ckpt_dir, const Tree& target, CheckpointStep step,
                            const SaveCheckpointOptions& options = {});

// flax's save_checkpoint_multiprocess over the process group
// (pax/dist/process_group.h), for a directory every process sees: every
// process calls it with the same ckpt_dir, step and options; process 0 alone
// writes its (replicated) target and prunes old checkpoints, and no process
// returns before that checkpoint is committed (the others wait at a barrier
// up to the group's phase timeout). An error on process 0 (an existing step
// without overwrite, a full disk) is thrown on every process; so is a
// process that names another checkpoint. With one process it is
// save_checkpoint; async_manager is for a single process only (as flax says).
// Defined in checkpoint_multiprocess.cc.
std::string save_checkpoint_multiprocess(const std::string& ckpt_dir, const Tree& target, CheckpointStep step,
                                         const SaveCheckpointOptions& options = {});

// Path of the committed checkpoint of the largest step; nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& ckpt_dir,
                                             const std::string& prefix = kDefaultCheckpointPrefix);
// Steps of the committed checkpoints, ascending (empty when the directory
// does not exist): flax's available_steps with step_type int (it throws
// naming a step that is not an integer) and with step_type float.
std::vector<int64_t> available_steps(const std::string& ckpt_dir, const std::string& prefix = kDefaultCheckpointPrefix);
std::vector<double> available_float_steps(const std::string& ckpt_dir,
                                          const std::string& prefix = kDefaultCheckpointPrefix);

struct RestoreCheckpointOptions {
  // Restore this step (any spelling of its value) instead of the latest; it must exist.
  std::optional<CheckpointStep> step;
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

// How a save spells its step in the directory name: Pax's runner pads an
// integer step >= 0 to 8 digits ("checkpoint_00000100"); flax's functional
// API writes the step as Python spells it ("test_0", "test_0.5").
enum class StepNames { pax_padded, flax };

// The name saves write: prefix + the step spelled as `names` says; and back,
// from any spelling of a number after the prefix ("checkpoint_42",
// "checkpoint_00000042", "checkpoint_1e5"; nullopt for anything else).
std::string checkpoint_dir_name(const std::string& prefix, CheckpointStep step,
                                StepNames names = StepNames::pax_padded);
std::optional<CheckpointStep> parse_checkpoint_dir_name(std::string_view name, const std::string& prefix);
bool is_committed_checkpoint(const std::string& path);
// The directory of a step in ckpt_dir: the name saves write, or another
// committed spelling of the step's value (flax's "checkpoint_42").
std::string checkpoint_path_of(const std::string& ckpt_dir, const std::string& prefix, CheckpointStep step);
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
PreparedCheckpoint prepare_checkpoint(const CheckpointItems& items, CheckpointStep step,
                                      const std::string& config_json);
// Writes and commits (replacing an existing checkpoint of that step); returns its path.
std::string write_checkpoint(const PreparedCheckpoint& checkpoint, const std::string& ckpt_dir,
                             const std::string& prefix, StepNames names = StepNames::pax_padded);
// The step's tmp_ directory, where a save writes before its commit.
std::string tmp_checkpoint_path(const std::string& ckpt_dir, const std::string& prefix, CheckpointStep step,
                                StepNames names = StepNames::pax_padded);
// The __metadata__ of every tensor file a save writes.
std::map<std::string, std::string> safetensors_file_metadata(CheckpointStep step);
// The commit of a save whose tensor files are in the step's tmp_ directory:
// writes the JSON items (recording them in m), metadata.json and the marker,
// fsyncs, and renames the directory into place (replacing an existing
// checkpoint of that step). Returns the checkpoint's path.
std::string commit_checkpoint(CheckpointMetadata m, const std::map<std::string, std::string>& json,
                              const std::string& ckpt_dir, const std::string& prefix,
                              StepNames names = StepNames::pax_padded);
// Deletes the checkpoint of a step under every spelling of its value (a
// missing one is not an error); with keep_own_name, all but the name saves
// write for `step`.
void remove_checkpoint(const std::string& ckpt_dir, const std::string& prefix, CheckpointStep step,
                       bool keep_own_name = false, StepNames names = StepNames::pax_padded);

// metadata.json of a committed checkpoint, validated against its marker.
CheckpointMetadata read_checkpoint_metadata(const std::string& path);
// Reads the tree items named in `targets` (all of them when `targets` is
// empty) and every JSON item of the committed checkpoint at `path`. A target
// that is not None must match the stored tree; None rebuilds it.
CheckpointItems read_checkpoint(const std::string& path, const std::map<std::string, Tree>& targets = {});
// The JSON items of the checkpoint at `path` whose metadata is `m`, checked.
std::map<std::string, std::string> read_checkpoint_json_items(const std::string& path, const CheckpointMetadata& m);

}  // namespace pax::train

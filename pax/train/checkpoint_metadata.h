// metadata.json of a checkpoint directory: the step, the format version, an
// optional hash of the experiment config, and for every item its tree
// structure and the dtype, shape and CRC32C of every tensor (or the size and
// CRC32C of a JSON item); for a sharded item (format_version 2) its shard
// files, and for every tensor its global shape, its split and for each block
// the file and the CRC32Cs. See checkpoint.h for the whole on-disk format.
// The parser treats the file as hostile: every field is type-checked and
// cross-checked, and any problem is a pax::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pax/core/tree.h"
#include "pax/train/checkpoint_step.h"

namespace pax::train {

// Version 1: every item one <item>.safetensors. Version 2 (written only when
// an item is sharded): items may also be sharded. Both are read.
inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr int kShardedCheckpointFormatVersion = 2;

// One stored block of a sharded tensor.
struct ShardBlockRecord {
  size_t file = 0;      // index into TreeItemRecord::files
  uint32_t crc32c = 0;  // of the whole block's bytes
  // Of each crc_chunk_bytes piece of the block's bytes (the last one may be
  // shorter), so that a read of part of the block is checked too; empty when
  // the block fits in one chunk (crc32c covers it).
  std::vector<uint32_t> chunk_crc32c;
};

struct TensorRecord {
  std::string name;  // the leaf's tree path, also its safetensors name
  DType dtype = DType::f32;
  Shape shape;          // the global shape
  uint32_t crc32c = 0;  // of the tensor's bytes (unsharded items)
  // Sharded items: the split (dimension and block count; -1 / 1 replicated)
  // and block k's file and CRCs for k in 0..split_count-1.
  int64_t split_dim = -1;
  int64_t split_count = 1;
  // An outer split along another dimension (a pipeline stage's layers, each
  // split again as above): split_count * outer_count blocks, outer first
  // (dist::ShardSpec). -1 / 1: none.
  int64_t outer_dim = -1;
  int64_t outer_count = 1;
  int64_t block_count() const { return split_count * outer_count; }
  std::vector<ShardBlockRecord> blocks;
  // The shape of one stored block.
  Shape block_shape() const;
};

// One node of a tree's structure in pre-order: its kind, its key in the
// parent dict (empty otherwise) and its number of children.
struct TreeNodeRecord {
  Tree::Kind kind = Tree::Kind::none;
  std::string key;
  size_t num_children = 0;
};

// One process's shard file of a sharded item.
struct ShardFileRecord {
  std::string name;    // "<item>.process-<5-digit index>.safetensors"
  uint64_t bytes = 0;  // its size
};

struct TreeItemRecord {
  std::vector<TreeNodeRecord> structure;  // pre-order; empty never (a None tree is one node)
  std::vector<TensorRecord> tensors;      // the leaves in pre-order
  // Sharded items: one file per saving process (in process order) and the
  // chunk size of the blocks' chunk CRCs. Empty: <item>.safetensors.
  std::vector<ShardFileRecord> files;
  uint64_t crc_chunk_bytes = 0;
  bool sharded() const { return !files.empty(); }
};

struct JsonItemRecord {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct CheckpointMetadata {
  CheckpointStep step = 0;  // an integer or a float, as saved
  int format_version = kCheckpointFormatVersion;
  std::string paxcc_version;
  std::string config_hash;  // "" when the checkpoint was saved without a config
  std::map<std::string, TreeItemRecord> trees;
  std::map<std::string, JsonItemRecord> json;
};

std::string checkpoint_metadata_to_json(const CheckpointMetadata& metadata);
// Parses and validates metadata.json; `file` names it in errors.
CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& file);

// A tree's structure records, and the tree rebuilt from them and its leaves.
std::vector<TreeNodeRecord> tree_structure_records(const Tree& tree);
Tree tree_from_records(std::span<const TreeNodeRecord> structure, std::span<const Array> leaves);

// Item names become file names: letters, digits, '_', '-', '.', not starting
// with '.', at most 100 characters, and not "metadata" or "commit_success".
bool is_valid_item_name(const std::string& name);
// "fnv1a64:<16 hex digits>" of the canonical form of a JSON document (keys
// sorted, no whitespace), so that formatting does not change the hash.
std::string config_hash(std::string_view config_json);

// The shard file of process `process` for item `item`:
// "<item>.process-00003.safetensors".
std::string shard_file_name(const std::string& item, int64_t process);

// A CRC32C as metadata.json writes it: 8 lowercase hex digits.
std::string crc32c_hex(uint32_t crc);

}  // namespace pax::train

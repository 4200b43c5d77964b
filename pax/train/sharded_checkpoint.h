// Sharded checkpoints for fully sharded data parallelism: every process of
// the group saves the blocks it holds (dist::ShardSpec), and a restore with
// any other split or process count reads just the bytes it needs.
//
// A save is collective (every process calls save_sharded_checkpoint with the
// same items, tree structures, dtypes, global shapes and splits):
//   1. the processes exchange what they hold; each distinct block is written
//      once: a split array's block k by the lowest-ranked process holding
//      block k, a replicated array by process 0;
//   2. process 0 creates tmp_<prefix><step>/; every process writes its
//      blocks of each tree item to <item>.process-<5 digits>.safetensors
//      there (a file with no tensors where it writes none) and fsyncs it;
//   3. after a barrier every process reports its file sizes and CRC32Cs (or
//      its error); process 0 checks every expected file (present, the size
//      reported, a header listing exactly the blocks assigned to it), writes
//      the JSON items, metadata.json (format_version 2) and the marker and
//      renames the directory into place, as checkpoint.h's saves do; any
//      failure leaves nothing committed and is thrown on every process.
// A process killed during a save leaves a tmp_ directory that is never
// listed and is removed by the next save or CheckpointManager.
//
// CRCs: each block has a CRC32C of its bytes and, when it is larger than
// crc_chunk_bytes, one per chunk of that many bytes. A restore that reads a
// whole block checks the block's CRC; one that needs part of a block reads
// the chunks covering that part (whole chunks, so at most one chunk more at
// each end of each contiguous run) and checks each of them. Every byte a
// restore uses is thus checked. Unsharded (version 1) items are read the same
// way as one replicated block without chunk CRCs: a partial read of one
// reads and checks the whole tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pax/dist/shard_spec.h"
#include "pax/train/checkpoint.h"

namespace pax::train {

inline constexpr uint64_t kDefaultCrcChunkBytes = uint64_t(1) << 20;

// Specs per tree item (by tree path within the item); an item or path not
// listed is replicated.
using ItemShardSpecs = std::map<std::string, dist::ShardSpecs>;

// One leaf of a tree item as one process holds it.
struct ShardedLeaf {
  std::string path;
  Array block;  // the process's block: spec.local()
  dist::ShardSpec spec;
};

// A validated sharded save as one process sees it.
struct PreparedShards {
  CheckpointMetadata metadata;  // global shapes and splits; files and blocks are filled in at the commit
  std::map<std::string, std::vector<ShardedLeaf>> trees;  // per item, leaves in pre-order
  std::map<std::string, std::string> json;                // written by process 0
};

// Validates one process's items against its specs (every leaf's shape must
// be its spec's local()) without touching the disk.
PreparedShards prepare_shards(const CheckpointItems& items, const ItemShardSpecs& specs, CheckpointStep step,
                              const std::string& config_json, uint64_t crc_chunk_bytes = kDefaultCrcChunkBytes);

// What every process must agree on: the metadata without blocks, and the JSON item names.
std::string shard_agreement_text(const PreparedShards& prepared);
// This process's block index of every tensor (items by name, leaves in pre-order; 0 when replicated).
std::vector<int64_t> shard_block_indices(const PreparedShards& prepared);

// writers[t][k]: the process that writes block k of tensor t (numbered as in
// shard_block_indices). Throws naming a block that no process holds.
using ShardWriters = std::vector<std::vector<int>>;
ShardWriters assign_shard_writers(const PreparedShards& prepared,
                                  const std::vector<std::vector<int64_t>>& indices_by_process);

// What a process wrote, or the error that stopped it.
struct ShardWriteReport {
  struct Block {
    size_t tensor = 0;  // as in shard_block_indices
    int64_t index = 0;  // the block
    uint32_t crc32c = 0;
    std::vector<uint32_t> chunk_crc32c;
  };
  std::string error;                           // empty when it wrote everything
  std::map<std::string, uint64_t> file_bytes;  // per item, its file's size
  std::vector<Block> blocks;

  std::string to_text() const;
  static ShardWriteReport from_text(const std::string& text, int process);
};

// Process `process`'s part of a save: writes and fsyncs its file of every
// tree item in tmp_dir. Never throws: an error goes into the report.
ShardWriteReport write_process_shards(const std::string& tmp_dir, const PreparedShards& mine, int process,
                                      const ShardWriters& writers);

// Process 0's part: checks the reports and the files of every process and
// commits the tmp_ directory; throws (after removing it) on any problem.
std::string commit_shards(const PreparedShards& chief, const std::vector<ShardWriteReport>& reports,
                          const ShardWriters& writers, const std::string& ckpt_dir, const std::string& prefix);

struct ShardedSaveOptions {
  std::string prefix = kDefaultCheckpointPrefix;
  std::string config_json;  // its hash goes into metadata.json
  uint64_t crc_chunk_bytes = kDefaultCrcChunkBytes;
  // Run on process 0 after the commit, before any process returns (pruning).
  std::function<void()> after_commit;
};

// The collective save (see the top of this file); returns the checkpoint's path.
std::string save_sharded_checkpoint(const std::string& ckpt_dir, const CheckpointItems& items,
                                    const ItemShardSpecs& specs, CheckpointStep step,
                                    const ShardedSaveOptions& options = {});

// Reads the tree items named in `targets` (all when empty) and every JSON
// item of the committed checkpoint at `path`, each leaf as the block its spec
// names (a target leaf must have the spec's local shape; a None target takes
// the stored structure). Works on sharded and unsharded checkpoints alike.
CheckpointItems read_checkpoint_sharded(const std::string& path, const std::map<std::string, Tree>& targets,
                                        const ItemShardSpecs& specs);
// One tree item so (read_checkpoint's path for sharded items, with no specs).
Tree read_sharded_tree_item(const std::string& path, const std::string& name, const TreeItemRecord& rec,
                            const Tree* target, const dist::ShardSpecs& specs);

// Fault injection for tests: this process's next write_process_shards fails
// before writing its files (fail), or writes its first file, cuts it in half
// and kills the process with SIGKILL (kill).
enum class ShardWriteFault { none, fail, kill };
void inject_shard_write_fault_for_testing(ShardWriteFault fault);

}  // namespace pax::train

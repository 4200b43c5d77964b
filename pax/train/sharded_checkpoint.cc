// Sharded checkpoints: preparing and agreeing on a save, each process's
// write, process 0's checks and commit, and the resharding read (byte runs
// of the stored blocks that overlap the block a process needs, read in whole
// CRC chunks and checked).
#include "pax/train/sharded_checkpoint.h"

#include <algorithm>
#include <tuple>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "pax/core/device_put.h"
#include "pax/core/error.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/core/crc32c.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

using json = nlohmann::json;

std::atomic<ShardWriteFault> g_next_write_fault{ShardWriteFault::none};

void testing_truncate_file(const std::string& path, uint64_t size) {
  PAX_CHECK(::truncate(path.c_str(), off_t(size)) == 0, "cannot truncate '", path, "'");
}

// Reads are done in pieces of about this many bytes (whole CRC chunks).
constexpr uint64_t kReadPieceBytes = uint64_t(8) << 20;

// A box of an array in global coordinates: [lo[d], hi[d]) along each dimension.
struct Region {
  std::vector<int64_t> lo, hi;
};

// The whole array, or block `index` of `count` along `dim` (dim < 0: the
// whole), within outer block `outer_index` of `outer_count` along outer_dim
// (outer_dim < 0: none).
Region block_region(const Shape& global, int64_t dim, int64_t count, int64_t index, int64_t outer_dim = -1,
                    int64_t outer_count = 1, int64_t outer_index = 0) {
  Region r{std::vector<int64_t>(size_t(global.rank()), 0), global.dims()};
  for (const auto& [d, n, k] : {std::tuple{dim, count, index}, std::tuple{outer_dim, outer_count, outer_index}}) {
    if (d < 0) continue;
    const int64_t size = global[d] / n;
    r.lo[size_t(d)] = k * size;
    r.hi[size_t(d)] = (k + 1) * size;
  }
  return r;
}

// Stored block `block` of tensor `t` (numbered outer first).
Region stored_region(const TensorRecord& t, int64_t block) {
  return block_region(t.shape, t.split_dim, t.split_count, block % t.split_count, t.outer_dim, t.outer_count,
                      block / t.split_count);
}

// A contiguous run of bytes to copy: from offset src of a stored block to offset dst of the output block.
struct Run {
  uint64_t src = 0, dst = 0, len = 0;
};

// The row-major byte runs that copy `box` from an array laid out as `src`
// into one laid out as `dst` (box lies within both), in increasing src order.
std::vector<Run> box_runs(const Region& src, const Region& dst, const Region& box, size_t itemsize) {
  const size_t rank = box.lo.size();
  for (size_t d = 0; d < rank; ++d)
    if (box.hi[d] <= box.lo[d]) return {};
  std::vector<uint64_t> src_stride(rank), dst_stride(rank);
  uint64_t s = itemsize, t = itemsize;
  for (size_t d = rank; d-- > 0;) {
    src_stride[d] = s;
    dst_stride[d] = t;
    s *= uint64_t(src.hi[d] - src.lo[d]);
    t *= uint64_t(dst.hi[d] - dst.lo[d]);
  }
  // The innermost dimension where the box is narrower than src or dst: the
  // dimensions after it are whole in both, so each run spans them.
  int64_t k = -1;
  for (size_t d = rank; d-- > 0;) {
    const int64_t extent = box.hi[d] - box.lo[d];
    if (extent != src.hi[d] - src.lo[d] || extent != dst.hi[d] - dst.lo[d]) {
      k = int64_t(d);
      break;
    }
  }
  if (k < 0) return {Run{0, 0, s}};
  const size_t kk = size_t(k);
  const uint64_t len = uint64_t(box.hi[kk] - box.lo[kk]) * src_stride[kk];
  std::vector<Run> runs;
  std::vector<int64_t> idx(box.lo.begin(), box.lo.begin() + k);  // an odometer over dimensions < k
  while (true) {
    Run r{uint64_t(box.lo[kk] - src.lo[kk]) * src_stride[kk], uint64_t(box.lo[kk] - dst.lo[kk]) * dst_stride[kk], len};
    for (size_t j = 0; j < kk; ++j) {
      r.src += uint64_t(idx[j] - src.lo[j]) * src_stride[j];
      r.dst += uint64_t(idx[j] - dst.lo[j]) * dst_stride[j];
    }
    runs.push_back(r);
    size_t j = kk;
    while (j > 0 && ++idx[j - 1] == box.hi[j - 1]) {
      idx[j - 1] = box.lo[j - 1];
      --j;
    }
    if (j == 0) break;
  }
  return runs;
}

std::string block_context(const std::string& file, const std::string& tensor, int64_t index) {
  return "restore: shard file '" + file + "': tensor '" + tensor + "' block " + std::to_string(index);
}

void check_crc(uint32_t stored, uint32_t got, const std::string& ctx, const std::string& what) {
  PAX_CHECK(stored == got, ctx, " fails its CRC32C check", what, " (metadata.json says ", crc32c_hex(stored),
            ", the data gives ", crc32c_hex(got), "): the file is corrupted");
}

// Copies the parts of `runs` inside bytes [p0, p0 + n) of the block from `piece` to `out`.
void copy_runs(const std::vector<Run>& runs, size_t& first, uint64_t p0, uint64_t n, const unsigned char* piece,
               unsigned char* out) {
  while (first < runs.size() && runs[first].src + runs[first].len <= p0) ++first;
  for (size_t i = first; i < runs.size() && runs[i].src < p0 + n; ++i) {
    const uint64_t a = std::max(runs[i].src, p0), b = std::min(runs[i].src + runs[i].len, p0 + n);
    if (a < b) std::memcpy(out + runs[i].dst + (a - runs[i].src), piece + (a - p0), size_t(b - a));
  }
}

// Reads the bytes of `runs` of one stored block into `out`, checking every
// byte read: the block's CRC when all of it is needed (or it has no chunk
// CRCs), otherwise the CRC of each chunk covering a run.
void read_block_runs(const SafetensorsReader& reader, const SafetensorsEntry& e, const ShardBlockRecord& block,
                     uint64_t chunk_bytes, const std::vector<Run>& runs, unsigned char* out, const std::string& ctx) {
  const uint64_t nbytes = e.end - e.begin;
  uint64_t needed = 0;
  for (const Run& r : runs) needed += r.len;
  if (runs.empty()) return;
  if (runs.size() == 1 && needed == nbytes) {  // the whole block, in place
    reader.read_bytes(e, 0, nbytes, out + runs[0].dst);
    check_crc(block.crc32c, crc32c(out + runs[0].dst, size_t(nbytes)), ctx, "");
    return;
  }
  const bool whole = block.chunk_crc32c.empty() || needed == nbytes;
  // Ranges of whole chunks to read, ascending and merged.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (whole) {
    ranges.emplace_back(0, nbytes);
  } else {
    for (const Run& r : runs) {
      const uint64_t lo = r.src / chunk_bytes * chunk_bytes;
      const uint64_t hi = std::min(nbytes, (r.src + r.len + chunk_bytes - 1) / chunk_bytes * chunk_bytes);
      if (!ranges.empty() && lo <= ranges.back().second) {
        ranges.back().second = std::max(ranges.back().second, hi);
      } else {
        ranges.emplace_back(lo, hi);
      }
    }
  }
  const uint64_t piece_bytes = whole ? kReadPieceBytes
                                     : std::max<uint64_t>(1, kReadPieceBytes / chunk_bytes) * chunk_bytes;
  std::vector<unsigned char> piece(size_t(std::min(piece_bytes, nbytes)));
  size_t first = 0;
  uint32_t crc = 0;
  for (const auto& [lo, hi] : ranges) {
    for (uint64_t p0 = lo; p0 < hi; p0 += piece_bytes) {
      const uint64_t n = std::min(piece_bytes, hi - p0);
      reader.read_bytes(e, p0, n, piece.data());
      if (whole) {
        crc = crc32c_extend(crc, piece.data(), size_t(n));
      } else {
        for (uint64_t c0 = 0; c0 < n; c0 += chunk_bytes) {
          const uint64_t c = (p0 + c0) / chunk_bytes;
          check_crc(block.chunk_crc32c[size_t(c)], crc32c(piece.data() + c0, size_t(std::min(chunk_bytes, n - c0))),
                    ctx,
                    " in chunk " + std::to_string(c) + " (bytes " + std::to_string(p0 + c0) + " to " +
                        std::to_string(std::min(p0 + c0 + chunk_bytes, nbytes)) + ")");
        }
      }
      copy_runs(runs, first, p0, n, piece.data(), out);
    }
  }
  if (whole) check_crc(block.crc32c, crc, ctx, "");
}

// An unsharded (version 1) item seen as a sharded one: one file, every tensor one replicated block.
TreeItemRecord as_single_shard(const TreeItemRecord& rec, const std::string& path, const std::string& name) {
  TreeItemRecord out = rec;
  const std::string file = name + ".safetensors";
  const std::string full = fs::join(path, file);
  out.files = {{file, fs::exists(full) ? fs::File::open_read(full).size() : 0}};
  out.crc_chunk_bytes = UINT64_MAX;
  for (TensorRecord& t : out.tensors) t.blocks = {{0, t.crc32c, {}}};
  return out;
}

// The shard files of an item, opened and checked on first use.
class ShardFiles {
 public:
  ShardFiles(const std::string& path, const TreeItemRecord& rec, const std::string& item)
      : path_(path), rec_(rec), item_(item), readers_(rec.files.size()) {}

  const SafetensorsReader& get(size_t f) {
    if (!readers_[f]) {
      const std::string file = fs::join(path_, rec_.files[f].name);
      PAX_CHECK(fs::exists(file), "restore: shard file '", file, "' of item '", item_,
                "' is missing (metadata.json lists it; the checkpoint is incomplete)");
      const uint64_t size = fs::File::open_read(file).size();
      PAX_CHECK(size == rec_.files[f].bytes, "restore: shard file '", file, "' is ", size,
                " bytes but metadata.json says ", rec_.files[f].bytes, ": the file is truncated or corrupted");
      readers_[f].emplace(file);
    }
    return *readers_[f];
  }

 private:
  std::string path_;
  const TreeItemRecord& rec_;
  std::string item_;
  std::vector<std::optional<SafetensorsReader>> readers_;
};

// One leaf as `spec` names it, assembled from the stored blocks that overlap it.
Array read_leaf(ShardFiles& files, const TreeItemRecord& rec, const TensorRecord& t, const dist::ShardSpec& spec,
                bool weak_type) {
  const Shape local = spec.local();
  auto buffer = Buffer::allocate(size_t(local.numel()) * itemsize(t.dtype));
  auto* out = static_cast<unsigned char*>(buffer->data());
  const Region want = spec.replicated() ? block_region(t.shape, -1, 1, 0)
                                        : block_region(t.shape, spec.dim, spec.count, spec.index, spec.outer_dim,
                                                       spec.outer_count, spec.outer_index);
  const Shape block_shape = t.block_shape();
  for (size_t k = 0; k < t.blocks.size(); ++k) {
    const Region have = stored_region(t, int64_t(k));
    Region box = want;
    for (size_t d = 0; d < box.lo.size(); ++d) {
      box.lo[d] = std::max(want.lo[d], have.lo[d]);
      box.hi[d] = std::min(want.hi[d], have.hi[d]);
    }
    const std::vector<Run> runs = box_runs(have, want, box, itemsize(t.dtype));
    if (runs.empty()) continue;
    const ShardBlockRecord& b = t.blocks[k];
    const SafetensorsReader& reader = files.get(b.file);
    const std::string ctx = block_context(reader.path(), t.name, int64_t(k));
    const SafetensorsEntry* e = reader.find(t.name);
    PAX_CHECK(e != nullptr, ctx, " is listed in metadata.json but missing from the file");
    PAX_CHECK(e->dtype == t.dtype && e->shape == block_shape, ctx, " is ", AVal{e->shape, e->dtype, false}.str(),
              " in the file but ", AVal{block_shape, t.dtype, false}.str(), " in metadata.json");
    read_block_runs(reader, *e, b, rec.crc_chunk_bytes, runs, out, ctx);
  }
  return move_uncommitted(Array(AVal{local, t.dtype, weak_type}, std::move(buffer)), default_device());
}

// Every process's string, in process order.
std::vector<std::string> all_gather_strings(const std::string& mine) {
  dist::ProcessGroup& group = dist::process_group();
  if (group.process_count() == 1) return {mine};
  const std::vector<int64_t> lengths = group.all_gather(scalar(double(mine.size()), DType::i64)).to_vector<int64_t>();
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::string> out(lengths.size());
  if (longest == 0) return out;
  std::string padded = mine;
  padded.resize(size_t(longest), '\0');
  const std::vector<uint8_t> bytes =
      group.all_gather(from_host(padded.data(), Shape{longest}, DType::u8)).to_vector<uint8_t>();
  for (size_t p = 0; p < out.size(); ++p) {
    const auto* row = bytes.data() + p * size_t(longest);
    out[p].assign(row, row + lengths[p]);
  }
  return out;
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// The tensors in shard_block_indices order: (item, leaf) pairs.
std::vector<std::pair<std::string, size_t>> flat_tensors(const PreparedShards& p) {
  std::vector<std::pair<std::string, size_t>> out;
  for (const auto& [item, leaves] : p.trees)
    for (size_t i = 0; i < leaves.size(); ++i) out.emplace_back(item, i);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Saving

PreparedShards prepare_shards(const CheckpointItems& items, const ItemShardSpecs& specs, CheckpointStep step,
                              const std::string& config_json, uint64_t crc_chunk_bytes) {
  PAX_CHECK(crc_chunk_bytes > 0, "save sharded checkpoint: crc_chunk_bytes must be positive");
  for (const auto& [item, item_specs] : specs) {
    PAX_CHECK(items.trees.count(item), "save sharded checkpoint: specs name the item '", item,
              "', which is not a tree item of the save");
  }
  PreparedCheckpoint whole = prepare_checkpoint(items, step, config_json);
  PreparedShards p;
  p.metadata = std::move(whole.metadata);
  p.json = std::move(whole.json);
  for (auto& [item, named] : whole.trees) {
    TreeItemRecord& rec = p.metadata.trees.at(item);
    rec.crc_chunk_bytes = crc_chunk_bytes;
    const auto sit = specs.find(item);
    std::set<std::string> used;
    std::vector<ShardedLeaf>& leaves = p.trees[item];
    for (size_t i = 0; i < named.size(); ++i) {
      const Array& a = named[i].array;
      dist::ShardSpec spec{a.shape()};
      if (sit != specs.end()) {
        auto it = sit->second.find(named[i].name);
        if (it != sit->second.end()) {
          spec = it->second;
          used.insert(named[i].name);
        }
      }
      const std::string what = "save sharded checkpoint: item '" + item + "', leaf '" + named[i].name + "'";
      spec.check(what);
      PAX_CHECK(a.shape() == spec.local(), what, " is ", a.aval().str(), " but its spec (global ", spec.global,
                spec.replicated() ? ", replicated"
                                  : ", block " + std::to_string(spec.block()) + " of " + std::to_string(spec.blocks()) +
                                        " along dimension " + std::to_string(spec.dim) +
                                        (spec.outer_dim < 0 ? "" : " and " + std::to_string(spec.outer_dim)),
                ") needs the shape ", spec.local());
      TensorRecord& t = rec.tensors[i];
      t.shape = spec.global;
      if (!spec.replicated()) {
        t.split_dim = spec.dim;
        t.split_count = spec.count;
        if (spec.outer_dim >= 0) t.outer_dim = spec.outer_dim, t.outer_count = spec.outer_count;
      }
      leaves.push_back({named[i].name, a, spec});
    }
    if (sit != specs.end()) {
      for (const auto& [path, spec] : sit->second) {
        PAX_CHECK(used.count(path), "save sharded checkpoint: item '", item, "' has no leaf '", path,
                  "' that its specs name");
      }
    }
  }
  return p;
}

std::string shard_agreement_text(const PreparedShards& p) {
  std::string out = checkpoint_metadata_to_json(p.metadata);  // structures, dtypes, global shapes
  for (const auto& [item, rec] : p.metadata.trees) {
    out += "\nitem " + item + ", crc_chunk_bytes " + std::to_string(rec.crc_chunk_bytes);
    for (const TensorRecord& t : rec.tensors)
      out += "\n" + t.name + " split " + std::to_string(t.split_dim) + " " + std::to_string(t.split_count) + " " +
             std::to_string(t.outer_dim) + " " + std::to_string(t.outer_count);
  }
  for (const auto& [name, text] : p.json) out += "\njson " + name;
  return out;
}

std::vector<int64_t> shard_block_indices(const PreparedShards& p) {
  std::vector<int64_t> out;
  for (const auto& [item, leaves] : p.trees)
    for (const ShardedLeaf& l : leaves) out.push_back(l.spec.block());
  return out;
}

ShardWriters assign_shard_writers(const PreparedShards& p, const std::vector<std::vector<int64_t>>& by_process) {
  const auto tensors = flat_tensors(p);
  ShardWriters writers(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& [item, i] = tensors[t];
    const TensorRecord& rec = p.metadata.trees.at(item).tensors[i];
    writers[t].assign(size_t(rec.block_count()), -1);
    if (rec.split_dim < 0) {
      writers[t][0] = 0;
      continue;
    }
    for (size_t proc = 0; proc < by_process.size(); ++proc) {
      const int64_t k = by_process[proc].at(t);
      PAX_CHECK(k >= 0 && k < rec.block_count(), "save sharded checkpoint: process ", proc, " holds block ", k,
                " of item '", item, "', tensor '", rec.name, "', split into ", rec.block_count(), " blocks");
      if (writers[t][size_t(k)] < 0) writers[t][size_t(k)] = int(proc);
    }
    for (size_t k = 0; k < writers[t].size(); ++k) {
      PAX_CHECK(writers[t][k] >= 0, "save sharded checkpoint: no process holds block ", k, " of ", rec.block_count(),
                " of item '", item, "', tensor '", rec.name, "' (split along dimension ", rec.split_dim,
                "); every block index must be held by some process");
    }
  }
  return writers;
}

std::string ShardWriteReport::to_text() const {
  json j = {{"error", error}, {"files", file_bytes}, {"blocks", json::array()}};
  for (const Block& b : blocks) j["blocks"].push_back({b.tensor, b.index, b.crc32c, b.chunk_crc32c});
  return j.dump();
}

ShardWriteReport ShardWriteReport::from_text(const std::string& text, int process) {
  try {
    const json j = json::parse(text);
    ShardWriteReport r;
    r.error = j.at("error").get<std::string>();
    r.file_bytes = j.at("files").get<std::map<std::string, uint64_t>>();
    for (const json& b : j.at("blocks")) {
      r.blocks.push_back({b.at(0).get<size_t>(), b.at(1).get<int64_t>(), b.at(2).get<uint32_t>(),
                          b.at(3).get<std::vector<uint32_t>>()});
    }
    return r;
  } catch (const json::exception& e) {
    PAX_FAIL("save sharded checkpoint: process ", process, "'s write report is malformed: ", e.what());
  }
}

ShardWriteReport write_process_shards(const std::string& tmp_dir, const PreparedShards& mine, int process,
                                      const ShardWriters& writers) {
  ShardWriteReport report;
  try {
    const ShardWriteFault fault = g_next_write_fault.exchange(ShardWriteFault::none);
    PAX_CHECK(fault != ShardWriteFault::fail, "save sharded checkpoint: process ", process,
              " failed to write its shards (injected for testing)");
    size_t t = 0;
    for (const auto& [item, leaves] : mine.trees) {
      const uint64_t chunk = mine.metadata.trees.at(item).crc_chunk_bytes;
      std::vector<NamedArray> tensors;
      std::vector<ShardWriteReport::Block> blocks;
      for (const ShardedLeaf& l : leaves) {
        const int64_t k = l.spec.block();
        if (writers.at(t)[size_t(k)] == process) {
          tensors.push_back({l.path, l.block});
          blocks.push_back({t, k, 0, {}});
        }
        ++t;
      }
      const std::string file = fs::join(tmp_dir, shard_file_name(item, process));
      const std::vector<uint32_t> crcs =
          write_safetensors(file, tensors, safetensors_file_metadata(mine.metadata.step));
      report.file_bytes[item] = fs::File::open_read(file).size();
      if (fault == ShardWriteFault::kill) {
        // Half a file, as a process killed while writing leaves.
        testing_truncate_file(file, report.file_bytes[item] / 2);
        std::raise(SIGKILL);
      }
      for (size_t i = 0; i < tensors.size(); ++i) {
        const Array a = device_get(tensors[i].array);
        ShardWriteReport::Block& b = blocks[i];
        b.crc32c = crcs[i];
        if (a.nbytes() > chunk) {
          const auto* data = static_cast<const unsigned char*>(a.data());
          for (uint64_t off = 0; off < a.nbytes(); off += chunk)
            b.chunk_crc32c.push_back(crc32c(data + off, size_t(std::min<uint64_t>(chunk, a.nbytes() - off))));
        }
        report.blocks.push_back(std::move(b));
      }
    }
  } catch (const std::exception& e) {
    report.error = e.what();
    if (report.error.empty()) report.error = "unknown error";
  }
  return report;
}

std::string commit_shards(const PreparedShards& chief, const std::vector<ShardWriteReport>& reports,
                          const ShardWriters& writers, const std::string& ckpt_dir, const std::string& prefix) {
  const std::string tmp = tmp_checkpoint_path(ckpt_dir, prefix, chief.metadata.step);
  try {
    for (size_t p = 0; p < reports.size(); ++p) {
      PAX_CHECK(reports[p].error.empty(), "save sharded checkpoint: process ", p,
                " could not write its shards, so nothing was committed: ", reports[p].error);
    }
    CheckpointMetadata m = chief.metadata;
    const auto tensors = flat_tensors(chief);
    // Each process's expected tensors per item, from the writer assignment.
    std::vector<std::map<std::string, std::set<std::string>>> expected(reports.size());
    for (size_t t = 0; t < tensors.size(); ++t) {
      TensorRecord& rec = m.trees.at(tensors[t].first).tensors[tensors[t].second];
      rec.blocks.assign(writers[t].size(), {});
      for (size_t k = 0; k < writers[t].size(); ++k) {
        rec.blocks[k].file = size_t(writers[t][k]);
        expected.at(size_t(writers[t][k]))[tensors[t].first].insert(rec.name);
      }
    }
    std::vector<std::vector<bool>> reported(tensors.size());
    for (size_t t = 0; t < tensors.size(); ++t) reported[t].assign(writers[t].size(), false);
    for (size_t p = 0; p < reports.size(); ++p) {
      for (const ShardWriteReport::Block& b : reports[p].blocks) {
        PAX_CHECK(b.tensor < tensors.size() && b.index >= 0 && size_t(b.index) < writers[b.tensor].size() &&
                      writers[b.tensor][size_t(b.index)] == int(p),
                  "save sharded checkpoint: process ", p, " reports a block it was not assigned");
        ShardBlockRecord& r =
            m.trees.at(tensors[b.tensor].first).tensors[tensors[b.tensor].second].blocks[size_t(b.index)];
        r.crc32c = b.crc32c;
        r.chunk_crc32c = b.chunk_crc32c;
        reported[b.tensor][size_t(b.index)] = true;
      }
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      for (size_t k = 0; k < reported[t].size(); ++k) {
        PAX_CHECK(reported[t][k], "save sharded checkpoint: process ", writers[t][k], " did not report block ", k,
                  " of item '", tensors[t].first, "', tensor '",
                  m.trees.at(tensors[t].first).tensors[tensors[t].second].name, "'");
      }
    }
    for (auto& [item, rec] : m.trees) {
      for (size_t p = 0; p < reports.size(); ++p) {
        const std::string name = shard_file_name(item, int64_t(p));
        const std::string file = fs::join(tmp, name);
        const auto bytes = reports[p].file_bytes.find(item);
        PAX_CHECK(bytes != reports[p].file_bytes.end(), "save sharded checkpoint: process ", p,
                  " reports no file for item '", item, "'");
        PAX_CHECK(fs::exists(file), "save sharded checkpoint: shard file '", file, "' of process ", p,
                  " is missing, so nothing was committed");
        const uint64_t size = fs::File::open_read(file).size();
        PAX_CHECK(size == bytes->second, "save sharded checkpoint: shard file '", file, "' is ", size,
                  " bytes but process ", p, " wrote ", bytes->second, ", so nothing was committed");
        const SafetensorsReader reader(file);
        std::set<std::string> held;
        for (const SafetensorsEntry& e : reader.header().tensors) held.insert(e.name);
        PAX_CHECK(held == expected[p][item], "save sharded checkpoint: shard file '", file, "' holds ", held.size(),
                  " tensors, not the ", expected[p][item].size(), " blocks assigned to process ", p);
        rec.files.push_back({name, size});
      }
    }
    return commit_checkpoint(std::move(m), chief.json, ckpt_dir, prefix);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
}

std::string save_sharded_checkpoint(const std::string& ckpt_dir, const CheckpointItems& items,
                                    const ItemShardSpecs& specs, CheckpointStep step,
                                    const ShardedSaveOptions& options) {
  dist::ProcessGroup& group = dist::process_group();
  const int me = group.process_index();
  PAX_CHECK(!options.prefix.empty() && options.prefix.find('/') == std::string::npos,
            "save sharded checkpoint: prefix must be a non-empty file name prefix, got '", options.prefix, "'");
  // A local error is exchanged with the agreement, so that every process
  // throws at once instead of waiting for the one that stopped.
  std::optional<PreparedShards> mine;
  std::string text;
  try {
    mine = prepare_shards(items, specs, step, options.config_json, options.crc_chunk_bytes);
    text = "ckpt_dir '" + ckpt_dir + "', prefix '" + options.prefix + "'\n" + shard_agreement_text(*mine);
  } catch (const std::exception& e) {
    text = std::string("\x01") + e.what();
  }
  const std::vector<std::string> texts = all_gather_strings(text);
  for (size_t p = 0; p < texts.size(); ++p) {
    if (!texts[p].empty() && texts[p][0] == '\x01') PAX_FAIL("process ", p, ": ", texts[p].substr(1));
  }
  std::vector<int> differ;
  for (size_t p = 1; p < texts.size(); ++p)
    if (texts[p] != texts[0]) differ.push_back(int(p));
  PAX_CHECK(differ.empty(),
            "save sharded checkpoint: every process must save the same checkpoint (directory, step, items, tree "
            "structures, dtypes, global shapes and splits); process(es) ",
            ranks_str(differ), " differ from process 0");

  const std::vector<int64_t> indices = shard_block_indices(*mine);
  std::vector<std::vector<int64_t>> by_process(size_t(group.process_count()));
  if (!indices.empty()) {
    const int64_t n = int64_t(indices.size());
    const std::vector<int64_t> all =
        group.all_gather(from_host(indices.data(), Shape{n}, DType::i64)).to_vector<int64_t>();
    for (size_t p = 0; p < by_process.size(); ++p)
      by_process[p].assign(all.begin() + int64_t(p) * n, all.begin() + int64_t(p + 1) * n);
  }
  const ShardWriters writers = assign_shard_writers(*mine, by_process);

  const std::string tmp = tmp_checkpoint_path(ckpt_dir, options.prefix, step);
  dist::run_on_root([&] {
    fs::make_dirs(ckpt_dir);
    remove_tmp_checkpoints(ckpt_dir, options.prefix);
    fs::make_dirs(tmp);
  });
  const ShardWriteReport report = write_process_shards(tmp, *mine, me, writers);
  group.meet_after("writing checkpoint shards");
  const std::vector<std::string> report_texts = all_gather_strings(report.to_text());
  dist::run_on_root([&] {
    std::vector<ShardWriteReport> reports;
    for (size_t p = 0; p < report_texts.size(); ++p)
      reports.push_back(ShardWriteReport::from_text(report_texts[p], int(p)));
    commit_shards(*mine, reports, writers, ckpt_dir, options.prefix);
    if (options.after_commit) options.after_commit();
  });
  return fs::join(ckpt_dir, checkpoint_dir_name(options.prefix, step));
}

void inject_shard_write_fault_for_testing(ShardWriteFault fault) { g_next_write_fault = fault; }

// ---------------------------------------------------------------------------
// Reading

Tree read_sharded_tree_item(const std::string& path, const std::string& name, const TreeItemRecord& stored,
                            const Tree* target, const dist::ShardSpecs& specs) {
  const TreeItemRecord rec = stored.sharded() ? stored : as_single_shard(stored, path, name);
  const std::string ctx = "restore: checkpoint '" + path + "', item '" + name + "'";
  const bool has_target = target && !target->is_none();
  std::vector<Array> target_leaves;
  if (has_target) {
    const std::vector<Array> placeholders(rec.tensors.size(), scalar(0.0f));
    const Tree stored_tree = tree_from_records(rec.structure, placeholders);
    const std::string diff = tree_structure_diff(stored_tree, *target);
    PAX_CHECK(diff.empty(), ctx, ": the stored tree differs from the target ", diff, " (stored ", rec.tensors.size(),
              " arrays, target ", tree_leaves(*target).size(),
              "); the checkpoint was written by another model or optimizer config");
    target_leaves = tree_leaves(*target);
  }
  std::set<std::string> names;
  for (const TensorRecord& t : rec.tensors) names.insert(t.name);
  for (const auto& [p, spec] : specs) {
    PAX_CHECK(names.count(p), ctx, ": a spec names the tensor '", p, "', which the item does not have");
  }
  ShardFiles files(path, rec, name);
  std::vector<Array> leaves;
  for (size_t i = 0; i < rec.tensors.size(); ++i) {
    const TensorRecord& t = rec.tensors[i];
    auto it = specs.find(t.name);
    const dist::ShardSpec spec = it != specs.end() ? it->second : dist::ShardSpec{t.shape};
    const std::string what = ctx + ", tensor '" + t.name + "'";
    spec.check(what);
    PAX_CHECK(spec.global == t.shape, what, ": its spec's global shape is ", spec.global, " but the checkpoint holds ",
              AVal{t.shape, t.dtype, false}.str());
    if (has_target) {
      const AVal& a = target_leaves[i].aval();
      PAX_CHECK(a.dtype == t.dtype && a.shape == spec.local(), what, " is ", AVal{spec.local(), t.dtype, false}.str(),
                " in the checkpoint (",
                spec.replicated() ? std::string("whole") : "block " + std::to_string(spec.block()), ") but ",
                AVal{a.shape, a.dtype, false}.str(), " in the target");
    }
    leaves.push_back(read_leaf(files, rec, t, spec, has_target && target_leaves[i].weak_type()));
  }
  return tree_from_records(rec.structure, leaves);
}

CheckpointItems read_checkpoint_sharded(const std::string& path, const std::map<std::string, Tree>& targets,
                                        const ItemShardSpecs& specs) {
  const CheckpointMetadata m = read_checkpoint_metadata(path);
  for (const auto& [item, s] : specs) {
    PAX_CHECK(m.trees.count(item), "restore: checkpoint '", path, "' has no item '", item, "' that specs name");
  }
  CheckpointItems out;
  auto read_item = [&](const std::string& item, const Tree* target) {
    auto it = m.trees.find(item);
    PAX_CHECK(it != m.trees.end(), "restore: checkpoint '", path, "' has no item '", item, "'");
    auto sit = specs.find(item);
    out.trees[item] =
        read_sharded_tree_item(path, item, it->second, target, sit == specs.end() ? dist::ShardSpecs{} : sit->second);
  };
  if (targets.empty()) {
    for (const auto& [item, rec] : m.trees) read_item(item, nullptr);
  } else {
    for (const auto& [item, target] : targets) read_item(item, &target);
  }
  out.json = read_checkpoint_json_items(path, m);
  return out;
}

}  // namespace pax::train

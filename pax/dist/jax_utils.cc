// Tree-level collectives: buckets of same-dtype leaves flattened into one
// buffer per collective, the replica check, and pad_shard_unpad.
#include "pax/dist/jax_utils.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "pax/core/error.h"
#include "pax/dist/process_group.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"

namespace pax::dist {
namespace {

// Leaf indices that travel together: one dtype, at most bucket_bytes (unless
// a single leaf is larger), in leaf order.
std::vector<std::vector<size_t>> make_buckets(const std::vector<Array>& leaves, int64_t bucket_bytes) {
  PAX_CHECK(bucket_bytes > 0, "pax::dist: bucket_bytes must be positive, got ", bucket_bytes);
  std::vector<DType> dtypes;
  for (const Array& leaf : leaves)
    if (std::find(dtypes.begin(), dtypes.end(), leaf.dtype()) == dtypes.end()) dtypes.push_back(leaf.dtype());
  std::vector<std::vector<size_t>> buckets;
  for (DType dtype : dtypes) {
    int64_t bytes = 0;
    std::vector<size_t> current;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].dtype() != dtype) continue;
      const int64_t leaf_bytes = int64_t(leaves[i].aval().shape.numel()) * int64_t(itemsize(dtype));
      if (!current.empty() && bytes + leaf_bytes > bucket_bytes) {
        buckets.push_back(std::move(current));
        current.clear();
        bytes = 0;
      }
      current.push_back(i);
      bytes += leaf_bytes;
    }
    if (!current.empty()) buckets.push_back(std::move(current));
  }
  return buckets;
}

// How a leaf travels in a bucket: `pack` makes it a vector or a matrix (the
// leaves of a bucket are concatenated along the last axis), `unpack` makes
// its part of the collective's result the result leaf.
using PackFn = std::function<Array(const Array& leaf)>;
using UnpackFn = std::function<Array(const Array& part, const Array& leaf)>;

// Applies `collective` to every bucket of `tree`'s leaves: a bucket of one
// leaf as it is (packed: false), a larger one packed into a single buffer
// (packed: true) and split back (by default every leaf raveled, and its part
// reshaped to the leaf's shape).
using BucketFn = std::function<Array(const Array& x, bool packed)>;
Tree bucketed(
    const Tree& tree, int64_t bucket_bytes, const BucketFn& collective,
    const PackFn& pack = [](const Array& leaf) { return ravel(leaf); },
    const UnpackFn& unpack = [](const Array& part, const Array& leaf) { return reshape(part, leaf.shape().dims()); }) {
  auto [leaves, def] = tree_flatten(tree);
  std::vector<Array> out(leaves.size());
  for (const std::vector<size_t>& bucket : make_buckets(leaves, bucket_bytes)) {
    if (bucket.size() == 1) {
      out[bucket[0]] = collective(leaves[bucket[0]], false);
      continue;
    }
    std::vector<Array> packed;
    Ints offsets;
    int64_t offset = 0;
    for (size_t i : bucket) {
      packed.push_back(pack(leaves[i]));
      offset += packed.back().shape().dims().back();
      offsets.push_back(offset);
    }
    offsets.pop_back();
    std::vector<Array> parts = split(collective(concatenate(packed, -1), true), offsets, -1);
    for (size_t k = 0; k < bucket.size(); ++k) out[bucket[k]] = unpack(parts[k], leaves[bucket[k]]);
  }
  return tree_unflatten(def, out);
}

// FNV-1a over a leaf's bytes: equal values give equal hashes on every process
// (the same binary), and a differing byte almost surely a different one.
int64_t leaf_hash(const Array& leaf) {
  const auto* bytes = static_cast<const uint8_t*>(leaf.data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < leaf.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return int64_t(h);
}

}  // namespace

Tree replicate(const Tree& tree, int root) {
  ProcessGroup& group = process_group();
  PAX_CHECK(root >= 0 && root < group.process_count(), "dist::replicate: root ", root, " is not a process in [0, ",
            group.process_count(), ")");
  if (group.process_count() == 1) return tree;
  return bucketed(tree, kDefaultBucketBytes, [&](const Array& x, bool) { return group.broadcast(x, root); });
}

Tree unreplicate(const Tree& tree) {
  ProcessGroup& group = process_group();
  if (group.process_count() == 1) return tree;
  const std::vector<Array> leaves = tree_leaves(tree);
  std::vector<int64_t> hashes;
  for (const Array& leaf : leaves) hashes.push_back(leaf_hash(leaf));
  const int64_t n = int64_t(hashes.size());
  // [processes, leaves]
  const std::vector<int64_t> all =
      group.all_gather(from_host(hashes.data(), Shape{n}, DType::i64)).to_vector<int64_t>();
  const std::vector<std::string> paths = tree_paths(tree);
  for (int64_t leaf = 0; leaf < n; ++leaf) {
    std::string differing;
    for (int p = 1; p < group.process_count(); ++p)
      if (all[size_t(p * n + leaf)] != all[size_t(leaf)])
        differing += (differing.empty() ? "" : ", ") + std::to_string(p);
    PAX_CHECK(differing.empty(), "dist::unreplicate: the replicas differ: leaf '", paths[size_t(leaf)],
              "' on process(es) ", differing, " is not the same as on process 0");
  }
  return tree;
}

Tree psum(const Tree& tree, const std::string& axis_name, int64_t bucket_bytes) {
  return bucketed(tree, bucket_bytes, [&](const Array& x, bool) { return lax::psum(x, axis_name); });
}

Tree pmean(const Tree& tree, const std::string& axis_name, int64_t bucket_bytes) {
  return bucketed(tree, bucket_bytes, [&](const Array& x, bool) { return lax::pmean(x, axis_name); });
}

Tree psum_scatter(const Tree& tree, const std::string& axis_name, int64_t scatter_dimension, bool tiled,
                  int64_t bucket_bytes) {
  const int64_t n = axis_size(axis_name);
  PAX_CHECK(n > 0, "dist::psum_scatter: axis '", axis_name, "' has no members to scatter over");
  const std::vector<Array> leaves = tree_leaves(tree);
  const std::vector<std::string> paths = tree_paths(tree);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& leaf = leaves[i];
    PAX_CHECK(leaf.ndim() > 0, "dist::psum_scatter: leaf '", paths[i], "' is ", leaf.aval().str(),
              "; scattering needs a dimension (rank >= 1)");
    PAX_CHECK(scatter_dimension >= -leaf.ndim() && scatter_dimension < leaf.ndim(), "dist::psum_scatter: leaf '",
              paths[i], "' ", leaf.aval().str(), " has no dimension ", scatter_dimension, " (valid: ", -leaf.ndim(),
              " to ", leaf.ndim() - 1, ")");
    const int64_t dim = normalize_axis(scatter_dimension, leaf.ndim(), "dist::psum_scatter");
    PAX_CHECK(tiled ? leaf.dim(dim) % n == 0 : leaf.dim(dim) == n, "dist::psum_scatter: leaf '", paths[i], "' ",
              leaf.aval().str(), " has size ", leaf.dim(dim), " in dimension ", dim, "; ",
              tiled ? "tiled scattering needs a multiple of" : "untiled scattering needs exactly", " the size ", n,
              " of axis '", axis_name, "'");
  }
  // In a bucket every leaf is a matrix [n, block elements] (the scattered
  // dimension leading): one tiled psum_scatter over dimension 0 gives this
  // member row i of each.
  auto leading = [&](const Array& leaf) {
    return normalize_axis(scatter_dimension, leaf.ndim(), "dist::psum_scatter");
  };
  auto pack = [&](const Array& leaf) {
    return reshape(moveaxis(leaf, leading(leaf), 0), {n, leaf.aval().shape.numel() / n});
  };
  auto unpack = [&](const Array& part, const Array& leaf) {
    const int64_t dim = leading(leaf);
    Ints rest = leaf.shape().dims();  // the other dimensions, in order
    rest.erase(rest.begin() + dim);
    if (!tiled) return reshape(part, rest);
    rest.insert(rest.begin(), leaf.dim(dim) / n);
    return moveaxis(reshape(part, rest), 0, dim);
  };
  auto scatter = [&](const Array& x, bool packed) {
    return packed ? lax::psum_scatter(x, axis_name, 0, /*tiled=*/true)
                  : lax::psum_scatter(x, axis_name, scatter_dimension, tiled);
  };
  return bucketed(tree, bucket_bytes, scatter, pack, unpack);
}

Tree all_gather_stacked(const Tree& tree) {
  ProcessGroup& group = process_group();
  return tree_map([&](const Array& x) { return group.all_gather(x, 0, /*tiled=*/false); }, tree);
}

Tree local_slice(const Tree& stacked) {
  ProcessGroup& group = process_group();
  const int64_t me = group.process_index(), count = group.process_count();
  return tree_map(
      [&](const Array& x) {
        PAX_CHECK(x.ndim() >= 1 && x.dim(0) == count, "dist::local_slice: a leaf of ", x.aval().str(),
                  " has no leading process axis of size ", count);
        return squeeze(slice_along(x, 0, me, me + 1), {0});
      },
      stacked);
}

PadShardUnpad::PadShardUnpad(PaddedFn fn, PadShardUnpadOptions options)
    : fn_(std::move(fn)), options_(std::move(options)) {
  for (int i : options_.static_argnums)
    PAX_CHECK(i >= 0, "dist::pad_shard_unpad: static_argnums entries are argument positions (>= 0), got ", i);
}

PadShardUnpad pad_shard_unpad(PaddedFn fn, PadShardUnpadOptions options) {
  return PadShardUnpad(std::move(fn), std::move(options));
}

Tree PadShardUnpad::operator()(const std::vector<Tree>& args, int64_t min_device_batch) const {
  PAX_CHECK(min_device_batch >= 0, "dist::pad_shard_unpad: min_device_batch must be >= 0, got ", min_device_batch);
  const std::vector<int>& statics = options_.static_argnums;
  for (int i : statics)
    PAX_CHECK(size_t(i) < args.size(), "dist::pad_shard_unpad: static_argnums entry ", i, " is out of range for ",
              args.size(), " arguments");
  auto is_static = [&](size_t i) { return std::find(statics.begin(), statics.end(), int(i)) != statics.end(); };
  // The batch size: the leading size shared by every leaf of every padded argument.
  int64_t rows = -1;
  std::string first;
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_static(i)) continue;
    for (const Array& leaf : tree_leaves(args[i])) {
      const std::string where = "argument " + std::to_string(i) + "'s " + leaf.aval().str();
      PAX_CHECK(leaf.ndim() >= 1, "dist::pad_shard_unpad: ", where, " has no batch axis to pad and shard (list ",
                "its position in static_argnums to pass it as it is)");
      if (rows < 0) {
        rows = leaf.dim(0);
        first = where;
      }
      PAX_CHECK(leaf.dim(0) == rows, "dist::pad_shard_unpad: every padded leaf needs the same leading size; got ",
                where, " beside ", first);
    }
  }
  PAX_CHECK(rows >= 0, "dist::pad_shard_unpad: no argument outside static_argnums holds an array to pad and shard");
  ProcessGroup& group = process_group();
  const int64_t count = group.process_count(), me = group.process_index();
  const int64_t per = std::max((rows + count - 1) / count, min_device_batch);
  const int64_t begin = std::min(me * per, rows), end = std::min((me + 1) * per, rows);
  auto shard = [&](const Array& x) {
    Array part = slice_along(x, 0, begin, end);
    if (end - begin == per) return part;
    std::vector<std::pair<int64_t, int64_t>> widths(size_t(x.ndim()), {0, 0});
    widths[0].second = per - (end - begin);
    return pad(part, widths);
  };
  std::vector<Tree> sharded;
  for (size_t i = 0; i < args.size(); ++i) sharded.push_back(is_static(i) ? args[i] : tree_map(shard, args[i]));
  Tree out = fn_(sharded);
  if (options_.static_return) return out;
  return tree_map(
      [&](const Array& y) {
        PAX_CHECK(y.ndim() >= 1 && y.dim(0) == per, "dist::pad_shard_unpad: a result of ", y.aval().str(),
                  " has no leading batch axis of the shard's size ", per, "; use static_return for reduced results");
        return slice_along(group.all_gather(y, 0, /*tiled=*/true), 0, 0, rows);
      },
      out);
}

std::string broadcast_string(const std::string& s, int root) {
  ProcessGroup& group = process_group();
  PAX_CHECK(root >= 0 && root < group.process_count(), "dist::broadcast_string: root ", root,
            " is not a process in [0, ", group.process_count(), ")");
  if (group.process_count() == 1) return s;
  const bool mine = group.process_index() == root;
  const int64_t length = group.broadcast(scalar(mine ? double(s.size()) : 0.0, DType::i64), root).item<int64_t>();
  if (length == 0) return {};
  std::string buffer = mine ? s : std::string(size_t(length), '\0');
  const std::vector<uint8_t> bytes =
      group.broadcast(from_host(buffer.data(), Shape{length}, DType::u8), root).to_vector<uint8_t>();
  return std::string(bytes.begin(), bytes.end());
}

namespace {

// Runs fn where `runs`, then throws on every process the message of the
// lowest-ranked process where it threw. fn may outlast the collectives'
// timeout (a restore of a large checkpoint): the processes meet after it
// with the phase timeout, `phase` naming it.
void run_and_share_error(const std::function<void()>& fn, bool runs, const std::string& phase) {
  ProcessGroup& group = process_group();
  if (group.process_count() == 1) {
    if (runs) fn();
    return;
  }
  std::string error;
  if (runs) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown error";
    }
  }
  group.meet_after(phase);
  const int none = group.process_count();
  const int failed =
      group.all_reduce(scalar(double(error.empty() ? none : group.process_index()), DType::i32), ReduceOp::min)
          .item<int32_t>();
  if (failed != none) throw Error(broadcast_string(error, failed));
}

}  // namespace

void run_on_root(const std::function<void()>& fn, int root) {
  run_and_share_error(fn, process_group().process_index() == root,
                      "a phase run on process " + std::to_string(root) + " alone");
}

void run_on_every_process(const std::function<void()>& fn, const std::string& phase) {
  run_and_share_error(fn, true, phase);
}

}  // namespace pax::dist

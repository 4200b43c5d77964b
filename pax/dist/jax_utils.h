// flax.jax_utils for processes: the tree-level helpers of data-parallel
// training, where the "devices" are the processes of the process group.
//
//   state = dist::replicate(state);           // rank 0's values everywhere
//   grads = dist::pmean(grads, "processes");  // one all-reduce per dtype bucket
//   shard = dist::psum_scatter(grads, "processes", 0, true);  // this process's blocks
//   dist::unreplicate(state);                 // the one copy (checked identical)
//   auto eval = dist::pad_shard_unpad(fn);    // a global batch split over ranks
//
// psum / pmean / psum_scatter are written with pax ops, so inside jit they
// become one collective primitive per bucket in the jaxpr; the others are
// host-side (eager) calls.
// With a single process every helper returns its input unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pax/core/tree.h"

namespace pax::dist {

// Leaves of one dtype are concatenated into buckets of at most this many
// bytes (a leaf larger than that is a bucket of its own), so that a whole
// gradient tree is reduced in as few large collectives as possible.
inline constexpr int64_t kDefaultBucketBytes = int64_t(256) << 20;

// Every process gets process `root`'s tree (flax's replicate): parameters
// made identical on all ranks after initialisation or a restore. The trees
// must have the same structure, shapes and dtypes on every process.
Tree replicate(const Tree& tree, int root = 0);

// The single instance of a replicated tree (flax's unreplicate): checks that
// every process holds the same values (a 64-bit hash per leaf, gathered) and
// returns this process's copy. Throws pax::Error naming the first leaf whose
// values differ and the processes that differ from process 0.
Tree unreplicate(const Tree& tree);

// psum / pmean of every leaf over `axis_name` (lax.psum / flax's pmean on a
// tree), bucketed by dtype. Traceable: usable inside jit and grad.
Tree psum(const Tree& tree, const std::string& axis_name, int64_t bucket_bytes = kDefaultBucketBytes);
Tree pmean(const Tree& tree, const std::string& axis_name, int64_t bucket_bytes = kDefaultBucketBytes);

// lax.psum_scatter of every leaf over `axis_name`: each process keeps its
// block of dimension `scatter_dimension` of every summed leaf (tiled: that
// dimension divided by the axis size; untiled: it has the axis size and is
// removed), as a fully sharded step reduce-scatters its gradients. Bucketed
// by dtype like psum (one reduce-scatter per bucket) and traceable. Every
// leaf needs that dimension divisible by (tiled) or equal to the axis size.
Tree psum_scatter(const Tree& tree, const std::string& axis_name, int64_t scatter_dimension = 0, bool tiled = false,
                  int64_t bucket_bytes = kDefaultBucketBytes);

// Every process's tree, each leaf stacked along a new leading axis in
// process order (host-side). local_slice takes this process's entry back.
Tree all_gather_stacked(const Tree& tree);
Tree local_slice(const Tree& stacked);

// flax's pad_shard_unpad. The returned function takes fn's arguments; every
// argument not in static_argnums is padded along axis 0 (with zeros) to a
// multiple of process_count(), and to at least min_device_batch rows per
// process when the call gives one (flax's keyword-only min_device_batch,
// which spares the last, short batch a recompilation); each process gets its
// contiguous shard of those arguments and runs fn on them beside the static
// arguments, passed as they are. fn's results are gathered in process order
// and the padding rows dropped, unless static_return (fn's own result, e.g.
// metrics it already reduced). Every leaf of the padded arguments needs the
// same leading size; every leaf of a gathered result a leading batch axis.
//
//   auto eval = dist::pad_shard_unpad([&](const std::vector<Tree>& a) { return forward(a[0], a[1]); });
//   Tree logits = eval({params, batch});                                // params (argument 0) as is
//   Tree last = eval({params, last_batch}, /*min_device_batch=*/32);   // padded to 32 rows per process
//
// C++ functions have no keyword arguments, so flax's static_argnames has no
// counterpart here: what flax passes by name is a positional argument, made
// static by listing its position in static_argnums. A static value that is
// not a tree (a flag, a config) is captured by fn instead.
using PaddedFn = std::function<Tree(const std::vector<Tree>& args)>;

struct PadShardUnpadOptions {
  // Positions of the arguments forwarded as they are, neither padded nor
  // sharded. flax's default (0,): by far the most common use passes params first.
  std::vector<int> static_argnums = {0};
  // Return fn's result as it is instead of gathering and unpadding it.
  bool static_return = false;
};

class PadShardUnpad {
 public:
  PadShardUnpad(PaddedFn fn, PadShardUnpadOptions options);
  // min_device_batch: the least rows per process (0: only what the batch needs).
  Tree operator()(const std::vector<Tree>& args, int64_t min_device_batch = 0) const;

 private:
  PaddedFn fn_;
  PadShardUnpadOptions options_;
};

PadShardUnpad pad_shard_unpad(PaddedFn fn, PadShardUnpadOptions options = {});

// Process `root`'s string on every process (the others' `s` is ignored).
std::string broadcast_string(const std::string& s, int root = 0);

// Runs fn on process `root` only; when it throws there, every process throws
// pax::Error with that message, at once instead of after a timeout. For
// checks only one process can make (the checkpoint it alone reads). The
// others wait for it up to the group's phase_timeout_seconds().
void run_on_root(const std::function<void()>& fn, int root = 0);
// Runs fn on every process; when it throws on any, every process throws the
// message of the lowest-ranked one that failed (`phase` names the wait).
void run_on_every_process(const std::function<void()>& fn, const std::string& phase);

}  // namespace pax::dist

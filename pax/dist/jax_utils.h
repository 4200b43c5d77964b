// flax.jax_utils for processes: the tree-level helpers of data-parallel
// training, where the "devices" are the processes of the process group.
//
//   state = dist::replicate(state);           // rank 0's values everywhere
//   grads = dist::pmean(grads, "processes");  // one all-reduce per dtype bucket
//   dist::unreplicate(state);                 // the one copy (checked identical)
//   auto eval = dist::pad_shard_unpad(fn);    // a global batch split over ranks
//
// psum / pmean are written with pax ops, so inside jit they become one psum
// primitive per bucket in the jaxpr; the others are host-side (eager) calls.
// With a single process every helper returns its input unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

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

// Every process's tree, each leaf stacked along a new leading axis in
// process order (host-side). local_slice takes this process's entry back.
Tree all_gather_stacked(const Tree& tree);
Tree local_slice(const Tree& stacked);

// flax's pad_shard_unpad: returns a function that pads every leaf of `batch`
// along axis 0 (with zeros) to a multiple of process_count() — and to at
// least min_process_batch rows per process — gives each process its
// contiguous shard, runs fn(static_args, shard) there, then gathers the
// results in process order and drops the padding rows (static_return: fn's
// own result, e.g. already-reduced metrics). Every leaf of `batch` needs the
// same leading size; every leaf of a gathered result a leading batch axis.
using ShardFn = std::function<Tree(const Tree& static_args, const Tree& batch)>;
ShardFn pad_shard_unpad(ShardFn fn, bool static_return = false, int64_t min_process_batch = 0);

// Process `root`'s string on every process (the others' `s` is ignored).
std::string broadcast_string(const std::string& s, int root = 0);

// Runs fn on process `root` only; when it throws there, every process throws
// pax::Error with that message, at once instead of after a timeout. For
// checks only one process can make (the checkpoint it alone reads). The
// others wait for it up to the group's phase_timeout_seconds().
void run_on_root(const std::function<void()>& fn, int root = 0);

}  // namespace pax::dist

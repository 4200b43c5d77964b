// ExampleOrder: which examples each batch of one host holds, for inputs over
// a finite, indexable set of examples (packed text rows, images). It
// implements Pax's multi-host contract and the position part of state():
//
//  - every epoch is a permutation of all examples (the identity without
//    shuffle, else drawn from (input_random_seed, epoch), so a new order
//    each epoch and the same one on every host);
//  - host h reads the positions h, h + H, h + 2H, ... of it (H hosts):
//    the shards are disjoint and together cover the data;
//  - repeat = true: a host's stream runs on through the epochs, a batch may
//    straddle two of them, and nothing is padded; every host reads the first
//    floor(n / H) of its positions (the n mod H left over change with the
//    shuffle every epoch);
//  - repeat = false: one epoch of ceil(ceil(n / H) / batch_size) batches on
//    every host, each example read once, the slots beyond the host's share
//    padded (index -1), then OutOfRange.
// Either way all hosts move in step: after the same number of batches their
// states are identical, so a checkpoint may keep one copy for all of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/data/base_input.h"

namespace pax::data {

class ExampleOrder {
 public:
  ExampleOrder() = default;
  // `who` names the input in messages.
  ExampleOrder(int64_t num_examples, const BaseInput::HParams& hparams, std::string who);

  int64_t num_examples() const { return num_examples_; }
  // Examples in this host's share of one epoch.
  int64_t host_examples() const { return host_examples_; }
  // Batches per epoch on every host (repeat = false); nullopt when repeating.
  std::optional<int64_t> batches_per_epoch() const;

  // The example indices of the next batch (batch_size of them, -1 for a
  // padding slot). Throws OutOfRange at the end of a finite epoch.
  std::vector<int64_t> next_batch();
  void reset();
  // {epoch, position, seed, num_examples, num_infeed_hosts}: i64 scalars.
  // position counts the slots of this host's epoch already read.
  Tree state() const;
  void restore_state(const Tree& state);
  // Host 0's state of a run with other hosts as this host's state at the
  // same global position: the epoch's slots read so far are hosts x
  // position, so this host's position is that over num_infeed_hosts, when
  // it divides (nullopt otherwise, or for other data). The same examples
  // then follow to the end of the epoch; later epochs leave out n mod H
  // examples of this host count instead of the saved one's.
  std::optional<Tree> reshard_state(const Tree& host0_state) const;

 private:
  // The example at local slot `slot` of `epoch` (-1 beyond the share).
  int64_t example_at(int64_t epoch, int64_t slot);

  std::string who_;
  int64_t num_examples_ = 0, batch_size_ = 1, num_hosts_ = 1, host_ = 0;
  int64_t host_examples_ = 0;
  bool repeat_ = true, shuffle_ = false;
  int64_t seed_ = 0;
  int64_t epoch_ = 0, position_ = 0;
  // The permutation of cached_epoch_ (empty without shuffle).
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
};

}  // namespace pax::data

// ExampleOrder: sharding, shuffling, padding and position bookkeeping.
#include "pax/data/sharding.h"

#include "pax/data/host_random.h"

namespace pax::data {

ExampleOrder::ExampleOrder(int64_t num_examples, const BaseInput::HParams& p, std::string who)
    : who_(std::move(who)),
      num_examples_(num_examples),
      batch_size_(p.batch_size),
      num_hosts_(p.num_infeed_hosts),
      host_(p.infeed_host_index),
      repeat_(p.repeat),
      shuffle_(p.shuffle),
      seed_(p.input_random_seed) {
  PAX_CHECK(num_examples > 0, who_, ": the data has no examples");
  // Repeating, every host reads floor(n / H) examples an epoch, so that all
  // hosts stay at the same position (and save the same state); a finite
  // epoch reads every example once and pads the shorter shares instead.
  host_examples_ = repeat_ ? num_examples_ / num_hosts_
                           : (num_examples_ > host_ ? (num_examples_ - host_ + num_hosts_ - 1) / num_hosts_ : 0);
  PAX_CHECK(host_examples_ > 0, who_, ": ", num_examples_,
            " examples cannot be shared by num_infeed_hosts = ", num_hosts_, " hosts (host ", host_,
            " would get none)");
}

std::optional<int64_t> ExampleOrder::batches_per_epoch() const {
  if (repeat_) return std::nullopt;
  const int64_t largest_share = (num_examples_ + num_hosts_ - 1) / num_hosts_;
  return (largest_share + batch_size_ - 1) / batch_size_;
}

int64_t ExampleOrder::example_at(int64_t epoch, int64_t slot) {
  if (slot >= host_examples_) return -1;
  const int64_t global = host_ + slot * num_hosts_;
  if (!shuffle_) return global;
  if (cached_epoch_ != epoch) {
    permutation_ = random_permutation(num_examples_, hash_combine(uint64_t(seed_), uint64_t(epoch)));
    cached_epoch_ = epoch;
  }
  return permutation_[size_t(global)];
}

std::vector<int64_t> ExampleOrder::next_batch() {
  std::vector<int64_t> out(static_cast<size_t>(batch_size_));
  if (!repeat_) {
    const int64_t slots = *batches_per_epoch() * batch_size_;
    if (position_ >= slots) {
      throw OutOfRange(who_ + ": end of data (one epoch of " + std::to_string(*batches_per_epoch()) +
                       " batches per host read; reset() rewinds)");
    }
    for (int64_t i = 0; i < batch_size_; ++i) out[size_t(i)] = example_at(epoch_, position_ + i);
    position_ += batch_size_;
    return out;
  }
  for (int64_t i = 0; i < batch_size_; ++i) {
    out[size_t(i)] = example_at(epoch_, position_);
    if (++position_ == host_examples_) {
      position_ = 0;
      ++epoch_;
    }
  }
  return out;
}

void ExampleOrder::reset() {
  epoch_ = 0;
  position_ = 0;
}

Tree ExampleOrder::state() const {
  return int_state({{"epoch", epoch_},
                    {"position", position_},
                    {"seed", seed_},
                    {"num_examples", num_examples_},
                    {"num_infeed_hosts", num_hosts_}});
}

std::optional<Tree> ExampleOrder::reshard_state(const Tree& host0_state) const {
  const int64_t n = state_value(host0_state, "num_examples", who_);
  const int64_t hosts = state_value(host0_state, "num_infeed_hosts", who_);
  const int64_t epoch = state_value(host0_state, "epoch", who_);
  const int64_t position = state_value(host0_state, "position", who_);
  if (n != num_examples_ || hosts < 1 || epoch < 0 || position < 0 || (hosts * position) % num_hosts_ != 0)
    return std::nullopt;
  const int64_t mine = hosts * position / num_hosts_;
  const int64_t limit = repeat_ ? host_examples_ - 1 : *batches_per_epoch() * batch_size_;
  if (mine > limit) return std::nullopt;
  return int_state({{"epoch", epoch},
                    {"position", mine},
                    {"seed", state_value(host0_state, "seed", who_)},
                    {"num_examples", n},
                    {"num_infeed_hosts", num_hosts_}});
}

void ExampleOrder::restore_state(const Tree& state) {
  const int64_t n = state_value(state, "num_examples", who_);
  const int64_t hosts = state_value(state, "num_infeed_hosts", who_);
  PAX_CHECK(n == num_examples_, who_, ": restore_state: the state was saved over ", n,
            " examples but the data now has ", num_examples_, "; the data or its config changed");
  PAX_CHECK(hosts == num_hosts_, who_, ": restore_state: the state was saved with num_infeed_hosts = ", hosts,
            ", this input has ", num_hosts_, "; the stream cannot continue exactly");
  const int64_t epoch = state_value(state, "epoch", who_);
  const int64_t position = state_value(state, "position", who_);
  const int64_t limit = repeat_ ? host_examples_ - 1 : *batches_per_epoch() * batch_size_;
  PAX_CHECK(epoch >= 0 && position >= 0 && position <= limit, who_, ": restore_state: position ", position,
            " of epoch ", epoch, " is out of range [0, ", limit, "]");
  // The saved seed wins over the config's: the stream continues as it began.
  seed_ = state_value(state, "seed", who_);
  epoch_ = epoch;
  position_ = position;
  cached_epoch_ = -1;
}

}  // namespace pax::data

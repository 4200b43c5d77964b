// SyntheticInput.
#include "pax/data/synthetic.h"

#include "pax/core/parallel.h"
#include "pax/data/host_random.h"

namespace pax::data {

SyntheticInput::SyntheticInput(const HParams& hp) : BaseInput(hp), seed_(hp.input_random_seed) {
  const std::string who = description();
  PAX_CHECK(!hp.num_batches || *hp.num_batches >= 1, who, ": num_batches must be >= 1 or None, got ", *hp.num_batches);
  if (hp.task == SyntheticTask::lm) {
    PAX_CHECK(hp.seq_length >= 1, who, ": seq_length must be >= 1, got ", hp.seq_length);
    PAX_CHECK(hp.vocab_size >= 1, who, ": vocab_size must be >= 1, got ", hp.vocab_size);
  } else {
    for (int64_t d : hp.input_shape)
      PAX_CHECK(d >= 0, who, ": input_shape must be non-negative, got ", Shape(hp.input_shape));
    PAX_CHECK(hp.num_classes >= 1, who, ": num_classes must be >= 1, got ", hp.num_classes);
  }
  PAX_CHECK(!(!hp.num_batches && !hp.repeat), who,
            ": repeat = false needs num_batches (an endless synthetic stream has no end to stop at)");
}

Tree SyntheticInput::get_next() {
  const auto& hp = hparams<HParams>();
  if (hp.num_batches && position_ == *hp.num_batches) {
    if (!hp.repeat) {
      throw OutOfRange(description() + ": end of data (" + std::to_string(*hp.num_batches) +
                       " batches read; reset() rewinds)");
    }
    position_ = 0;
    ++epoch_;
  }
  // Every epoch repeats the same batches: the key ignores the epoch.
  const uint64_t key = hash_combine(uint64_t(seed_), uint64_t(position_));
  ++position_;
  return make_batch(key);
}

Tree SyntheticInput::make_batch(uint64_t key) const {
  const auto& hp = hparams<HParams>();
  const int64_t b = hp.batch_size;
  // Each example draws from its own generator, keyed by its row in the
  // global batch, so rows fill in parallel and a row's values depend on
  // neither the batch size nor the host that reads it.
  const int64_t first_row = hp.infeed_host_index * b;
  auto generator = [&](int64_t row) { return SplitMix64(hash_combine(key, uint64_t(first_row + row))); };
  if (hp.task == SyntheticTask::lm) {
    const int64_t t = hp.seq_length;
    std::vector<int32_t> ids(size_t(b * t)), labels(size_t(b * t));
    parallel_for(b, std::max<int64_t>(1, 16384 / t), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        SplitMix64 gen = generator(i);
        int32_t prev = int32_t(gen.below(uint64_t(hp.vocab_size)));
        for (int64_t j = 0; j < t; ++j) {
          const int32_t next = int32_t(gen.below(uint64_t(hp.vocab_size)));
          ids[size_t(i * t + j)] = prev;
          labels[size_t(i * t + j)] = next;
          prev = next;
        }
      }
    });
    const Shape shape{b, t};
    return Tree::dict({{"ids", array(ids, shape)},
                       {"labels", array(labels, shape)},
                       {"paddings", array(std::vector<float>(size_t(b * t), 0.0f), shape)},
                       {"weights", array(std::vector<float>(size_t(b * t), 1.0f), shape)}});
  }
  const int64_t n = Shape(hp.input_shape).numel();
  std::vector<float> inputs(size_t(b * n));
  std::vector<int32_t> labels(static_cast<size_t>(b));
  parallel_for(b, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      SplitMix64 gen = generator(i);
      labels[size_t(i)] = int32_t(gen.below(uint64_t(hp.num_classes)));
      for (int64_t j = 0; j < n; ++j) inputs[size_t(i * n + j)] = float(gen.uniform());
    }
  });
  std::vector<int64_t> dims{b};
  dims.insert(dims.end(), hp.input_shape.begin(), hp.input_shape.end());
  return Tree::dict({{"inputs", array(inputs, Shape(dims))},
                     {"labels", array(labels)},
                     {"weights", array(std::vector<float>(size_t(b), 1.0f))}});
}

void SyntheticInput::reset() {
  epoch_ = 0;
  position_ = 0;
}

Tree SyntheticInput::state() const { return int_state({{"epoch", epoch_}, {"position", position_}, {"seed", seed_}}); }

void SyntheticInput::restore_state(const Tree& state) {
  const std::string who = description();
  const int64_t epoch = state_value(state, "epoch", who), position = state_value(state, "position", who);
  const auto& hp = hparams<HParams>();
  PAX_CHECK(epoch >= 0 && position >= 0 && (!hp.num_batches || position <= *hp.num_batches), who,
            ": restore_state: position ", position, " of epoch ", epoch, " is out of range");
  seed_ = state_value(state, "seed", who);
  epoch_ = epoch;
  position_ = position;
}

PAX_REGISTER_INPUT(SyntheticInput);

}  // namespace pax::data

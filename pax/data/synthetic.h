// SyntheticInput: random batches of a given shape for benchmarks and the big
// configs, where reading real data would only get in the way. Row r of
// batch k of the global batch is a pure function of (input_random_seed, k,
// r), and host h's batch is rows [h * batch_size, (h + 1) * batch_size) of
// it: deterministic per step, different across hosts, and the hosts of a
// multi-process run together read what one process reads with their
// summed batch (its losses are then one process's), cheap to make.
//
//   task = lm:             ids, labels (B, seq_length) i32 in [0, vocab_size),
//                          labels[t] = ids[t + 1] (one random sequence of
//                          T + 1 tokens), paddings 0, weights 1 (f32)
//   task = classification: inputs (B, input_shape...) f32 uniform in [0, 1),
//                          labels (B,) i32 in [0, num_classes), weights 1
//
// num_batches None: an endless stream; otherwise an "epoch" of num_batches
// batches, repeated (repeat = true) or followed by OutOfRange.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pax/data/base_input.h"

namespace pax::data {

enum class SyntheticTask : int { lm, classification };
PAX_ENUM(SyntheticTask, "lm", "classification")

class SyntheticInput : public BaseInput {
 public:
  struct HParams : BaseInput::HParams {
    SyntheticTask task = SyntheticTask::lm;
    int64_t seq_length = 128;
    int64_t vocab_size = 32000;
    std::vector<int64_t> input_shape = {28, 28, 1};
    int64_t num_classes = 10;
    std::optional<int64_t> num_batches;
    PAX_HPARAMS(SyntheticInput, BaseInput::HParams, (task, "lm: token ids and labels; classification: images."),
                (seq_length, "lm: tokens per example (T).", range::size),
                (vocab_size, "lm: ids are in [0, vocab_size).", range::size),
                (input_shape, "classification: shape of one example's inputs.", range::size),
                (num_classes, "classification: labels are in [0, num_classes).", range::size),
                (num_batches, "Batches per epoch; None: endless.", range::count));
  };

  explicit SyntheticInput(const HParams& hparams);
  Tree get_next() override;
  void reset() override;
  // {epoch, position, seed}: position counts the batches read this epoch.
  Tree state() const override;
  void restore_state(const Tree& state) override;

 private:
  Tree make_batch(uint64_t key) const;
  int64_t epoch_ = 0, position_ = 0, seed_ = 0;
};

}  // namespace pax::data

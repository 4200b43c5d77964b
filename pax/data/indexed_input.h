// IndexedInput: the base of inputs over a finite set of examples held in
// memory (packed text rows, images, arrays). ExampleOrder chooses the
// examples of each batch (sharding, shuffling, padding) and keeps the
// position that state() saves; the subclass assembles the batch.
//
// ArrayInput: an IndexedInput over arrays given in code, each with a leading
// example dimension (as tf.data's from_tensor_slices) — for small datasets
// built in a program or a test. Batches hold the arrays' rows and "weights"
// (B,) f32 (1 for real examples, 0 for padding) unless the arrays have one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pax/data/base_input.h"
#include "pax/data/sharding.h"

namespace pax::data {

class IndexedInput : public BaseInput {
 public:
  Tree get_next() override;
  void reset() override;
  Tree state() const override;
  void restore_state(const Tree& state) override;
  std::optional<Tree> reshard_state(const Tree& host0_state) const override;
  const ExampleOrder& order() const { return order_; }

 protected:
  using BaseInput::BaseInput;
  // Called by the subclass's constructor once its examples are loaded.
  void set_num_examples(int64_t num_examples);
  // The batch of examples `indices` (index -1: a padding example, all zeros
  // with weight 0 and paddings 1).
  virtual Tree make_batch(const std::vector<int64_t>& indices) const = 0;

 private:
  ExampleOrder order_;
};

class ArrayInput : public IndexedInput {
 public:
  struct HParams : BaseInput::HParams {
    PAX_HPARAMS_NO_FIELDS(ArrayInput, BaseInput::HParams);
  };
  // examples: a dict whose leaves all have the same leading dimension n.
  ArrayInput(const HParams& hparams, const Tree& examples);

 protected:
  Tree make_batch(const std::vector<int64_t>& indices) const override;

 private:
  struct Column {
    DType dtype;
    Shape row_shape;
    size_t row_bytes = 0;
    std::vector<uint8_t> data;     // (n, row) in dtype
    std::vector<uint8_t> padding;  // the row of a padding example
  };
  std::vector<Column> columns_;
  TreeDef def_;
  bool add_weights_ = false;
};

}  // namespace pax::data

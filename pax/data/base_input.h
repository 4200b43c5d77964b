// BaseInput: the interface of every input, as Praxis's base_input.BaseInput.
// An input is configured by its HParams (registered with kind "input", so an
// experiment's datasets() returns Configs that users edit with --set) and
// built with build_input(). It acts as an iterator: get_next() returns a
// batch — a dict of host arrays whose leading dimension is the per-host
// batch_size — and throws OutOfRange when a finite input is exhausted.
//
// Data is always multi-host: each process builds its own input with its own
// infeed_host_index and reads a disjoint shard; the global batch is
// batch_size * num_infeed_hosts. On a finite set (repeat = false) every host
// yields the same number of batches, the missing examples padded with
// weight 0 (paddings 1), so metrics ignore them.
//
// Eval and decode runs follow Pax's table exactly (see eval_run_batches);
// the cell it does not support is refused before training starts
// (validate() of an experiment), naming the rule:
//
//                          | N static (eval_loop_num_batches) | N dynamic (None)
//   reset_for_eval = true  | N ignored with a warning, as Pax  | each run: one epoch
//                          | ignores it: one epoch             | (repeat must be false)
//   reset_for_eval = false | each run: the next N batches, the | not supported
//                          | stream rolling on (repeat = true) |
//
// (Pax's default eval_loop_num_batches is 1 and is ignored with
// reset_for_eval; ours is None, so that a config asks for N batches only
// where it gets them, and eval_table_warning names an N that is ignored.)
//
// state() / restore_state() save and restore the position in the stream, so
// that a resumed run reads exactly the batches it would have read. The state
// is a small dict of i64 scalars (epoch, position, seed, ...) rather than a
// JSON string: it is checkpointed as a tree beside the train state, with the
// same files, checksums and validation. All hosts move in step, so after the
// same number of batches their states are identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pax/config/config.h"
#include "pax/core/error.h"
#include "pax/core/tree.h"

namespace pax::data {

// Thrown by get_next() at the end of a finite input (Python's StopIteration /
// tf.errors.OutOfRangeError): the eval loop catches this type only.
class OutOfRange : public Error {
 public:
  using Error::Error;
};

class BaseInput {
 public:
  struct HParams : BaseHParams {
    std::string name;
    int64_t batch_size = 1;
    int64_t num_infeed_hosts = 1;
    int64_t infeed_host_index = 0;
    bool reset_for_eval = false;
    std::optional<int64_t> eval_loop_num_batches;
    bool repeat = true;
    bool shuffle = false;
    int64_t input_random_seed = 0;
    int64_t prefetch_batches = 0;
    std::vector<std::string> predict_metrics;
    std::vector<std::string> score_metrics;
    PAX_HPARAMS(BaseInput, BaseHParams, (name, "Name of the input (e.g. 'train', 'validation'), used in summaries."),
                (batch_size, "Examples per batch on this host; the global batch is batch_size * num_infeed_hosts.",
                 range::count),
                (num_infeed_hosts, "Number of hosts (processes) reading this input, each a disjoint shard.",
                 range::count),
                (infeed_host_index, "Index of this host's shard, in [0, num_infeed_hosts).", range::size),
                (reset_for_eval, "Rewind after every eval / decode run (with eval_loop_num_batches None: one epoch)."),
                (eval_loop_num_batches,
                 "Batches per eval / decode run; None: until the data is exhausted (needs reset_for_eval).",
                 range::count),
                (repeat, "Read the data forever, epoch after epoch; false: OutOfRange after one epoch."),
                (shuffle, "Shuffle the examples, with a new order every epoch."),
                (input_random_seed, "Seed of the shuffle; the same on every host so that the shards stay disjoint.",
                 range::seed),
                (prefetch_batches, "Batches prepared ahead on a background thread (0: none).", range::closed(0, 1024)),
                (predict_metrics,
                 "Decode runs: metrics of the decoded continuations against the input's targets (SeqIO's "
                 "predict_metric_fns; train/seqio_metrics.h: exact_match, token_accuracy)."),
                (score_metrics,
                 "Eval runs: metrics of the model's per-example scores (SeqIO's score_metric_fns; "
                 "train/seqio_metrics.h: log_likelihood)."));
    // What the input reads ("files [a.txt]") and how it tokenises ("spm:4096
    // trained on files [a.txt]"), compared between the train and eval inputs
    // before training; "" where it does not say.
    virtual std::string data_source() const { return ""; }
    virtual std::string tokenizer_used() const { return ""; }
  };

  explicit BaseInput(const HParams& hparams);
  virtual ~BaseInput() = default;
  BaseInput(const BaseInput&) = delete;
  BaseInput& operator=(const BaseInput&) = delete;

  const HParams& base_hparams() const { return *hparams_; }
  template <class H>
  const H& hparams() const {
    return static_cast<const H&>(*hparams_);
  }
  const char* type_name() const { return hparams_->type_name(); }
  // "TextLmInput 'train'" for messages.
  std::string description() const;

  // The next batch: a dict of arrays with leading dimension batch_size.
  // Throws OutOfRange when the data is exhausted (repeat = false).
  virtual Tree get_next() = 0;
  // Rewinds to the beginning of the data (the first epoch).
  virtual void reset() = 0;
  // The expected outputs of the examples, by example index (a batch's
  // "example_index"), for predict_metrics; empty when the input has none.
  virtual const std::vector<std::string>& targets() const;
  // `text` as token ids of the input's tokenizer, as predict_metrics compare
  // targets and predictions; bytes for an input without one.
  virtual std::vector<int32_t> text_to_ids(const std::string& text) const;
  // The position in the stream: a dict of i64 scalars. Restoring it into an
  // input built from the same config continues with exactly the batches that
  // would have followed.
  virtual Tree state() const = 0;
  virtual void restore_state(const Tree& state) = 0;
  // The state of host 0 of a run with another num_infeed_hosts, as the state
  // of this input's host at the same global position (every host of a run
  // is at the same position), for resuming on another process count;
  // nullopt where the order cannot continue exactly (the default).
  virtual std::optional<Tree> reshard_state(const Tree& host0_state) const;
  // Text of token ids (B, T), the first lengths[b] of row b (all of them when
  // `lengths` is undefined). Throws for inputs without a tokenizer.
  virtual std::vector<std::string> ids_to_strings(const Array& ids, const Array& lengths = Array()) const;
  // The ids its tokenizer can give (0: no tokenizer), checked against the
  // model's vocabulary before training.
  virtual int64_t vocab_size() const { return 0; }

 private:
  std::shared_ptr<const HParams> hparams_;
};

// ---------------------------------------------------------------------------
// Eval and decode runs.

// The batches one eval / decode run reads by the table above: N, or nullopt
// for "until OutOfRange" (one epoch). Throws for the cell the table does
// not support, and for an input that would run out under the rolling rule
// (reset_for_eval = false needs repeat = true).
std::optional<int64_t> eval_run_batches(const BaseInput::HParams& hparams);
// The warning for a cell of the table that Pax runs other than it reads:
// reset_for_eval = true with eval_loop_num_batches set (N is ignored, one
// epoch is read). Empty otherwise.
std::string eval_table_warning(const BaseInput::HParams& hparams);

// One eval / decode run: calls fn on every batch (stopping early at
// OutOfRange) and rewinds the input afterwards when reset_for_eval. Returns
// the number of batches read.
int64_t for_each_eval_batch(BaseInput& input, const std::function<void(const Tree&)>& fn);

// ---------------------------------------------------------------------------
// Registry (PAX_REGISTER_INPUT in each input's .cc file).

using InputFactory = std::unique_ptr<BaseInput> (*)(const HParamsPtr& hparams);
void register_input(const std::string& type_name, InputFactory factory, HParamsFactory hparams);
std::vector<std::string> registered_inputs();

// Builds the input a config describes (its type name selects the class),
// wrapped in a PrefetchInput when prefetch_batches > 0. Throws pax::Error
// for an unknown type (listing the registered inputs) or invalid fields.
std::unique_ptr<BaseInput> build_input(const HParamsPtr& hparams);
inline std::unique_ptr<BaseInput> build_input(const Config& config) { return build_input(config.root()); }

namespace detail {
// Throws naming both types unless `matches` (hparams is of the expected type).
void check_input_hparams(const HParamsPtr& hparams, const char* expected, bool matches);
template <class Cls>
std::unique_ptr<BaseInput> make_input(const HParamsPtr& hparams) {
  auto* typed = dynamic_cast<const typename Cls::HParams*>(hparams.get());
  check_input_hparams(hparams, typename Cls::HParams().type_name(), typed != nullptr);
  return std::make_unique<Cls>(*typed);
}
}  // namespace detail

// ---------------------------------------------------------------------------
// Helpers for implementations.

// A dict of i64 scalars (the form of every state()).
Tree int_state(const std::vector<std::pair<std::string, int64_t>>& values);
// The i64 value of `key` in a state dict; throws naming `who` and the keys
// expected when it is missing or not an integer scalar.
int64_t state_value(const Tree& state, const std::string& key, const std::string& who);

}  // namespace pax::data

// Registers an input class (its HParams type name is the input's name).
#define PAX_REGISTER_INPUT(Cls)                                                                      \
  static const bool pax_input_registered_##Cls##_ = [] {                                             \
    ::pax::data::register_input(Cls::HParams().type_name(), &::pax::data::detail::make_input<Cls>,   \
                                [] { return ::pax::HParamsPtr(std::make_shared<Cls::HParams>()); }); \
    return true;                                                                                     \
  }()

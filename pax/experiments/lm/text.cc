// lm.TextTransformer: lm.KjvTransformer's model, learner and schedule on the
// user's own text files, one `--set` away:
//
//   paxcc --exp=lm.TextTransformer --job_log_dir=runs/mine --set 'train_input.files=[a.txt,b.txt]'
//
// A SentencePiece tokenizer (spm:4096) is trained on the train split on first
// use and cached in the data directory; 2% of the lines are held out, and the
// eval input reads them through a HeldOutInput that shares train_input's
// config, so every edit of train_input (files, tokenizer, document_unit,
// validation_fraction, seq_length) applies to both.
#include "pax/data/held_out_input.h"
#include "pax/data/text_lm.h"
#include "pax/experiments/experiment.h"

namespace pax::experiments {
namespace {

class TextTransformer : public BaseExperiment {
 public:
  Task task() const override {
    Task t = make_experiment("lm.KjvTransformer")->task();
    t.train->decode_interval_steps = 0;  // no prompts fit every text
    return t;
  }

  Datasets datasets() const override {
    auto train = std::make_shared<data::TextLmInput::HParams>();
    train->name = "train";
    train->source = data::TextSource::files;
    train->tokenizer = "spm:4096";  // model.lm_tpl.vocab_size is 4096
    train->seq_length = 128;
    train->batch_size = 16;
    train->document_unit = data::DocumentUnit::line;
    train->split = data::TextSplit::train;
    train->validation_fraction = 0.02;
    train->shuffle = true;
    train->repeat = true;
    Config(train).mark_missing("files");  // the user's: --set 'train_input.files=[...]'

    auto held_out = std::make_shared<data::HeldOutInput::HParams>();
    held_out->name = "validation";
    held_out->of = train;  // the same object: edits of either path reach both
    held_out->batch_size = train->batch_size;
    return {.train = train, .eval = {held_out}, .decode = {}};
  }

  std::string description() const override {
    return "lm.KjvTransformer's model on your own text: --set 'train_input.files=[a.txt,b.txt]'";
  }
};

}  // namespace

PAX_REGISTER_EXPERIMENT("lm.TextTransformer", TextTransformer);

}  // namespace pax::experiments

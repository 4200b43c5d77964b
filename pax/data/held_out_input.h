// HeldOutInput: another input's config read at another split — the held-out
// part of the same data, with the same files, preprocessing and tokenizer.
// Its `of` is typically the very config of train_input (a shared template),
// so that `--set train_input.files=[...]` moves the evaluation along:
//
//   auto train = std::make_shared<TextLmInput::HParams>();  // split = train
//   auto held_out = std::make_shared<HeldOutInput::HParams>();
//   held_out->of = train;                                   // shared
//   held_out->name = "validation";                          // split = validation
//
// Building it builds a copy of `of` with `split` set to this config's split
// and every BaseInput field (name, batch_size, repeat, shuffle,
// reset_for_eval, hosts, prefetch, ...) taken from this config: the input
// built is of `of`'s type.
#pragma once

#include <string>

#include "pax/data/base_input.h"

namespace pax::data {

struct HeldOutInput {
  struct HParams : BaseInput::HParams {
    HParamsPtr of;
    std::string split = "validation";
    HParams() {
      reset_for_eval = true;
      repeat = false;
    }
    PAX_HPARAMS(HeldOutInput, BaseInput::HParams,
                (of, "The input config whose data this reads (usually shared with train_input)."),
                (split, "The value given to that input's `split` field (e.g. validation)."));
    std::string data_source() const override;
    std::string tokenizer_used() const override;
  };
};

// The config HeldOutInput builds: a copy of `of` at `split`, with the
// BaseInput fields of `held_out`. Throws pax::Error when `of` is None, not an
// input, or has no such split.
HParamsPtr resolve_held_out(const HeldOutInput::HParams& held_out);

}  // namespace pax::data

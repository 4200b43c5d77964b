// HeldOutInput: resolving it to a copy of the input it refers to, and its
// registration (the factory builds that copy's input type).
#include "pax/data/held_out_input.h"

#include "pax/data/prefetch.h"

namespace pax::data {
namespace {

const BaseInput::HParams& input_of(const HeldOutInput::HParams& h) {
  const auto* of = dynamic_cast<const BaseInput::HParams*>(h.of.get());
  PAX_CHECK(of, "HeldOutInput '", h.name, "': `of` must be an input config (the one whose split it reads, e.g. ",
            "@train_input), got ", h.of ? h.of->type_name() : "None");
  return *of;
}

std::unique_ptr<BaseInput> build_held_out(const HParamsPtr& hparams) {
  const auto* h = dynamic_cast<const HeldOutInput::HParams*>(hparams.get());
  detail::check_input_hparams(hparams, "HeldOutInput", h != nullptr);
  HParamsPtr resolved = resolve_held_out(*h);
  // Prefetching wraps the input built, not the one inside it, once.
  static_cast<BaseInput::HParams&>(*resolved).prefetch_batches = 0;
  std::unique_ptr<BaseInput> input = build_input(resolved);
  if (h->prefetch_batches > 0) return std::make_unique<PrefetchInput>(std::move(input), h->prefetch_batches);
  return input;
}

}  // namespace

HParamsPtr resolve_held_out(const HeldOutInput::HParams& h) {
  input_of(h);
  HParamsPtr copy = deep_clone(h.of);
  // This config's BaseInput fields over the copy's (a slice assignment),
  // keeping the copy's marks of fields left to fill.
  auto& base = static_cast<BaseInput::HParams&>(*copy);
  const std::vector<std::string> missing = base.missing_fields();
  base = static_cast<const BaseInput::HParams&>(h);
  for (const std::string& field : missing) base.set_missing(field, true);
  try {
    Config(copy).set("split", h.split);
  } catch (const Error& e) {
    PAX_FAIL("HeldOutInput '", h.name, "': cannot read split '", h.split, "' of its `of` (", copy->type_name(),
             "): ", e.what());
  }
  return copy;
}

std::string HeldOutInput::HParams::data_source() const { return of ? input_of(*this).data_source() : ""; }
std::string HeldOutInput::HParams::tokenizer_used() const { return of ? input_of(*this).tokenizer_used() : ""; }

static const bool held_out_input_registered = [] {
  register_input(HeldOutInput::HParams().type_name(), &build_held_out,
                 [] { return HParamsPtr(std::make_shared<HeldOutInput::HParams>()); });
  return true;
}();

}  // namespace pax::data

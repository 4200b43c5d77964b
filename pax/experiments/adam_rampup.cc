// adam_with_rampup.
#include "pax/experiments/adam_rampup.h"

namespace pax::experiments {

namespace {
template <class S>
HParamsPtr rampup(int64_t warmup_steps, int64_t decay_end, double min_ratio) {
  auto s = std::make_shared<S>();
  s->warmup_steps = warmup_steps;
  s->decay_start = warmup_steps + 1;
  s->decay_end = decay_end;
  s->min_ratio = min_ratio;
  return s;
}
}  // namespace

std::shared_ptr<optim::Adam> adam_with_rampup(double learning_rate, int64_t warmup_steps, int64_t decay_end,
                                              double min_ratio, RampupDecay decay) {
  auto adam = std::make_shared<optim::Adam>();
  adam->learning_rate = learning_rate;
  adam->lr_schedule = decay == RampupDecay::cosine
                          ? rampup<optim::LinearRampupCosineDecay>(warmup_steps, decay_end, min_ratio)
                          : rampup<optim::LinearRampupExponentialDecay>(warmup_steps, decay_end, min_ratio);
  return adam;
}

}  // namespace pax::experiments

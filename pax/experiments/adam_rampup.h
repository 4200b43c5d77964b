// The optimizer every shipped experiment trains with: Adam whose learning
// rate ramps up linearly, then decays (Praxis's LinearRampupCosineDecay or
// LinearRampupExponentialDecay) to learning_rate * min_ratio.
#pragma once

#include <memory>

#include "pax/optim/configs.h"

namespace pax::experiments {

enum class RampupDecay { cosine, exponential };

// Warmup over steps [0, warmup_steps], decay from warmup_steps + 1 to
// decay_end. Other Adam fields keep their defaults; set them on the result.
std::shared_ptr<optim::Adam> adam_with_rampup(double learning_rate, int64_t warmup_steps, int64_t decay_end,
                                              double min_ratio, RampupDecay decay = RampupDecay::cosine);

}  // namespace pax::experiments

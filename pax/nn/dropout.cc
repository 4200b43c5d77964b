// Dropout.
#include "pax/nn/dropout.h"

#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

void Dropout::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.keep_prob > 0 && hp.keep_prob <= 1, "Dropout '", path(), "': keep_prob must be in (0, 1], got ",
            hp.keep_prob);
}

Array Dropout::fprop(const Array& x) const { return drop(x, false); }

Array Dropout::fprop_split(const Array& x) const { return drop(x, true); }

Array Dropout::drop(const Array& x, bool split) const {
  const auto& hp = hparams<HParams>();
  if (hp.deterministic || hp.keep_prob == 1.0 || !is_training()) return x;
  Shape noise = x.shape();
  for (int64_t d : normalize_axes(hp.noise_shape_broadcast_dims, x.ndim(), "Dropout noise_shape_broadcast_dims")) {
    noise[d] = 1;
  }
  const Array key = next_prng_key("dropout");
  Array keep = random::bernoulli(split ? key_of_this_part(key, tensor_parallel()) : key, hp.keep_prob, noise);
  Array scaled = x * (1.0 / hp.keep_prob);
  return where(broadcast_to(keep, x.shape()), scaled, zeros_like(x));
}

PAX_REGISTER_LAYER(Dropout);

}  // namespace pax::nn

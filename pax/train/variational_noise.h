// Variational weight noise (Praxis; SingleTask's `vn`): during training, the
// forward and backward passes see the selected parameters plus Gaussian
// noise of standard deviation vn_scale (the update applies to the clean
// parameters), from step vn_start_step on. Evaluation and decoding use the
// clean parameters. The noise has a PRNG stream of its own: turning it on
// does not change the dropout masks.
//
//   vn = VariationalNoise {vn_scale = 0.075, vn_regex = "params/lm/softmax|params/lm/embedding"}
//
// As in Pax, a variable is selected when vn_regex matches the start of its
// path ("params/<layer>/.../<name>"; Python's re.match), and a scale > 0
// whose regex selects nothing is an error.
#pragma once

#include <string>
#include <vector>

#include "pax/config/hparams.h"
#include "pax/core/tree.h"
#include "pax/nn/sharding_plan.h"

namespace pax::train {

struct VariationalNoise : BaseHParams {
  double vn_scale = 0.0;
  std::string vn_regex;
  int64_t vn_start_step = 0;
  PAX_HPARAMS(VariationalNoise, BaseHParams,
              (vn_scale, "Standard deviation of the weight noise (0: none).", range::non_negative),
              (vn_regex, "Regex matched at the start of a variable's path, e.g. 'params/lm/' ('': every variable)."),
              (vn_start_step, "First step (counted from 0) whose forward pass sees the noise.", range::steps));

  bool enabled() const { return vn_scale > 0; }
  // Throws pax::Error for a scale < 0, a start step < 0 or a malformed regex.
  void check() const;
  // Per leaf of `params` (flatten order; paths without the "params/"
  // prefix), whether it gets noise. Throws pax::Error for a bad setting or a
  // regex that matches no variable (listing a few paths).
  std::vector<bool> selection(const Tree& params) const;
  // `params` with noise where selected, when step >= vn_start_step (traced:
  // `step` may be abstract). `key`: this step's noise key. Leaves that
  // `splits` marks as blocks over the plan's mdl or stage axis draw their
  // own noise per block (nn::key_of_this_part).
  Tree add_noise(const Tree& params, const Array& step, const Array& key, const nn::ShardingPlan& plan = {},
                 const nn::LeafSplits& splits = {}) const;
};

}  // namespace pax::train

// EarlyStopping: flax.training.early_stopping.EarlyStopping — stop training
// when a metric (lower is better, e.g. a validation loss) has not improved by
// more than min_delta for more than `patience` consecutive updates.
//
//   EarlyStopping early_stop{.min_delta = 1e-3, .patience = 2};
//   for (int epoch = 0; epoch < num_epochs; ++epoch) {
//     double loss = train_epoch(...);
//     early_stop = early_stop.update(loss);
//     if (early_stop.should_stop) break;
//   }
//
// update() is pure, as in flax: it returns the new value. Its semantics are
// flax's: an update improves when best_metric - metric > min_delta (or when
// no metric has been seen yet); otherwise should_stop becomes true when
// patience_count (counted before this update) >= patience, and patience_count
// grows by one. An improvement does not clear should_stop. Two cases differ
// from flax on purpose:
//   - a NaN metric never improves (flax would store it as best_metric on the
//     first update and then never see an improvement again); it counts
//     against patience like any non-improving metric;
//   - only best_metric == +inf means "nothing seen yet" (flax tests isinf, so
//     after a -inf metric every later metric would count as an improvement).
// min_delta must be >= 0 and patience >= 0 (pax::Error from update()).
//
// Checkpoints store the state as JSON (to_json / restore_json); to_tree /
// from_tree give it as a Tree of scalars, as flax's state dict.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "pax/core/tree.h"

namespace pax::train {

struct EarlyStopping {
  double min_delta = 0;  // the least decrease of the metric that counts as an improvement
  int64_t patience = 0;  // non-improving updates tolerated before stopping
  double best_metric = std::numeric_limits<double>::infinity();  // best value so far (+inf: none yet)
  int64_t patience_count = 0;                                    // updates since the last improvement
  bool should_stop = false;                                      // whether training should stop
  bool has_improved = false;  // whether the last update improved on best_metric by more than min_delta

  // The state after seeing `metric`.
  EarlyStopping update(double metric) const;
  // best_metric, patience_count, should_stop and has_improved back to their
  // initial values; min_delta and patience kept.
  EarlyStopping reset() const;

  // {"min_delta": f64, "patience": i64, "best_metric": f64, "patience_count":
  // i64, "should_stop": bool, "has_improved": bool}, all scalars.
  Tree to_tree() const;
  // The inverse of to_tree(); pax::Error naming the missing key or bad value.
  static EarlyStopping from_tree(const Tree& tree);

  // The progress (best_metric, patience_count, should_stop, has_improved)
  // as a JSON object, and this state with the progress read back from one
  // (min_delta and patience kept, the whole state checked as update() does):
  // pax::Error naming the problem for other text. A non-finite best_metric
  // is written as the string "inf", "-inf" or "nan" (JSON numbers cannot
  // hold them), so that a resumed run keeps a -inf best; null, the older
  // form of +inf, is read as +inf.
  std::string to_json() const;
  EarlyStopping restore_json(const std::string& text) const;
};

}  // namespace pax::train

// --mode=train: the training loop (TrainingLoop in training_loop.cc, one
// method per concern: setting up, restoring, a step, the interval's summary,
// evaluation with early stopping, decoding, the processes' agreement after a
// step, saving, and the closing lines).
#pragma once

#include "pax/experiments/job.h"
#include "pax/experiments/runner.h"

namespace pax::experiments {

// Trains the job's experiment from its latest checkpoint (or from the start)
// to train.num_train_steps, or until stopped.
RunResult run_training(Job& job);

}  // namespace pax::experiments

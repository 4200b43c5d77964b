// Checkpoints of what a training loop saves: a TrainState (parameters of
// several dtypes, adamw's state, the i32 step), an input's i64 state tree and
// a JSON extra. A run that restores and goes on must produce exactly what an
// uninterrupted run produces.
#include <gtest/gtest.h>

#include "pax/data/synthetic.h"
#include "pax/ops/numpy.h"
#include "pax/optim/aliases.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/train_state.h"

namespace pax::train {
namespace {

using testing::random_array;
using testing::TempDir;
using testing::trees_identical;

Tree init_params(uint32_t seed) {
  return Tree::dict({{"dense", Tree::dict({{"w", random_array({8, 4}, DType::f32, seed)},
                                           {"b", random_array({4}, DType::f32, seed + 1)}})},
                     {"embed", random_array({16, 8}, DType::bf16, seed + 2)},
                     {"scale", random_array({}, DType::f32, seed + 3)}});
}

// A deterministic stand-in for a gradient: depends on the parameters and the batch.
Tree fake_grads(const Tree& params, const Tree& batch) {
  const Array signal = mean(astype(batch["ids"].leaf(), DType::f32)) * 1e-3;
  return tree_map([&](const Array& p) { return p * 0.1 + astype(signal, p.dtype()); }, params);
}

struct TrainingRun {
  TrainState state;
  data::SyntheticInput input;
};

data::SyntheticInput::HParams input_hparams() {
  data::SyntheticInput::HParams hp;
  hp.batch_size = 2;
  hp.seq_length = 8;
  hp.vocab_size = 100;
  hp.input_random_seed = 5;
  return hp;
}

void train(TrainingRun& run, const optim::GradientTransformation& tx, int steps) {
  for (int i = 0; i < steps; ++i) {
    const Tree batch = run.input.get_next();
    run.state = run.state.apply_gradients(tx, fake_grads(run.state.params, batch));
  }
}

TEST(CheckpointTraining, ManagerResumesTrainStateAndInputExactly) {
  const optim::GradientTransformation tx = optim::adamw(1e-2, {.weight_decay = 0.01});
  TempDir dir;
  TrainingRun original{TrainState::create(init_params(1), tx), data::SyntheticInput(input_hparams())};
  train(original, tx, 3);
  {
    CheckpointManager mgr(dir.path(), {.async = true});
    mgr.save(3, {.trees = {{"train_state", original.state.to_tree()}, {"input_state", original.input.state()}},
                 .json = {{"extra", R"({"loss": 1.25, "tokens_seen": 48})"}}});
    mgr.wait_until_finished();
  }
  train(original, tx, 4);  // the uninterrupted run goes on

  // A new process: fresh state and input from the config, then the checkpoint.
  TrainingRun resumed{TrainState::create(init_params(99), tx), data::SyntheticInput(input_hparams())};
  CheckpointManager mgr(dir.path());
  ASSERT_EQ(mgr.latest_step(), 3);
  const CheckpointItems r =
      mgr.restore(std::nullopt, {{"train_state", resumed.state.to_tree()}, {"input_state", resumed.input.state()}});
  resumed.state = TrainState::from_tree(r.trees.at("train_state"));
  resumed.input.restore_state(r.trees.at("input_state"));
  EXPECT_EQ(r.json.at("extra"), R"({"loss": 1.25, "tokens_seen": 48})");
  EXPECT_EQ(resumed.state.step.item<int32_t>(), 3);
  EXPECT_EQ(r.trees.at("input_state")["position"].leaf().dtype(), DType::i64);
  train(resumed, tx, 4);
  EXPECT_TRUE(trees_identical(resumed.state.to_tree(), original.state.to_tree()));
  EXPECT_TRUE(trees_identical(resumed.input.state(), original.input.state()));
}

TEST(CheckpointTraining, FunctionalApiRestoresATrainState) {
  const optim::GradientTransformation tx = optim::adam(1e-3);
  TempDir dir;
  TrainingRun run{TrainState::create(init_params(3), tx), data::SyntheticInput(input_hparams())};
  train(run, tx, 2);
  save_checkpoint(dir.path(), run.state.to_tree(), 2);
  const TrainState target = TrainState::create(init_params(4), tx);
  const TrainState restored = TrainState::from_tree(restore_checkpoint(dir.path(), target.to_tree()));
  EXPECT_TRUE(trees_identical(restored.to_tree(), run.state.to_tree()));
  // A target of another optimizer (sgd's state differs) is rejected, naming the file.
  const TrainState other = TrainState::create(init_params(4), optim::sgd(0.1));
  EXPECT_PAX_ERROR(restore_checkpoint(dir.path(), other.to_tree()),
                   "'" + dir.path() + "/checkpoint_2/state.safetensors': the stored tree differs from the target");
}

TEST(CheckpointTraining, InputStateTreeOfI64Scalars) {
  TempDir dir;
  data::SyntheticInput input(input_hparams());
  for (int i = 0; i < 5; ++i) input.get_next();
  const Tree state = input.state();
  save_checkpoint(dir.path(), state, 5);
  const Tree restored = restore_checkpoint(dir.path(), Tree());  // rebuilt from metadata.json
  EXPECT_TRUE(trees_identical(restored, state));
  data::SyntheticInput again(input_hparams());
  again.restore_state(restored);
  EXPECT_TRUE(trees_identical(again.get_next(), input.get_next()));
}

}  // namespace
}  // namespace pax::train

// BaseInput semantics over ArrayInput: batches and epochs, Pax's eval-run
// table, multi-host sharding and padding, shuffling, state / restore, field
// validation and the input registry.
#include "pax/data/base_input.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "pax/data/indexed_input.h"
#include "pax/data/prefetch.h"
#include "pax/testing/testing.h"

namespace pax::data {
namespace {

constexpr int32_t kPad = -1;

ArrayInput::HParams params(int64_t batch_size, bool repeat, bool shuffle = false) {
  ArrayInput::HParams hp;
  hp.name = "numbers";
  hp.batch_size = batch_size;
  hp.repeat = repeat;
  hp.shuffle = shuffle;
  return hp;
}

// An input over the examples 0 .. n-1 (key "x").
std::unique_ptr<ArrayInput> numbers(int64_t n, const ArrayInput::HParams& hp) {
  std::vector<int32_t> x(static_cast<size_t>(n));
  std::iota(x.begin(), x.end(), 0);
  return std::make_unique<ArrayInput>(hp, Tree::dict({{"x", array(x)}}));
}

// The examples of a batch, kPad where the weight is 0 (after checking that a
// padded example is all zeros).
std::vector<int32_t> xs(const Tree& batch) {
  std::vector<int32_t> x = batch["x"].leaf().to_vector<int32_t>();
  std::vector<float> w = batch["weights"].leaf().to_vector<float>();
  EXPECT_EQ(x.size(), w.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(w[i] == 0.0f || w[i] == 1.0f);
    if (w[i] == 0.0f) {
      EXPECT_EQ(x[i], 0);
      x[i] = kPad;
    }
  }
  return x;
}

std::vector<std::vector<int32_t>> read(BaseInput& input, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) out.push_back(xs(input.get_next()));
  return out;
}

// Every batch until OutOfRange.
std::vector<std::vector<int32_t>> read_all(BaseInput& input) {
  std::vector<std::vector<int32_t>> out;
  while (true) {
    try {
      out.push_back(xs(input.get_next()));
    } catch (const OutOfRange&) {
      return out;
    }
  }
}

std::vector<std::vector<int32_t>> eval_run(BaseInput& input) {
  std::vector<std::vector<int32_t>> out;
  int64_t n = for_each_eval_batch(input, [&](const Tree& b) { out.push_back(xs(b)); });
  EXPECT_EQ(n, int64_t(out.size()));
  return out;
}

using Batches = std::vector<std::vector<int32_t>>;

TEST(BaseInput, BatchesRunOnThroughEpochsWhenRepeating) {
  auto input = numbers(5, params(2, true));
  EXPECT_EQ(read(*input, 4), (Batches{{0, 1}, {2, 3}, {4, 0}, {1, 2}}));
  Tree b = input->get_next();
  EXPECT_EQ(b["x"].leaf().dtype(), DType::i32);
  EXPECT_EQ(b["weights"].leaf().dtype(), DType::f32);
  EXPECT_EQ(b["x"].leaf().shape(), Shape({2}));
}

TEST(BaseInput, FiniteEpochPadsTheLastBatchThenRaisesOutOfRange) {
  auto input = numbers(5, params(2, false));
  EXPECT_EQ(read_all(*input), (Batches{{0, 1}, {2, 3}, {4, kPad}}));
  // OutOfRange is a pax::Error, raised again until a reset.
  EXPECT_THROW(input->get_next(), OutOfRange);
  EXPECT_PAX_ERROR(input->get_next(), "end of data");
  input->reset();
  EXPECT_EQ(read(*input, 1), (Batches{{0, 1}}));
}

// ---------------------------------------------------------------------------
// Pax's eval-run table.

TEST(EvalRuns, ResetForEvalWithoutNReadsOneEpochEveryRun) {
  ArrayInput::HParams hp = params(2, /*repeat=*/false);
  hp.reset_for_eval = true;
  auto input = numbers(5, hp);
  EXPECT_EQ(eval_run_batches(hp), std::nullopt);
  const Batches epoch{{0, 1}, {2, 3}, {4, kPad}};
  EXPECT_EQ(eval_run(*input), epoch);
  EXPECT_EQ(eval_run(*input), epoch);  // rewound after the run
}

TEST(EvalRuns, ResetForEvalIgnoresAStaticNWithAWarning) {
  // Pax ignores N with reset_for_eval: one whole epoch is read, and the
  // configuration is named in a warning.
  ArrayInput::HParams hp = params(2, /*repeat=*/false);
  hp.reset_for_eval = true;
  EXPECT_EQ(eval_table_warning(hp), "");
  hp.eval_loop_num_batches = 2;
  EXPECT_EQ(eval_run_batches(hp), std::nullopt);
  EXPECT_NE(eval_table_warning(hp).find("eval_loop_num_batches = 2 is ignored, as Pax ignores it"), std::string::npos)
      << eval_table_warning(hp);
  auto input = numbers(5, hp);
  int64_t batches = 0;
  for_each_eval_batch(*input, [&](const Tree&) { ++batches; });
  EXPECT_EQ(batches, 3);  // 5 examples in batches of 2: the epoch, not 2 batches
  hp.reset_for_eval = false;
  EXPECT_EQ(eval_table_warning(hp), "");
}

TEST(EvalRuns, ResetForEvalWithoutNNeedsAFiniteInput) {
  ArrayInput::HParams hp = params(2, /*repeat=*/true);
  hp.reset_for_eval = true;
  EXPECT_PAX_ERROR(eval_run_batches(hp), "set repeat = false");
}

TEST(EvalRuns, WithoutResetEachRunReadsTheNextNBatches) {
  ArrayInput::HParams hp = params(2, /*repeat=*/true);
  hp.eval_loop_num_batches = 2;
  auto input = numbers(5, hp);
  EXPECT_EQ(eval_run(*input), (Batches{{0, 1}, {2, 3}}));
  EXPECT_EQ(eval_run(*input), (Batches{{4, 0}, {1, 2}}));
  EXPECT_EQ(eval_run(*input), (Batches{{3, 4}, {0, 1}}));
}

TEST(EvalRuns, WithoutResetTheInputMustRepeat) {
  // Rolling runs of a finite input would read nothing once it is exhausted.
  ArrayInput::HParams hp = params(2, /*repeat=*/false);
  hp.eval_loop_num_batches = 2;
  EXPECT_PAX_ERROR(eval_run_batches(hp), "must repeat indefinitely");
  auto input = numbers(5, hp);
  EXPECT_PAX_ERROR(for_each_eval_batch(*input, [](const Tree&) {}), "set repeat = true");
}

TEST(EvalRuns, WithoutResetANumberOfBatchesIsRequired) {
  ArrayInput::HParams hp = params(2, /*repeat=*/true);
  auto input = numbers(5, hp);
  EXPECT_PAX_ERROR(eval_run_batches(hp), "set eval_loop_num_batches");
  EXPECT_PAX_ERROR(for_each_eval_batch(*input, [](const Tree&) {}), "reset_for_eval = true and repeat = false");
}

// ---------------------------------------------------------------------------
// Hosts.

// Host h's batches of a finite epoch.
Batches host_epoch(int64_t n, int64_t hosts, int64_t host, int64_t batch_size, bool shuffle) {
  ArrayInput::HParams hp = params(batch_size, false, shuffle);
  hp.num_infeed_hosts = hosts;
  hp.infeed_host_index = host;
  hp.input_random_seed = 7;
  auto input = numbers(n, hp);
  return read_all(*input);
}

TEST(Hosts, TwoHostsReadDisjointBatchesThatTogetherCoverTheData) {
  for (bool shuffle : {false, true}) {
    const Batches h0 = host_epoch(10, 2, 0, 2, shuffle), h1 = host_epoch(10, 2, 1, 2, shuffle);
    ASSERT_EQ(h0.size(), 3u);
    ASSERT_EQ(h1.size(), 3u);
    std::multiset<int32_t> seen;
    for (const Batches* h : {&h0, &h1}) {
      for (const auto& b : *h) {
        for (int32_t x : b) {
          if (x != kPad) seen.insert(x);
        }
      }
    }
    std::multiset<int32_t> all;
    for (int32_t i = 0; i < 10; ++i) all.insert(i);
    EXPECT_EQ(seen, all) << "shuffle " << shuffle;  // each example exactly once
    EXPECT_NE(h0, h1);
  }
  // Without shuffling host h reads h, h + 2, ...
  EXPECT_EQ(host_epoch(10, 2, 1, 2, false), (Batches{{1, 3}, {5, 7}, {9, kPad}}));
}

TEST(Hosts, RepeatingHostsStayDisjointWithinAnEpoch) {
  for (int64_t host : {0, 1}) {
    ArrayInput::HParams hp = params(3, true, true);
    hp.num_infeed_hosts = 2;
    hp.infeed_host_index = host;
    auto input = numbers(12, hp);
    auto other = numbers(12, [&] {
      ArrayInput::HParams o = hp;
      o.infeed_host_index = 1 - host;
      return o;
    }());
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::set<int32_t> mine, theirs;
      for (const auto& b : read(*input, 2)) mine.insert(b.begin(), b.end());
      for (const auto& b : read(*other, 2)) theirs.insert(b.begin(), b.end());
      EXPECT_EQ(mine.size(), 6u);
      EXPECT_EQ(theirs.size(), 6u);
      for (int32_t x : mine) EXPECT_FALSE(theirs.count(x)) << x;
    }
  }
}

TEST(Hosts, RepeatingHostsReadEqualSharesAndSaveTheSameState) {
  // 7 examples on 2 hosts: 3 each an epoch, one batch of 3.
  std::vector<std::unique_ptr<ArrayInput>> hosts;
  for (int64_t h : {0, 1}) {
    ArrayInput::HParams hp = params(3, true, true);
    hp.num_infeed_hosts = 2;
    hp.infeed_host_index = h;
    hosts.push_back(numbers(7, hp));
  }
  EXPECT_EQ(hosts[0]->order().host_examples(), 3);
  EXPECT_EQ(hosts[1]->order().host_examples(), 3);
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> a = xs(hosts[0]->get_next()), b = xs(hosts[1]->get_next());
    for (int32_t x : a) EXPECT_EQ(std::count(b.begin(), b.end(), x), 0) << step;  // disjoint
    const Tree s0 = hosts[0]->state(), s1 = hosts[1]->state();
    for (const std::string& k : s0.keys()) EXPECT_EQ(s0[k].leaf().item<int64_t>(), s1[k].leaf().item<int64_t>()) << k;
  }
}

TEST(Hosts, AFiniteEvalSetGivesEveryHostTheSameNumberOfBatches) {
  // 7 examples on 2 hosts: 4 and 3, two batches of 2 each; host 1 pads one.
  EXPECT_EQ(host_epoch(7, 2, 0, 2, false), (Batches{{0, 2}, {4, 6}}));
  EXPECT_EQ(host_epoch(7, 2, 1, 2, false), (Batches{{1, 3}, {5, kPad}}));
  // 7 on 3 hosts with batch 1: shares 3, 2, 2 -> 3 batches each.
  for (int64_t h = 0; h < 3; ++h) {
    Batches b = host_epoch(7, 3, h, 1, true);
    EXPECT_EQ(b.size(), 3u) << h;
    EXPECT_EQ(b.back()[0] == kPad, h > 0) << h;
  }
  // 5 examples on 4 hosts, batch 4: every host one batch, hosts 1..3 mostly padding.
  for (int64_t h = 0; h < 4; ++h) {
    Batches b = host_epoch(5, 4, h, 4, false);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(std::count(b[0].begin(), b[0].end(), kPad), h == 0 ? 2 : 3);
  }
}

TEST(Hosts, MoreHostsThanExamplesIsAnError) {
  ArrayInput::HParams hp = params(1, true);
  hp.num_infeed_hosts = 4;
  hp.infeed_host_index = 3;
  EXPECT_PAX_ERROR(numbers(3, hp), "host 3 would get none");
}

// ---------------------------------------------------------------------------
// Shuffling.

std::vector<int32_t> epoch_order(int64_t seed, int epochs, bool shuffle = true) {
  ArrayInput::HParams hp = params(20, true, shuffle);
  hp.input_random_seed = seed;
  auto input = numbers(20, hp);
  std::vector<int32_t> out;
  for (const auto& b : read(*input, epochs)) out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(Shuffle, DeterministicPerSeedAndNewEveryEpoch) {
  const std::vector<int32_t> a = epoch_order(1, 2), b = epoch_order(1, 2), c = epoch_order(2, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int32_t> first(a.begin(), a.begin() + 20), second(a.begin() + 20, a.end());
  EXPECT_NE(first, second);
  for (auto* epoch : {&first, &second}) {
    std::vector<int32_t> sorted = *epoch;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> ids(20);
    std::iota(ids.begin(), ids.end(), 0);
    EXPECT_EQ(sorted, ids);  // a permutation
  }
  std::vector<int32_t> plain = epoch_order(1, 1, false), ids(20);
  std::iota(ids.begin(), ids.end(), 0);
  EXPECT_EQ(plain, ids);
}

// ---------------------------------------------------------------------------
// State.

TEST(State, IsADictOfIntegerScalars) {
  auto input = numbers(5, params(2, true, true));
  Tree s = input->state();
  ASSERT_TRUE(s.is_dict());
  EXPECT_EQ(s.keys(), (std::vector<std::string>{"epoch", "position", "seed", "num_examples", "num_infeed_hosts"}));
  for (const auto& [k, v] : s.entries()) {
    EXPECT_EQ(v.leaf().dtype(), DType::i64) << k;
    EXPECT_EQ(v.leaf().ndim(), 0) << k;
  }
  read(*input, 3);                                     // 6 examples: one epoch and one more
  EXPECT_EQ(s["position"].leaf().item<int64_t>(), 0);  // the old state is a value
  EXPECT_EQ(input->state()["epoch"].leaf().item<int64_t>(), 1);
  EXPECT_EQ(input->state()["position"].leaf().item<int64_t>(), 1);
}

TEST(State, RestoreContinuesTheExactStream) {
  for (bool repeat : {true, false}) {
    ArrayInput::HParams hp = params(4, repeat, true);
    hp.input_random_seed = 3;
    auto input = numbers(13, hp);
    read(*input, 2);
    const Tree saved = input->state();
    const Batches rest = repeat ? read(*input, 9) : read_all(*input);
    auto fresh = numbers(13, hp);
    fresh->restore_state(saved);
    EXPECT_EQ(repeat ? read(*fresh, 9) : read_all(*fresh), rest) << "repeat " << repeat;
    // Restoring rewinds an input that has read further.
    input->restore_state(saved);
    EXPECT_EQ(read(*input, 1)[0], rest[0]);
  }
}

// Host 0's state of 4 hosts with batch 2 as the state of 2 hosts with batch
// 4: the next global batches (the hosts' batches together) are the same
// examples; a position that does not divide is refused.
TEST(State, ReshardsToAnotherHostCountAtTheSamePosition) {
  auto hosts = [](int64_t count, int64_t batch) {
    std::vector<std::unique_ptr<ArrayInput>> inputs;
    for (int64_t h = 0; h < count; ++h) {
      ArrayInput::HParams hp = params(batch, true, true);
      hp.input_random_seed = 5;
      hp.num_infeed_hosts = count;
      hp.infeed_host_index = h;
      inputs.push_back(numbers(40, hp));
    }
    return inputs;
  };
  // The examples of the next global batch, sorted.
  auto global = [](std::vector<std::unique_ptr<ArrayInput>>& inputs) {
    std::vector<int32_t> all;
    for (auto& in : inputs)
      for (int32_t x : xs(in->get_next())) all.push_back(x);
    std::sort(all.begin(), all.end());
    return all;
  };
  auto four = hosts(4, 2), two = hosts(2, 4);
  for (int i = 0; i < 3; ++i) global(four);  // 3 global batches of 8
  const Tree at24 = four[0]->state();        // 24 slots of the epoch read
  for (auto& in : two) {
    const std::optional<Tree> moved = in->reshard_state(at24);
    ASSERT_TRUE(moved);
    in->restore_state(*moved);
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(global(two), global(four)) << "global batch " << 3 + i;
  // 5 hosts cannot share 24 slots; another data set cannot continue at all.
  EXPECT_FALSE(hosts(5, 2)[0]->reshard_state(at24));
  EXPECT_FALSE(numbers(41, params(2, true))->reshard_state(at24));
}

TEST(State, TheSavedSeedWinsOverTheConfig) {
  ArrayInput::HParams hp = params(5, true, true);
  hp.input_random_seed = 1;
  auto a = numbers(10, hp);
  read(*a, 3);
  Tree saved = a->state();
  hp.input_random_seed = 2;
  auto b = numbers(10, hp);
  b->restore_state(saved);
  EXPECT_EQ(read(*b, 4), read(*a, 4));
}

TEST(State, RestoreRejectsAForeignState) {
  auto input = numbers(10, params(2, true));
  EXPECT_PAX_ERROR(input->restore_state(Tree::dict({{"step", scalar<int64_t>(1)}})), "has no 'num_examples'");
  auto other = numbers(11, params(2, true));
  EXPECT_PAX_ERROR(input->restore_state(other->state()), "the data or its config changed");
  ArrayInput::HParams two = params(2, true);
  two.num_infeed_hosts = 2;
  EXPECT_PAX_ERROR(input->restore_state(numbers(10, two)->state()), "num_infeed_hosts = 2");
  Tree bad = input->state();
  bad.set("position", scalar<int64_t>(99));
  EXPECT_PAX_ERROR(input->restore_state(bad), "out of range");
  bad.set("position", scalar<float>(1.0f));
  EXPECT_PAX_ERROR(input->restore_state(bad), "must be an integer scalar");
}

// ---------------------------------------------------------------------------
// Validation, ArrayInput, registry.

TEST(BaseInput, ValidatesTheCommonFields) {
  ArrayInput::HParams hp = params(0, true);
  EXPECT_PAX_ERROR(numbers(4, hp), "batch_size must be >= 1");
  hp = params(2, true);
  hp.infeed_host_index = 1;
  EXPECT_PAX_ERROR(numbers(4, hp), "infeed_host_index must be in [0, num_infeed_hosts = 1)");
  hp = params(2, true);
  hp.eval_loop_num_batches = 0;
  EXPECT_PAX_ERROR(numbers(4, hp), "eval_loop_num_batches must be >= 1");
  hp = params(2, true);
  hp.prefetch_batches = -1;
  EXPECT_PAX_ERROR(numbers(4, hp), "prefetch_batches must be >= 0");
  EXPECT_PAX_ERROR(numbers(4, params(2, true))->ids_to_strings(array<int32_t>({1, 2}, {1, 2})), "tokenizer");
}

TEST(ArrayInput, GathersRowsAndPadsWithZeroWeightAndPaddingsOne) {
  ArrayInput::HParams hp = params(3, false);
  Tree examples = Tree::dict({{"ids", array<int32_t>({1, 2, 3, 4}, {2, 2})},
                              {"paddings", array<float>({0, 0, 0, 1}, {2, 2})},
                              {"weights", array<float>({0.5f, 2.0f})}});
  ArrayInput input(hp, examples);
  Tree b = input.get_next();
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"ids", "paddings", "weights"}));
  EXPECT_TRUE(testing::all_close(b["ids"].leaf(), {1, 2, 3, 4, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["paddings"].leaf(), {0, 0, 0, 1, 1, 1}));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {0.5, 2.0, 0.0}));
  EXPECT_EQ(b["ids"].leaf().shape(), Shape({3, 2}));
}

TEST(ArrayInput, ChecksTheExamples) {
  EXPECT_PAX_ERROR(ArrayInput(params(1, true), Tree(array<int32_t>({1}))), "must be a non-empty dict");
  EXPECT_PAX_ERROR(
      ArrayInput(params(1, true), Tree::dict({{"a", array<int32_t>({1, 2})}, {"b", array<int32_t>({1, 2, 3})}})),
      "same leading (example) dimension");
  EXPECT_PAX_ERROR(ArrayInput(params(1, true), Tree::dict({{"a", array<int32_t>(std::vector<int32_t>{})}})),
                   "has no examples");
}

TEST(Registry, BuildsRegisteredInputsFromConfigsWithOverrides) {
  for (const char* name : {"TextLmInput", "IdxImageInput", "SyntheticInput"}) {
    auto names = registered_inputs();
    EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end()) << name;
    auto kinds = registered_hparams("input");
    EXPECT_TRUE(std::find(kinds.begin(), kinds.end(), name) != kinds.end()) << name;
  }
  Config cfg = Config::make("SyntheticInput", "input");
  cfg.apply_overrides({"batch_size=16", "seq_length=8", "eval_loop_num_batches=3", "name=train"});
  auto input = build_input(cfg);
  EXPECT_EQ(input->base_hparams().batch_size, 16);
  EXPECT_EQ(input->base_hparams().eval_loop_num_batches, 3);
  EXPECT_EQ(input->description(), "SyntheticInput 'train'");
  EXPECT_EQ(input->get_next()["ids"].leaf().shape(), Shape({16, 8}));
  EXPECT_EQ(dynamic_cast<PrefetchInput*>(input.get()), nullptr);

  Config partial = Config::partial("SyntheticInput", {"seq_length=8"}, {"batch_size", "name"});
  EXPECT_PAX_ERROR(build_input(partial),
                   "build_input: the SyntheticInput config is partial: 2 fields are missing: name (a string), "
                   "batch_size (an integer)");
  EXPECT_EQ(build_input(partial.complete({"batch_size=2", "name=p"}))->get_next()["ids"].leaf().shape(), Shape({2, 8}));

  cfg.set("prefetch_batches", "2");
  auto prefetched = build_input(cfg);
  EXPECT_NE(dynamic_cast<PrefetchInput*>(prefetched.get()), nullptr);
  EXPECT_EQ(prefetched->get_next()["ids"].leaf().shape(), Shape({16, 8}));

  // Input configs print with their docs and round-trip through JSON.
  Config text = Config::make("TextLmInput", "input");
  text.apply_overrides({"source=kjv", "split=validation", "files=[a.txt, b.txt]", "eval_loop_num_batches=None"});
  EXPECT_EQ(Config::from_json(text.to_json()), text);
  EXPECT_NE(text.str().find("Tokens per row (T)."), std::string::npos);
  EXPECT_EQ(text.get("split"), "validation");

  EXPECT_PAX_ERROR(cfg.set("batch_sise", "2"), "batch_size");
  EXPECT_PAX_ERROR(text.set("split", "test"), "validation");
  EXPECT_PAX_ERROR(build_input(Config::make("Linear").root()), "Linear is not a registered input");
  EXPECT_PAX_ERROR(build_input(HParamsPtr()), "None");
}

}  // namespace
}  // namespace pax::data

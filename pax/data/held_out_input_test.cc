// HeldOutInput: the validation split of another input's config, with its own
// BaseInput fields; sharing the config makes edits reach both; errors.
#include "pax/data/held_out_input.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "pax/data/file_io.h"
#include "pax/data/prefetch.h"
#include "pax/data/synthetic.h"
#include "pax/data/text_lm.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

std::string write_lines(const std::string& name, int lines) {
  std::string text;
  for (int i = 0; i < lines; ++i) text += "line number " + std::to_string(i) + "\n";
  const std::string path = (process_temp_dir() / ("held_out_" + name + ".txt")).string();
  write_file_atomic(path, text);
  return path;
}

std::shared_ptr<TextLmInput::HParams> train_config(const std::string& file) {
  auto train = std::make_shared<TextLmInput::HParams>();
  train->name = "train";
  train->files = {file};
  train->seq_length = 32;
  train->batch_size = 4;
  train->split = TextSplit::train;
  train->validation_fraction = 0.2;
  train->shuffle = true;
  return train;
}

TEST(HeldOutInput, ReadsTheValidationSplitWithItsOwnBaseFields) {
  auto train = train_config(write_lines("split", 200));
  HeldOutInput::HParams held_out;
  held_out.of = train;
  held_out.name = "validation";
  held_out.batch_size = 3;
  HParamsPtr resolved = resolve_held_out(held_out);
  const auto& r = dynamic_cast<const TextLmInput::HParams&>(*resolved);
  EXPECT_EQ(r.split, TextSplit::validation);
  EXPECT_EQ(r.name, "validation");
  EXPECT_EQ(r.batch_size, 3);
  EXPECT_FALSE(r.shuffle);  // the eval defaults: one pass in order
  EXPECT_FALSE(r.repeat);
  EXPECT_TRUE(r.reset_for_eval);
  EXPECT_EQ(r.seq_length, 32);                // the rest from `of`
  EXPECT_EQ(train->split, TextSplit::train);  // `of` itself is untouched

  std::unique_ptr<BaseInput> built = build_input(std::make_shared<HeldOutInput::HParams>(held_out));
  auto* text = dynamic_cast<TextLmInput*>(built.get());
  ASSERT_NE(text, nullptr);
  TextLmInput::HParams direct = *train;
  direct.split = TextSplit::validation;
  EXPECT_EQ(text->num_documents(), TextLmInput(direct).num_documents());
  EXPECT_EQ(text->rows().ids, TextLmInput(direct).rows().ids);
  EXPECT_EQ(built->get_next()["ids"].leaf().shape(), (Shape{3, 32}));
}

TEST(HeldOutInput, FollowsEditsOfTheSharedConfig) {
  auto train = train_config(write_lines("before", 200));
  auto held_out = std::make_shared<HeldOutInput::HParams>();
  held_out->of = train;
  train->files = {write_lines("after", 50)};
  EXPECT_EQ(held_out->data_source(), train->data_source());
  EXPECT_EQ(held_out->tokenizer_used(), "bytes");
  std::unique_ptr<BaseInput> built = build_input(held_out);
  TextLmInput::HParams direct = *train;
  direct.split = TextSplit::validation;
  EXPECT_EQ(dynamic_cast<TextLmInput&>(*built).num_documents(), TextLmInput(direct).num_documents());
}

TEST(HeldOutInput, PrefetchesOnce) {
  auto held_out = std::make_shared<HeldOutInput::HParams>();
  held_out->of = train_config(write_lines("prefetch", 100));
  held_out->prefetch_batches = 2;
  std::unique_ptr<BaseInput> built = build_input(held_out);
  auto* prefetch = dynamic_cast<PrefetchInput*>(built.get());
  ASSERT_NE(prefetch, nullptr);
  EXPECT_EQ(dynamic_cast<const PrefetchInput*>(&prefetch->inner()), nullptr);  // not prefetched twice
  EXPECT_NE(dynamic_cast<const TextLmInput*>(&prefetch->inner()), nullptr);
}

TEST(HeldOutInput, ExplainsBadConfigs) {
  HeldOutInput::HParams held_out;
  held_out.name = "validation";
  EXPECT_PAX_ERROR(resolve_held_out(held_out), "`of` must be an input config");
  held_out.of = std::make_shared<SyntheticInput::HParams>();
  EXPECT_PAX_ERROR(resolve_held_out(held_out), "cannot read split 'validation' of its `of` (SyntheticInput)");
  held_out.of = train_config(write_lines("bad_split", 10));
  held_out.split = "test";
  EXPECT_PAX_ERROR(resolve_held_out(held_out), "cannot read split 'test'");
}

}  // namespace
}  // namespace pax::data

// PromptInput: prefix layout (start id, tokens, padding), lengths, padding
// rows of a finite run, disjoint host shards, and text round trips.
#include "pax/data/prompts.h"

#include <gtest/gtest.h>

#include "pax/data/datasets.h"
#include "pax/testing/testing.h"

namespace pax::data {
namespace {

PromptInput::HParams prompts_hparams(int64_t batch) {
  PromptInput::HParams hp;
  hp.name = "samples";
  hp.prompts = {"ab", "c", "def"};
  hp.batch_size = batch;
  return hp;
}

TEST(PromptInput, PrefixesLengthsAndPadding) {
  PromptInput input(prompts_hparams(2));
  Tree b0 = input.get_next();
  // Byte ids are byte + 3; the start id is pad (0) as in T5.
  EXPECT_EQ(b0["prefix"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{0, 'a' + 3, 'b' + 3, 0, 0, 'c' + 3, 0, 0}));
  EXPECT_EQ(b0["prefix_lengths"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{3, 2}));
  Tree b1 = input.get_next();  // the third prompt and a padding row
  EXPECT_EQ(b1["prefix_lengths"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(b1["weights"].leaf().to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_THROW(input.get_next(), OutOfRange);
  EXPECT_EQ(input.ids_to_strings(b0["prefix"].leaf(), b0["prefix_lengths"].leaf()),
            (std::vector<std::string>{"ab", "c"}));
  input.reset();
  EXPECT_EQ(input.get_next()["prefix_lengths"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{3, 2}));
}

TEST(PromptInput, HostsReadDisjointPrompts) {
  std::vector<int32_t> lengths;
  for (int64_t host = 0; host < 2; ++host) {
    PromptInput::HParams hp = prompts_hparams(1);
    hp.num_infeed_hosts = 2;
    hp.infeed_host_index = host;
    PromptInput input(hp);
    for (int i = 0; i < 2; ++i) lengths.push_back(input.get_next()["prefix_lengths"].leaf().item<int32_t>());
    EXPECT_THROW(input.get_next(), OutOfRange);  // both hosts stop after the same number of batches
  }
  std::sort(lengths.begin(), lengths.end());
  EXPECT_EQ(lengths, (std::vector<int32_t>{0, 2, 3, 4}));  // every prompt once, one padding row
}

TEST(PromptInput, Errors) {
  PromptInput::HParams hp = prompts_hparams(1);
  hp.prompts.clear();
  EXPECT_PAX_ERROR(PromptInput{hp}, "`prompts` is empty");
  EXPECT_PAX_ERROR(resolve_tokenizer_spec("kjv_spm:lots"), "kjv_spm:<vocab size>");
  EXPECT_EQ(resolve_tokenizer_spec("bytes"), "bytes");
}

}  // namespace
}  // namespace pax::data

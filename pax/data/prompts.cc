// PromptInput and decode_rows.
#include "pax/data/prompts.h"

#include <algorithm>

#include "pax/core/error.h"
#include "pax/data/datasets.h"

namespace pax::data {

std::vector<std::string> decode_rows(const Tokenizer& tokenizer, const Array& ids, const Array& lengths) {
  PAX_CHECK(ids.ndim() == 2 && is_integer(ids.dtype()), "ids_to_strings needs integer ids (B, T), got ",
            ids.aval().str());
  const int64_t b = ids.dim(0), t = ids.dim(1);
  std::vector<int64_t> lens(size_t(b), t);
  if (lengths.defined()) {
    PAX_CHECK(lengths.ndim() == 1 && lengths.dim(0) == b && is_integer(lengths.dtype()),
              "ids_to_strings needs integer lengths (", b, ",) for ids ", ids.aval().str(), ", got ",
              lengths.aval().str());
    lens = lengths.to_vector<int64_t>();
  }
  const std::vector<int32_t> flat = ids.to_vector<int32_t>();
  std::vector<std::string> out;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = std::clamp<int64_t>(lens[size_t(i)], 0, t);
    out.push_back(tokenizer.decode(std::span<const int32_t>(flat.data() + i * t, size_t(n))));
  }
  return out;
}

PromptInput::PromptInput(const HParams& hp) : IndexedInput(hp) {
  PAX_CHECK(!hp.prompts.empty(), description(), ": `prompts` is empty; give the texts to continue");
  PAX_CHECK(hp.targets.empty() || hp.targets.size() == hp.prompts.size(), description(), ": ", hp.targets.size(),
            " targets for ", hp.prompts.size(), " prompts; give one target per prompt, or none");
  PAX_CHECK(hp.predict_metrics.empty() || !hp.targets.empty(), description(),
            ": predict_metrics need the expected continuations; set `targets` (one per prompt)");
  tokenizer_ = load_tokenizer(resolve_tokenizer_spec(hp.tokenizer, hp.data_dir));
  const int32_t start = start_id(*tokenizer_);
  for (const std::string& text : hp.prompts) {
    std::vector<int32_t> prefix = {start};
    for (int32_t id : tokenizer_->encode(text)) prefix.push_back(id);
    max_length_ = std::max<int64_t>(max_length_, int64_t(prefix.size()));
    prefixes_.push_back(std::move(prefix));
  }
  set_num_examples(int64_t(prefixes_.size()));
}

Tree PromptInput::make_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = int64_t(indices.size()), p = max_length_;
  const int32_t pad = padding_id(*tokenizer_);
  std::vector<int32_t> prefix(size_t(b * p), pad), lengths(size_t(b), 0);
  std::vector<float> weights(size_t(b), 0.0f);
  std::vector<int32_t> example_index(size_t(b), -1);
  for (int64_t i = 0; i < b; ++i) {
    if (indices[size_t(i)] < 0) continue;  // padding row
    example_index[size_t(i)] = int32_t(indices[size_t(i)]);
    const std::vector<int32_t>& src = prefixes_[size_t(indices[size_t(i)])];
    std::copy(src.begin(), src.end(), prefix.begin() + i * p);
    lengths[size_t(i)] = int32_t(src.size());
    weights[size_t(i)] = 1.0f;
  }
  return Tree::dict({{"prefix", array(prefix, {b, p})},
                     {"prefix_lengths", array(lengths, {b})},
                     {"weights", array(weights, {b})},
                     {"example_index", array(example_index, {b})}});
}

std::vector<std::string> PromptInput::ids_to_strings(const Array& ids, const Array& lengths) const {
  return decode_rows(*tokenizer_, ids, lengths);
}

PAX_REGISTER_INPUT(PromptInput);

}  // namespace pax::data

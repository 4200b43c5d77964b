// own_sentencepiece_path: the cache key of a tokenizer trained on an input's
// documents, and its training on first use.
#include "pax/data/own_tokenizer.h"

#include <filesystem>

#include "pax/core/error.h"
#include "pax/data/datasets.h"
#include "pax/data/host_random.h"
#include "pax/data/prepared_file.h"
#include "pax/data/tokenizer.h"

namespace pax::data {
namespace {

constexpr const char* kPrefix = "spm:";

// FNV-1a of every document, combined in order: the documents' identity.
uint64_t documents_hash(std::span<const std::string> documents, int64_t vocab_size) {
  uint64_t h = mix64(uint64_t(vocab_size));
  for (const std::string& d : documents) {
    uint64_t f = 0xcbf29ce484222325ULL;
    for (unsigned char c : d) f = (f ^ c) * 0x100000001b3ULL;
    h = hash_combine(h, f);
  }
  return h;
}

}  // namespace

std::optional<int64_t> own_sentencepiece_vocab(const std::string& spec) {
  if (spec.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string vocab = spec.substr(std::string(kPrefix).size());
  PAX_CHECK(!vocab.empty() && vocab.size() <= 6 && vocab.find_first_not_of("0123456789") == std::string::npos,
            "tokenizer '", spec, "' must be spm:<vocab size>, e.g. spm:4096");
  const int64_t n = std::stoll(vocab);
  PAX_CHECK(n >= 16 && n <= 65536, "tokenizer '", spec, "': the vocabulary size must be in [16, 65536]");
  return n;
}

std::string own_sentencepiece_path(std::span<const std::string> documents, int64_t vocab_size,
                                   const std::string& data_dir) {
  PAX_CHECK(!documents.empty(), "tokenizer spm:", vocab_size, ": there are no training documents to train it on");
  char name[64];
  std::snprintf(name, sizeof(name), "spm_%lld_%016llx.model", static_cast<long long>(vocab_size),
                static_cast<unsigned long long>(documents_hash(documents, vocab_size)));
  const std::filesystem::path path = std::filesystem::path(resolve_data_dir(data_dir)) / "text_spm" / name;
  const std::string what = std::to_string(documents.size()) + " training documents";
  return ensure_prepared_file(path.string(), "its " + what + " (spm:" + std::to_string(vocab_size) + ")", [&] {
    std::string text;
    for (const std::string& d : documents) (text += d) += '\n';
    SentencePieceTrainOptions options;
    options.vocab_size = vocab_size;
    options.hard_vocab_limit = false;
    options.input_sentence_size = 2'000'000;  // lines sampled: bounds the time and memory of a large text
    return train_sentencepiece_model(std::move(text), what, options);
  });
}

}  // namespace pax::data

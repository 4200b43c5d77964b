// ByteTokenizer, and SentencePieceTokenizer / train_sentencepiece over the
// sentencepiece library (kept out of the headers).
#include "pax/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <unordered_map>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/data/prepared_file.h"

namespace pax::data {

// ---------------------------------------------------------------------------
// ByteTokenizer

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(static_cast<unsigned char>(text[i])) + kOffset;
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= kOffset && id < kOffset + 256) out.push_back(char(id - kOffset));
  }
  return out;
}

// ---------------------------------------------------------------------------
// SentencePieceTokenizer

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& model_path) {
  std::error_code ec;
  PAX_CHECK(std::filesystem::is_regular_file(model_path, ec), "SentencePieceTokenizer: no model file '", model_path,
            "'; train one with `paxcc tokenizer --input FILE --vocab_size N --out MODEL` or use the 'bytes' tokenizer");
  // A model paxcc prepared (with a record) but read here by its path cannot be
  // prepared again from here: a damaged one stops the run.
  check_against_record(model_path, "SentencePiece model");
  auto impl = std::make_unique<Impl>();
  impl->path = model_path;
  const auto status = impl->sp.LoadFromSerializedProto(read_file(model_path));
  PAX_CHECK(status.ok(), "SentencePieceTokenizer: '", model_path,
            "' is not a SentencePiece model: ", status.ToString());
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl)));
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(absl::string_view(text.data(), text.size()), &ids);
  PAX_CHECK(status.ok(), "SentencePieceTokenizer::encode: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int n = impl_->sp.GetPieceSize();
  std::vector<int> kept;
  kept.reserve(ids.size());
  // Control ids (pad, eos, bos) decode to nothing; unk to " ⁇ ", which we drop too.
  for (int32_t id : ids) {
    if (id >= 0 && id < n && !impl_->sp.IsControl(id) && !impl_->sp.IsUnknown(id)) kept.push_back(id);
  }
  std::string out;
  const auto status = impl_->sp.Decode(kept, &out);
  PAX_CHECK(status.ok(), "SentencePieceTokenizer::decode: ", status.ToString());
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int32_t SentencePieceTokenizer::pad_id() const { return impl_->sp.pad_id(); }
int32_t SentencePieceTokenizer::bos_id() const { return impl_->sp.bos_id(); }
int32_t SentencePieceTokenizer::eos_id() const { return impl_->sp.eos_id(); }
int32_t SentencePieceTokenizer::unk_id() const { return impl_->sp.unk_id(); }
std::string SentencePieceTokenizer::spec() const { return impl_->path; }

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  PAX_CHECK(id >= 0 && id < impl_->sp.GetPieceSize(), "SentencePieceTokenizer::id_to_piece: id ", id,
            " is out of range [0, ", impl_->sp.GetPieceSize(), ")");
  return impl_->sp.IdToPiece(id);
}

// ---------------------------------------------------------------------------
// Training

namespace {

// The non-empty lines of a text, one by one, for the trainer.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string text) : text_(std::move(text)) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (pos_ < text_.size()) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string::npos) end = text_.size();
      line_.assign(text_, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::string text_, line_;
  size_t pos_ = 0;
  bool done_ = false;
};

}  // namespace

void train_sentencepiece(const std::string& input_file, const std::string& model_path,
                         const SentencePieceTrainOptions& o) {
  train_sentencepiece_on_text(read_file(input_file), "'" + input_file + "'", model_path, o);
}

void train_sentencepiece_on_text(std::string text, const std::string& what, const std::string& model_path,
                                 const SentencePieceTrainOptions& o) {
  write_file_atomic(model_path, train_sentencepiece_model(std::move(text), what, o));
}

std::string train_sentencepiece_model(std::string text, const std::string& what, const SentencePieceTrainOptions& o) {
  PAX_CHECK(o.vocab_size >= 4, "train_sentencepiece: vocab_size must be >= 4 (3 special ids and a piece), got ",
            o.vocab_size);
  LineIterator lines(std::move(text));
  PAX_CHECK(!lines.done(), "train_sentencepiece: ", what, " has no text");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"hard_vocab_limit", o.hard_vocab_limit ? "true" : "false"},
      {"num_threads", std::to_string(o.num_threads)},
      {"pad_id", "0"},
      {"eos_id", "1"},
      {"unk_id", "2"},
      {"bos_id", "-1"},
      {"minloglevel", "1"},  // warnings and errors only
  };
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  PAX_CHECK(status.ok(), "train_sentencepiece: training on ", what, " with vocab_size ", o.vocab_size,
            " failed: ", status.ToString());
  return model;
}

// ---------------------------------------------------------------------------

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& spec) {
  PAX_CHECK(!spec.empty(), "load_tokenizer: the tokenizer is empty; use 'bytes' or the path of a SentencePiece model");
  if (spec == "bytes") return std::make_shared<ByteTokenizer>();
  return SentencePieceTokenizer::load(spec);
}

int32_t padding_id(const Tokenizer& tokenizer) { return tokenizer.pad_id() >= 0 ? tokenizer.pad_id() : 0; }

int32_t start_id(const Tokenizer& tokenizer) {
  return tokenizer.bos_id() >= 0 ? tokenizer.bos_id() : padding_id(tokenizer);
}

}  // namespace pax::data

// Tokenizers for text inputs: text <-> int32 token ids.
//
//  - ByteTokenizer: UTF-8 bytes, as ByT5: ids 0 pad, 1 eos, 2 unk, then byte
//    b is id b + 3 (vocab 259). No model file; any text round-trips.
//  - SentencePieceTokenizer: a SentencePiece model (unigram or BPE), loaded
//    from a .model file. train_sentencepiece() trains one from a text file;
//    its special ids follow T5 (pad 0, eos 1, unk 2, no bos), the same as
//    the byte tokenizer's and LanguageModel's default eos_id.
//
// load_tokenizer("bytes") or load_tokenizer("path/to/spm.model") picks one
// by its spec (the `tokenizer` field of TextLmInput).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pax::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids`; special ids (pad, eos, bos, unk, control) are dropped.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Special ids; -1 when the tokenizer has none.
  virtual int32_t pad_id() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t unk_id() const = 0;
  // What the tokenizer is, for messages: "bytes", "sentencepiece:path".
  virtual std::string spec() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kPad = 0, kEos = 1, kUnk = 2, kOffset = 3;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return 256 + kOffset; }
  int32_t pad_id() const override { return kPad; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return kEos; }
  int32_t unk_id() const override { return kUnk; }
  std::string spec() const override { return "bytes"; }
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws pax::Error naming the file when it is missing or not a model, or
  // has a checksum record (prepared_file.h) that it does not match.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  int32_t pad_id() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  int32_t unk_id() const override;
  std::string spec() const override;
  // The piece of one id ("▁the"); throws when out of range.
  std::string id_to_piece(int32_t id) const;

 private:
  struct Impl;
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SentencePieceTrainOptions {
  int64_t vocab_size = 8000;
  std::string model_type = "unigram";   // unigram | bpe | char | word
  double character_coverage = 1.0;      // fraction of characters the model covers
  int64_t max_sentence_length = 16384;  // longer lines (bytes) are skipped
  int64_t input_sentence_size = 0;      // lines sampled for training; 0: all
  bool byte_fallback = false;           // unknown characters as byte pieces
  bool hard_vocab_limit = true;         // false: fewer pieces than vocab_size when the text has too few
  uint32_t seed = 0;                    // of SentencePiece's sampling
  int num_threads = 4;
};

// Trains a SentencePiece model on the lines of `input_file` (plain or gzip
// text) and writes it to `model_path` (one file, written atomically). Throws
// pax::Error with SentencePiece's message when training fails (e.g. a
// vocab_size too large for the text).
void train_sentencepiece(const std::string& input_file, const std::string& model_path,
                         const SentencePieceTrainOptions& options = {});
// The same on the lines of `text` in memory; `what` names it in messages.
void train_sentencepiece_on_text(std::string text, const std::string& what, const std::string& model_path,
                                 const SentencePieceTrainOptions& options = {});
// The same, returning the serialised model instead of writing it.
std::string train_sentencepiece_model(std::string text, const std::string& what,
                                      const SentencePieceTrainOptions& options = {});

// The id that pads rows: the tokenizer's pad id, or 0 when it has none.
int32_t padding_id(const Tokenizer& tokenizer);
// The first input of every sequence: bos, else the padding id (as T5).
int32_t start_id(const Tokenizer& tokenizer);

// "bytes" -> ByteTokenizer; anything else is the path of a SentencePiece model.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace pax::data

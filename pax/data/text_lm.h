// TextLmInput: language-model batches from text files. Text is split into
// documents (lines, blank-line separated paragraphs, or whole files; a record
// of a JSON-lines or TFRecord corpus file, data/record_files.h), a
// deterministic subset of them held out for validation, tokenised (bytes or
// a SentencePiece model) and packed into rows of seq_length tokens, once at
// construction; the rows are then sharded, shuffled and batched like any
// IndexedInput.
//
// A document of tokens t1..tn is the sequence s = [start, t1, .., tn, eos]
// (start: the tokenizer's bos, else pad as in T5; eos left out when
// add_eos = false); its inputs are s[:-1] and its labels s[1:], so that
// labels[i] is the token after ids[i]. Batches (LanguageModel's layout):
//   ids, labels   (B, T) i32
//   paddings      (B, T) f32: 1 past the end of the row's segments
//   weights       (B, T) f32: 1 - paddings (0 for padding rows of an eval set)
//   segment_ids   (B, T) i32: 1, 2, .. for the documents of a row, 0 padding  } pack = true
//   segment_pos   (B, T) i32: position within the segment, 0 padding          }
// With pack = true a row holds as many whole documents as fit, in order; a
// document that does not fit in the rest of a row starts the next one, and
// one longer than a row is cut into seq_length pieces (each piece its own
// segment, its labels still the true next tokens). With pack = false every
// document (piece) has rows of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pax/data/indexed_input.h"
#include "pax/data/record_files.h"
#include "pax/data/tokenizer.h"

namespace pax::data {

// Packed rows on the host, each array (num_rows, seq_length) row-major.
struct PackedRows {
  int64_t num_rows = 0, seq_length = 0;
  std::vector<int32_t> ids, labels, segment_ids, segment_pos;
};

// Packs tokenised documents as described above. start_id is the first input
// of every document; eos_id < 0 appends nothing; pad_id fills the padding.
PackedRows pack_documents(std::span<const std::vector<int32_t>> documents, int64_t seq_length, bool pack,
                          int32_t start_id, int32_t eos_id, int32_t pad_id);

// The batch of `rows` at `indices` in the layout above (index -1: a padding
// row); segment_ids / segment_pos only `with_segments` (packed rows).
Tree rows_batch(const PackedRows& rows, const std::vector<int64_t>& indices, int32_t pad_id, bool with_segments);

enum class TextSource : int { files, kjv };
PAX_ENUM(TextSource, "files", "kjv")
enum class DocumentUnit : int { line, paragraph, file };
PAX_ENUM(DocumentUnit, "line", "paragraph", "file")
enum class TextSplit : int { all, train, validation };
PAX_ENUM(TextSplit, "all", "train", "validation")

// The documents of `text` by `unit` (empty and all-blank ones dropped;
// trailing '\r' removed from lines).
std::vector<std::string> split_documents(const std::string& text, DocumentUnit unit);
// The documents of one corpus file: a text file split by `unit`, or the
// `text_field` of each record of a JSON-lines or TFRecord file (by the name,
// data/record_files.h); empty ones dropped. Errors name `who`; bad records
// are counted in `bad` with skip_bad.
std::vector<std::string> file_documents(const std::string& path, DocumentUnit unit, const std::string& text_field,
                                        bool skip_bad, BadRecords& bad, const std::string& who);
// Whether document `index` is held out for validation: a fixed pseudo-random
// choice of about `fraction` of the documents, independent of any seed, so
// that every run splits alike and the splits never overlap.
bool is_validation_document(int64_t index, double fraction);

class TextLmInput : public IndexedInput {
 public:
  struct HParams : BaseInput::HParams {
    TextSource source = TextSource::files;
    std::vector<std::string> files;
    std::string data_dir;
    std::string tokenizer = "bytes";
    int64_t seq_length = 128;
    bool pack = true;
    bool add_eos = true;
    DocumentUnit document_unit = DocumentUnit::line;
    TextSplit split = TextSplit::all;
    double validation_fraction = 0.05;
    std::string text_field = "text";
    bool skip_bad_records = false;
    PAX_HPARAMS(TextLmInput, BaseInput::HParams,
                (source, "files: the text files in `files`; kjv: the King James Bible (prepared in data_dir)."),
                (files,
                 "Files read in order with source = files (set with another source: an error): text, JSON lines "
                 "(.jsonl / .json: one object per line, its text_field a document) or TFRecord files of tf.Example "
                 "(a name with 'tfrecord' in it: the text_field bytes feature), each plain or gzip; a name with "
                 "* ? [ is a glob (c4-train.tfrecord-*-of-01024)."),
                (data_dir, "Data directory (empty: --data_dir, $PAX_DATA_DIR or ./data)."),
                (tokenizer,
                 "'bytes' (byte-level, vocab 259), the path of a SentencePiece model, kjv_spm:<vocab> (a "
                 "model trained on the KJV text, cached in data_dir), or spm:<vocab> (a model of at most that "
                 "vocabulary trained on this input's train split on first use, cached in data_dir/text_spm)."),
                (seq_length, "Tokens per row (T).", range::size),
                (pack, "Pack several documents per row (with segment_ids / segment_pos); false: one per row."),
                (add_eos, "End every document with the tokenizer's eos id."),
                (document_unit, "What a document is: a line, a blank-line separated paragraph, or a file."),
                (split, "all documents, or the train / validation part of them."),
                (validation_fraction, "Fraction of the documents held out as the validation split.",
                 range::probability),
                (text_field, "The field (JSON lines) or feature (tf.Example) that holds a record's text."),
                (skip_bad_records,
                 "Leave out records that are damaged or lack text_field (and unreadable files), counted in one "
                 "warning; false: an error naming the file and record."));
    std::string data_source() const override;
    std::string tokenizer_used() const override;
  };

  explicit TextLmInput(const HParams& hparams);

  std::vector<std::string> ids_to_strings(const Array& ids, const Array& lengths = Array()) const override;
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const PackedRows& rows() const { return rows_; }
  int64_t num_documents() const { return num_documents_; }

 protected:
  Tree make_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  PackedRows rows_;
  int64_t num_documents_ = 0;
};

// Throws pax::Error when `files` is set beside a source that ignores it
// (source = kjv), naming both fields and what to set instead; `who` names the
// input ("TextLmInput 'train'", "train_input"). TextLmInput's constructor
// calls it before preparing anything; a config check may call it earlier.
void check_text_source(const TextLmInput::HParams& hp, const std::string& who);

}  // namespace pax::data

// StreamingTextLmInput: language-model batches streamed from corpora too
// large to hold (C4's 1,024 shards), as SeqIO feeds Pax: documents are read
// file by file (one file's documents in memory at a time), tokenised, an EOS
// appended, packed into rows of seq_length (TextLmInput's layout and
// packing, data/text_lm.h) and shuffled in a buffer of shuffle_buffer_size
// rows.
//
//   --set train_input=StreamingTextLmInput
//   --set 'train_input.files=[/data/c4/c4-train.tfrecord-*-of-01024]'
//   --set train_input.tokenizer=/data/c4/cc_all.32000/sentencepiece.model
//
// The stream of one host:
//  - files: each host reads its own files, host h the h-th, (h+H)-th, ...
//    of the list (globs expanded, sorted; H = num_infeed_hosts); with fewer files than
//    hosts, every host reads every file and keeps the records r with
//    r mod H = h. With shuffle, each epoch visits the host's files in an
//    order drawn from (input_random_seed, epoch).
//  - windows: documents are taken in order until they hold
//    shuffle_buffer_size x seq_length tokens (or the epoch's files end);
//    they are packed into rows (the last row of a window may be part
//    padding), and with shuffle the rows are permuted by a key of the seed
//    and the window's first record. Batches take rows in that order,
//    running on from window to window and epoch to epoch (repeat = true),
//    or padding the last batch of the one epoch (repeat = false, one host).
//  - state(): the window's first record (epoch, file, record) and the rows
//    of it already read, so a restored input reads that window again and
//    continues with exactly the batches that would have followed; the
//    runner saves it with every checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pax/data/base_input.h"
#include "pax/data/text_lm.h"
#include "pax/data/tokenizer.h"

namespace pax::data {

class StreamingTextLmInput : public BaseInput {
 public:
  struct HParams : BaseInput::HParams {
    std::vector<std::string> files;
    std::string tokenizer = "bytes";
    int64_t seq_length = 128;
    bool pack = true;
    bool add_eos = true;
    DocumentUnit document_unit = DocumentUnit::line;
    std::string text_field = "text";
    bool skip_bad_records = false;
    int64_t shuffle_buffer_size = 1024;
    PAX_HPARAMS(StreamingTextLmInput, BaseInput::HParams,
                (files,
                 "Corpus files, read in the order listed (a glob's matches sorted): text, JSON lines (.jsonl / .json) "
                 "or TFRecord files of "
                 "tf.Example (a name with 'tfrecord' in it), each plain or gzip; a name with * ? [ is a glob."),
                (tokenizer, "'bytes' (byte-level, vocab 259) or the path of a SentencePiece model."),
                (seq_length, "Tokens per row (T).", range::size),
                (pack, "Pack several documents per row (with segment_ids / segment_pos); false: one per row."),
                (add_eos, "End every document with the tokenizer's eos id."),
                (document_unit,
                 "What a document of a text file is: a line, a blank-line separated paragraph, or a file."),
                (text_field, "The field (JSON lines) or feature (tf.Example) that holds a record's text."),
                (skip_bad_records,
                 "Leave out records that are damaged or lack text_field, counted in a warning per file; false: an "
                 "error naming the file and record."),
                (shuffle_buffer_size,
                 "Rows packed and shuffled together (with shuffle); also the unit a resumed run reads again.",
                 range::size));
    std::string data_source() const override;
    std::string tokenizer_used() const override { return tokenizer; }
  };

  explicit StreamingTextLmInput(const HParams& hparams);

  Tree get_next() override;
  void reset() override;
  // {epoch, file, record, emitted, seed, num_infeed_hosts, shuffle_buffer_size, seq_length, done}.
  Tree state() const override;
  void restore_state(const Tree& state) override;
  std::vector<std::string> ids_to_strings(const Array& ids, const Array& lengths = Array()) const override;
  int64_t vocab_size() const override { return tokenizer_->vocab_size(); }

  // This host's files, in sorted order.
  const std::vector<std::string>& host_files() const { return files_; }

 private:
  // Where a window starts: the file (its place in the epoch's order) and
  // the record within it (counting the records of every host).
  struct Position {
    int64_t epoch = 0, file = 0, record = 0;
  };
  // Reads, packs and shuffles the window starting at `start`.
  void load_window(Position start);  // by value: callers pass next_
  // The documents of the epoch's file at place `file`.
  const std::vector<std::string>& documents(int64_t epoch, int64_t file);

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<std::string> files_;
  int64_t record_stride_ = 1, record_offset_ = 0;  // records kept: r mod stride == offset
  // The window.
  Position start_, next_;  // next_: where the following window starts
  bool last_of_epoch_ = false;
  PackedRows rows_;
  std::vector<int64_t> order_;  // the rows' order
  int64_t emitted_ = 0;
  bool done_ = false;  // repeat = false: the epoch is read
  // With shuffle: the order of the files in epoch file_order_epoch_.
  int64_t file_order_epoch_ = -1;
  std::vector<int64_t> file_order_;
  // The documents of the file read last.
  std::string loaded_path_;
  std::vector<std::string> loaded_;
};

}  // namespace pax::data

// StreamingTextLmInput: this host's files, windows of documents packed and
// shuffled, batches across windows and epochs, and the window's start as
// the state.
#include "pax/data/text_stream.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "pax/core/parallel.h"
#include "pax/data/datasets.h"
#include "pax/data/host_random.h"
#include "pax/data/own_tokenizer.h"
#include "pax/data/prompts.h"
#include "pax/data/record_files.h"

namespace pax::data {

namespace {

// Documents tokenised at once while a window fills (the ones past the
// window's end are tokenised again by the next window).
constexpr size_t kTokenizeChunk = 256;

}  // namespace

StreamingTextLmInput::StreamingTextLmInput(const HParams& hp) : BaseInput(hp) {
  const std::string who = description();
  PAX_CHECK(hp.seq_length >= 1, who, ": seq_length must be >= 1, got ", hp.seq_length);
  PAX_CHECK(hp.shuffle_buffer_size >= 1, who, ": shuffle_buffer_size must be >= 1 (rows), got ",
            hp.shuffle_buffer_size);
  PAX_CHECK(hp.num_infeed_hosts >= 1 && hp.infeed_host_index >= 0 && hp.infeed_host_index < hp.num_infeed_hosts, who,
            ": infeed_host_index ", hp.infeed_host_index, " is not in [0, num_infeed_hosts = ", hp.num_infeed_hosts,
            ")");
  PAX_CHECK(hp.repeat || hp.num_infeed_hosts == 1, who, ": repeat = false with ", hp.num_infeed_hosts,
            " hosts would end each host's stream after another number of batches; stream with repeat = true, or "
            "evaluate on a TextLmInput (read whole, padded alike on every host)");
  PAX_CHECK(!own_sentencepiece_vocab(hp.tokenizer), who, ": tokenizer '", hp.tokenizer,
            "' trains a model on the whole corpus, which a stream never holds; give a SentencePiece model's path "
            "(the T5 vocabulary: cc_all.32000/sentencepiece.model) or 'bytes'");
  PAX_CHECK(!hp.files.empty(), who, ": `files` is empty; list the corpus files (or shard patterns) to read");
  std::vector<std::string> files;
  try {
    files = expand_file_patterns(hp.files);
  } catch (const Error& e) {
    PAX_FAIL(who, ": ", e.what());
  }
  for (const std::string& f : files) {
    std::error_code ec;
    PAX_CHECK(std::filesystem::is_regular_file(f, ec), who, ": no such file: '", f,
              "'; `files` must list existing corpus files");
  }
  tokenizer_ = load_tokenizer(resolve_tokenizer_spec(hp.tokenizer));
  const int64_t hosts = hp.num_infeed_hosts, host = hp.infeed_host_index;
  if (int64_t(files.size()) >= hosts) {
    for (size_t i = size_t(host); i < files.size(); i += size_t(hosts)) files_.push_back(files[i]);
  } else {
    files_ = files;
    record_stride_ = hosts;
    record_offset_ = host;
  }
  load_window({});
}

const std::vector<std::string>& StreamingTextLmInput::documents(int64_t epoch, int64_t file) {
  const auto& hp = hparams<HParams>();
  size_t index = size_t(file);
  if (hp.shuffle) {
    if (file_order_epoch_ != epoch) {
      file_order_ = random_permutation(int64_t(files_.size()),
                                       hash_combine(uint64_t(hp.input_random_seed), uint64_t(epoch) ^ 0xf11e5ULL));
      file_order_epoch_ = epoch;
    }
    index = size_t(file_order_[size_t(file)]);
  }
  const std::string& path = files_[index];
  if (path != loaded_path_) {
    loaded_.clear();
    loaded_path_.clear();
    BadRecords bad;
    loaded_ = file_documents(path, hp.document_unit, hp.text_field, hp.skip_bad_records, bad, description());
    loaded_path_ = path;
    if (bad.count > 0)
      std::fprintf(stderr, "%s: left out %lld bad record(s) of '%s' (skip_bad_records); the first: %s\n",
                   description().c_str(), (long long)bad.count, path.c_str(), bad.first.c_str());
  }
  return loaded_;
}

void StreamingTextLmInput::load_window(Position start) {
  const auto& hp = hparams<HParams>();
  const Tokenizer& tok = *tokenizer_;
  const int64_t budget = hp.shuffle_buffer_size * hp.seq_length;
  std::vector<std::vector<int32_t>> tokens;
  int64_t held = 0;  // tokens of the window's documents, with their start and eos
  Position p = start;
  bool epoch_end = false;
  while (held < budget) {
    if (p.file >= int64_t(files_.size())) {
      epoch_end = true;
      break;
    }
    const std::vector<std::string>& docs = documents(p.epoch, p.file);
    // This host's next documents, tokenised a chunk at a time; the window
    // ends at the document that fills the budget.
    std::vector<int64_t> chunk;
    for (int64_t r = p.record; r < int64_t(docs.size()) && chunk.size() < kTokenizeChunk; ++r) {
      if (r % record_stride_ == record_offset_) chunk.push_back(r);
    }
    if (chunk.empty()) {
      ++p.file;
      p.record = 0;
      continue;
    }
    std::vector<std::vector<int32_t>> encoded(chunk.size());
    parallel_for(int64_t(chunk.size()), 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) encoded[size_t(i)] = tok.encode(docs[size_t(chunk[size_t(i)])]);
    });
    for (size_t i = 0; i < chunk.size() && held < budget; ++i) {
      held += int64_t(encoded[i].size()) + 2;
      tokens.push_back(std::move(encoded[i]));
      p.record = chunk[i] + 1;
    }
  }
  PAX_CHECK(!(epoch_end && tokens.empty() && start.file == 0 && start.record == 0), description(),
            ": no documents in this host's ", files_.size(), " file(s) (first: '", files_[0], "')",
            record_stride_ > 1 ? " among the records it keeps" : "");
  start_ = start;
  next_ = epoch_end ? Position{start.epoch + 1, 0, 0} : p;
  last_of_epoch_ = epoch_end;
  rows_ =
      pack_documents(tokens, hp.seq_length, hp.pack, start_id(tok), hp.add_eos ? tok.eos_id() : -1, padding_id(tok));
  order_.resize(size_t(rows_.num_rows));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  if (hp.shuffle) {
    const uint64_t key = hash_combine(
        hash_combine(hash_combine(uint64_t(hp.input_random_seed), uint64_t(start.epoch)), uint64_t(start.file)),
        uint64_t(start.record));
    order_ = random_permutation(rows_.num_rows, key);
  }
  emitted_ = 0;
}

Tree StreamingTextLmInput::get_next() {
  const auto& hp = hparams<HParams>();
  if (done_) throw OutOfRange(description() + ": the epoch is read (repeat = false)");
  const int64_t b = hp.batch_size, t = hp.seq_length;
  PackedRows batch;
  batch.num_rows = b;
  batch.seq_length = t;
  for (auto* v : {&batch.ids, &batch.labels, &batch.segment_ids, &batch.segment_pos}) v->resize(size_t(b * t));
  int64_t filled = 0;
  while (filled < b) {
    if (emitted_ == rows_.num_rows) {
      if (last_of_epoch_ && !hp.repeat) {
        done_ = true;
        break;
      }
      load_window(next_);
      continue;
    }
    const size_t src = size_t(order_[size_t(emitted_++)] * t), dst = size_t(filled++ * t);
    std::copy_n(rows_.ids.begin() + src, t, batch.ids.begin() + dst);
    std::copy_n(rows_.labels.begin() + src, t, batch.labels.begin() + dst);
    std::copy_n(rows_.segment_ids.begin() + src, t, batch.segment_ids.begin() + dst);
    std::copy_n(rows_.segment_pos.begin() + src, t, batch.segment_pos.begin() + dst);
  }
  if (filled == 0) throw OutOfRange(description() + ": the epoch is read (repeat = false)");
  std::vector<int64_t> indices(size_t(b), -1);
  std::iota(indices.begin(), indices.begin() + filled, int64_t(0));
  return rows_batch(batch, indices, padding_id(*tokenizer_), hp.pack);
}

void StreamingTextLmInput::reset() {
  done_ = false;
  load_window({});
}

Tree StreamingTextLmInput::state() const {
  const auto& hp = hparams<HParams>();
  return int_state({{"epoch", start_.epoch},
                    {"file", start_.file},
                    {"record", start_.record},
                    {"emitted", emitted_},
                    {"done", done_ ? 1 : 0},
                    {"seed", hp.input_random_seed},
                    {"num_infeed_hosts", hp.num_infeed_hosts},
                    {"shuffle_buffer_size", hp.shuffle_buffer_size},
                    {"seq_length", hp.seq_length}});
}

void StreamingTextLmInput::restore_state(const Tree& state) {
  const auto& hp = hparams<HParams>();
  const std::string who = description();
  for (auto [key, value] : {std::pair<const char*, int64_t>{"seed", hp.input_random_seed},
                            {"num_infeed_hosts", hp.num_infeed_hosts},
                            {"shuffle_buffer_size", hp.shuffle_buffer_size},
                            {"seq_length", hp.seq_length}}) {
    const int64_t saved = state_value(state, key, who);
    PAX_CHECK(saved == value, who, ": the saved stream position is of ", key, " = ", saved, " but this input has ",
              value, "; set it back to resume the same stream");
  }
  const Position start{state_value(state, "epoch", who), state_value(state, "file", who),
                       state_value(state, "record", who)};
  const int64_t emitted = state_value(state, "emitted", who);
  PAX_CHECK(start.epoch >= 0 && start.file >= 0 && start.file <= int64_t(files_.size()) && start.record >= 0, who,
            ": the saved position (epoch ", start.epoch, ", file ", start.file, ", record ", start.record,
            ") is not one of this input's ", files_.size(), " file(s)");
  load_window(start);
  PAX_CHECK(emitted >= 0 && emitted <= rows_.num_rows, who, ": the saved position has read ", emitted,
            " rows of a window that holds ", rows_.num_rows, "; the files have changed since it was saved");
  emitted_ = emitted;
  done_ = state_value(state, "done", who) != 0;
}

std::vector<std::string> StreamingTextLmInput::ids_to_strings(const Array& ids, const Array& lengths) const {
  return decode_rows(*tokenizer_, ids, lengths);
}

std::string StreamingTextLmInput::HParams::data_source() const {
  std::string list;
  for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
  return "files [" + list + "]";
}

PAX_REGISTER_INPUT(StreamingTextLmInput);

}  // namespace pax::data

// TextLmInput: documents, the validation split, tokenisation and packing.
#include "pax/data/text_lm.h"

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <filesystem>

#include "pax/core/parallel.h"
#include "pax/data/datasets.h"
#include "pax/data/file_io.h"
#include "pax/data/record_files.h"
#include "pax/data/host_random.h"
#include "pax/data/own_tokenizer.h"
#include "pax/data/prompts.h"

namespace pax::data {
namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// One error naming every file of `files` that is not there.
void check_files_exist(const std::string& who, const std::vector<std::string>& files) {
  std::string missing;
  int count = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    if (!std::filesystem::exists(f, ec)) missing += (count++ ? ", '" : "'") + f + "'";
  }
  PAX_CHECK(count == 0, who, ": no such file", count > 1 ? "s" : "", ": ", missing,
            "; `files` must list existing text files");
}

}  // namespace

std::vector<std::string> split_documents(const std::string& text, DocumentUnit unit) {
  std::vector<std::string> docs;
  if (unit == DocumentUnit::file) {
    if (!blank(text)) docs.push_back(text);
    return docs;
  }
  std::string paragraph;
  auto flush = [&] {
    if (!blank(paragraph)) docs.push_back(std::move(paragraph));
    paragraph.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line = strip_cr(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    if (unit == DocumentUnit::line) {
      if (!blank(line)) docs.emplace_back(line);
    } else if (blank(line)) {
      flush();
    } else {
      if (!paragraph.empty()) paragraph += '\n';
      paragraph.append(line);
    }
  }
  flush();
  return docs;
}

std::vector<std::string> file_documents(const std::string& path, DocumentUnit unit, const std::string& text_field,
                                        bool skip_bad, BadRecords& bad, const std::string& who) {
  const RecordFormat format = record_format(path);
  if (format == RecordFormat::text) return split_documents(read_file(path), unit);
  std::vector<std::string> records;
  try {
    records = read_record_documents(path, format, text_field, skip_bad, bad);
  } catch (const Error& e) {
    PAX_FAIL(who, ": ", e.what());
  }
  // Empty records are dropped, as blank documents of text files are.
  std::erase_if(records, [](const std::string& d) { return d.empty(); });
  return records;
}

bool is_validation_document(int64_t index, double fraction) {
  const uint64_t h = mix64(uint64_t(index) ^ 0x5d1e5eed5a1717edULL);
  return double(h >> 11) * 0x1.0p-53 < fraction;
}

PackedRows pack_documents(std::span<const std::vector<int32_t>> documents, int64_t seq_length, bool pack,
                          int32_t start_id, int32_t eos_id, int32_t pad_id) {
  PAX_CHECK(seq_length >= 1, "pack_documents: seq_length must be >= 1, got ", seq_length);
  const int64_t t = seq_length;
  PackedRows r;
  r.seq_length = t;
  int64_t fill = t;  // tokens used in the current row (t: none open)
  int32_t segment = 0;
  auto new_row = [&] {
    r.ids.resize(r.ids.size() + size_t(t), pad_id);
    r.labels.resize(r.labels.size() + size_t(t), pad_id);
    r.segment_ids.resize(r.segment_ids.size() + size_t(t), 0);
    r.segment_pos.resize(r.segment_pos.size() + size_t(t), 0);
    ++r.num_rows;
    fill = 0;
    segment = 0;
  };
  std::vector<int32_t> s;
  for (const std::vector<int32_t>& doc : documents) {
    s.clear();
    s.push_back(start_id);
    s.insert(s.end(), doc.begin(), doc.end());
    if (eos_id >= 0) s.push_back(eos_id);
    const int64_t n = int64_t(s.size()) - 1;  // (input, label) pairs
    for (int64_t off = 0; off < n;) {
      const int64_t take = std::min(n - off, t);
      if (pack ? fill + take > t : fill > 0) new_row();
      const size_t base = size_t((r.num_rows - 1) * t + fill);
      ++segment;
      for (int64_t j = 0; j < take; ++j) {
        r.ids[base + size_t(j)] = s[size_t(off + j)];
        r.labels[base + size_t(j)] = s[size_t(off + j + 1)];
        r.segment_ids[base + size_t(j)] = segment;
        r.segment_pos[base + size_t(j)] = int32_t(j);
      }
      fill += take;
      off += take;
    }
  }
  return r;
}

void check_text_source(const TextLmInput::HParams& hp, const std::string& who) {
  // A source that ignores `files` would otherwise read its own text without a
  // word about the files the user listed.
  if (hp.source == TextSource::files || hp.files.empty()) return;
  std::string list;
  for (const std::string& f : hp.files) list += (list.empty() ? "" : ", ") + f;
  const std::string source = pax_enum_names(static_cast<TextSource*>(nullptr)).names.at(size_t(hp.source));
  PAX_FAIL(who, ": `files` is set ([", list, "]) but `source` is ", source, ", which ignores `files`; to read ",
           "these files set source = files (e.g. --set train_input.source=files, or eval_inputs[<i>].source=files ",
           "for an eval input), or use --exp=lm.TextTransformer --set 'train_input.files=[", list,
           "]' (lm.KjvTransformer's model on your own text); to read the ", source, " text, leave `files` empty");
}

// ---------------------------------------------------------------------------
// TextLmInput

TextLmInput::TextLmInput(const HParams& hp) : IndexedInput(hp) {
  const std::string who = description();
  check_text_source(hp, who);  // before anything is prepared
  PAX_CHECK(hp.seq_length >= 1, who, ": seq_length must be >= 1, got ", hp.seq_length);
  PAX_CHECK(hp.split == TextSplit::all || (hp.validation_fraction > 0 && hp.validation_fraction < 1), who,
            ": validation_fraction must be in (0, 1) to split the documents, got ", hp.validation_fraction);
  const std::optional<int64_t> own_vocab = own_sentencepiece_vocab(hp.tokenizer);
  if (!own_vocab) tokenizer_ = load_tokenizer(resolve_tokenizer_spec(hp.tokenizer, hp.data_dir));

  std::vector<std::string> files = hp.files;
  if (hp.source == TextSource::kjv) {
    files = {kjv_text_path(hp.data_dir)};
  } else {
    PAX_CHECK(!files.empty(), who, ": `files` is empty; list the text files to read (or set source = kjv)");
    try {
      files = expand_file_patterns(files);
    } catch (const Error& e) {
      PAX_FAIL(who, ": ", e.what());
    }
    check_files_exist(who, files);
  }
  std::vector<std::string> docs, train_docs;  // train_docs: what an spm:<vocab> tokenizer trains on
  int64_t index = 0;
  BadRecords bad;
  for (const std::string& f : files) {
    for (std::string& d : file_documents(f, hp.document_unit, hp.text_field, hp.skip_bad_records, bad, who)) {
      const bool held_out = is_validation_document(index++, hp.validation_fraction);
      if (own_vocab && !held_out) train_docs.push_back(d);
      if (hp.split == TextSplit::all || held_out == (hp.split == TextSplit::validation)) docs.push_back(std::move(d));
    }
  }
  if (bad.count > 0) {
    std::fprintf(stderr, "%s: left out %lld bad record(s) (skip_bad_records); the first: %s\n", who.c_str(),
                 (long long)bad.count, bad.first.c_str());
  }
  if (own_vocab) tokenizer_ = load_tokenizer(own_sentencepiece_path(train_docs, *own_vocab, hp.data_dir));
  const char* split_name = hp.split == TextSplit::all ? "all" : hp.split == TextSplit::train ? "train" : "validation";
  PAX_CHECK(!docs.empty(), who, ": no documents in the ", split_name, " split of ", files.size(), " file(s) (first: '",
            files[0], "')");
  num_documents_ = int64_t(docs.size());

  std::vector<std::vector<int32_t>> tokens(docs.size());
  parallel_for(int64_t(docs.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) tokens[size_t(i)] = tokenizer_->encode(docs[size_t(i)]);
  });
  const Tokenizer& tok = *tokenizer_;
  rows_ =
      pack_documents(tokens, hp.seq_length, hp.pack, start_id(tok), hp.add_eos ? tok.eos_id() : -1, padding_id(tok));
  PAX_CHECK(rows_.num_rows > 0, who, ": the documents hold no tokens");
  set_num_examples(rows_.num_rows);
}

std::string TextLmInput::HParams::data_source() const {
  if (source == TextSource::kjv) return "the KJV";
  std::string list;
  for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
  return "files [" + list + "]";
}

std::string TextLmInput::HParams::tokenizer_used() const {
  return own_sentencepiece_vocab(tokenizer) ? tokenizer + " trained on " + data_source() : tokenizer;
}

Tree rows_batch(const PackedRows& rows, const std::vector<int64_t>& indices, int32_t pad_id, bool with_segments) {
  const int64_t b = int64_t(indices.size()), t = rows.seq_length;
  std::vector<int32_t> ids(size_t(b * t), pad_id), labels(size_t(b * t), pad_id), seg(size_t(b * t), 0),
      pos(size_t(b * t), 0);
  std::vector<float> paddings(size_t(b * t), 1.0f), weights(size_t(b * t), 0.0f);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t e = indices[size_t(i)];
    if (e < 0) continue;  // a padding row
    const size_t src = size_t(e * t), dst = size_t(i * t);
    std::copy_n(rows.ids.begin() + src, t, ids.begin() + dst);
    std::copy_n(rows.labels.begin() + src, t, labels.begin() + dst);
    std::copy_n(rows.segment_ids.begin() + src, t, seg.begin() + dst);
    std::copy_n(rows.segment_pos.begin() + src, t, pos.begin() + dst);
    for (int64_t j = 0; j < t; ++j) {
      const float real = rows.segment_ids[src + size_t(j)] > 0 ? 1.0f : 0.0f;
      paddings[dst + size_t(j)] = 1.0f - real;
      weights[dst + size_t(j)] = real;
    }
  }
  const Shape shape{b, t};
  Tree batch = Tree::dict({{"ids", array(ids, shape)},
                           {"labels", array(labels, shape)},
                           {"paddings", array(paddings, shape)},
                           {"weights", array(weights, shape)}});
  if (with_segments) {
    batch.set("segment_ids", array(seg, shape));
    batch.set("segment_pos", array(pos, shape));
  }
  return batch;
}

Tree TextLmInput::make_batch(const std::vector<int64_t>& indices) const {
  return rows_batch(rows_, indices, padding_id(*tokenizer_), hparams<HParams>().pack);
}

std::vector<std::string> TextLmInput::ids_to_strings(const Array& ids, const Array& lengths) const {
  return decode_rows(*tokenizer_, ids, lengths);
}

PAX_REGISTER_INPUT(TextLmInput);

}  // namespace pax::data

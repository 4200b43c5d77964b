// Tokenizers trained on an input's own text: the "spm:<vocab>" tokenizer of a
// TextLmInput is a SentencePiece model trained, on first use, on the
// documents of its train split (those its validation_fraction does not hold
// out) and cached as <data_dir>/text_spm/spm_<vocab>_<hash>.model, the hash
// being of those documents. Every input over the same files — the train and
// validation splits, later runs, other processes — loads the same model;
// edited files get a new one. The model carries a checksum record
// (prepared_file.h): a damaged one is trained again.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace pax::data {

// The vocabulary size of an "spm:<vocab>" spec; nullopt for any other spec.
// Throws pax::Error for a malformed one ("spm:abc").
std::optional<int64_t> own_sentencepiece_vocab(const std::string& spec);

// The model trained on `documents` with that vocabulary (at most: a small
// text gets fewer pieces), training and caching it first when missing, and
// again when it does not match its record.
std::string own_sentencepiece_path(std::span<const std::string> documents, int64_t vocab_size,
                                   const std::string& data_dir = "");

}  // namespace pax::data

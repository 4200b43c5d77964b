// The data directory and the datasets paxcc prepares without any network,
// from Debian packages (installed by scripts/setup.sh):
//
//   <data_dir>/kjv/kjv.txt          the King James Bible, one verse per line
//                                   without references, written once from
//                                   the `bible` command (package bible-kjv)
//   <data_dir>/kjv/spm_<N>.model    a SentencePiece model of vocabulary N
//                                   trained on it (tokenizer "kjv_spm:N")
//   <file>.crc32                    beside each of the two: its checksum
//                                   record (prepared_file.h); a file that
//                                   does not match it, or has none, is
//                                   prepared again with a notice
//   <data_dir>/fashion-mnist/*.gz   Fashion-MNIST IDX files, when a user puts
//                                   them there; otherwise the ones of package
//                                   dataset-fashion-mnist are read in place
//
// The data directory is, in order: the input's data_dir field when set, the
// process default (set_default_data_dir, e.g. from paxcc --data_dir),
// $PAX_DATA_DIR, and "./data" relative to the working directory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pax::data {

// Sets the directory used when an input's data_dir is empty ("" clears it).
void set_default_data_dir(const std::string& dir);
// `configured` when non-empty, else the default above.
std::string resolve_data_dir(const std::string& configured = "");

// The path of <data_dir>/kjv/kjv.txt, preparing it first when missing, and
// again when it does not match its record (atomically and under a lock:
// concurrent processes are safe). Throws pax::Error saying how to install the
// `bible` command when it is missing.
std::string kjv_text_path(const std::string& data_dir = "");
// The path of <data_dir>/kjv/spm_<vocab_size>.model, a SentencePiece model
// trained on the KJV text the first time it is asked for (then cached, and
// trained again when it does not match its record).
std::string kjv_sentencepiece_path(int64_t vocab_size, const std::string& data_dir = "");
// A tokenizer spec with the prepared ones resolved: "kjv_spm:<N>" becomes
// kjv_sentencepiece_path(N); "bytes" and model paths pass through.
std::string resolve_tokenizer_spec(const std::string& spec, const std::string& data_dir = "");
// The KJV as one verse per line, from the output of
// `bible "Gen1:1-Rev22:21"`: chapter headings and verse numbers removed,
// verses wrapped over several lines joined.
std::string parse_bible_output(std::string_view text);
// The `bible` command's output for the whole text.
std::string run_bible_command();

// The directory of the Fashion-MNIST IDX files (train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-...): <data_dir>/fashion-mnist when it
// holds them, else /usr/share/datasets/fashion-mnist. Throws pax::Error
// saying how to install them when neither does.
std::string fashion_mnist_dir(const std::string& data_dir = "");
// Where the Debian package dataset-fashion-mnist puts the files.
inline constexpr const char* kSystemFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace pax::data

// check_ranks_agree: a digest of each process's settings, then the settings
// themselves where the digests differ (see rank_agreement.h).
#include "pax/experiments/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cctype>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "pax/core/array.h"
#include "pax/core/error.h"
#include "pax/dist/process_group.h"

namespace pax::experiments {

namespace {

// FNV-1a: a digest to compare, not a defence against anyone.
uint64_t digest(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// "/learner/optimizer/learning_rate" -> "learner.optimizer.learning_rate",
// "/eval_inputs/0/batch_size" -> "eval_inputs[0].batch_size".
std::string dotted(const std::string& pointer) {
  std::string out;
  size_t i = 1;
  while (i <= pointer.size()) {
    size_t next = pointer.find('/', i);
    if (next == std::string::npos) next = pointer.size();
    const std::string part = pointer.substr(i, next - i);
    const bool index = !part.empty() &&
                       std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    out += index ? "[" + part + "]" : (out.empty() ? "" : ".") + part;
    i = next + 1;
  }
  return out;
}

// Every process's `mine`, on every process.
std::vector<std::string> all_gather_strings(const std::string& mine) {
  dist::ProcessGroup& group = dist::process_group();
  const int64_t length = int64_t(mine.size());
  const Array lengths = group.all_gather(from_host(&length, Shape{1}, DType::i64));
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::string padded = mine;
  padded.resize(size_t(longest), '\0');
  const std::vector<uint8_t> bytes =
      group.all_gather(from_host(padded.data(), Shape{1, longest}, DType::u8)).to_vector<uint8_t>();
  std::vector<std::string> out;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const auto* row = bytes.data() + p * size_t(longest);
    out.emplace_back(row, row + sizes[p]);
  }
  return out;
}

}  // namespace

std::string describe_rank_differences(const std::vector<std::string>& per_process, size_t max_fields) {
  std::vector<nlohmann::json> flat;
  std::set<std::string> fields;
  for (const std::string& text : per_process) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    flat.push_back(j.is_discarded() ? nlohmann::json::object() : j.flatten());
    for (const auto& item : flat.back().items()) fields.insert(item.key());
  }
  std::string out;
  size_t shown = 0, differing = 0;
  for (const std::string& field : fields) {
    auto value_on = [&](size_t p) { return flat[p].contains(field) ? flat[p][field].dump() : std::string("(unset)"); };
    bool same = true;
    for (size_t p = 1; p < flat.size(); ++p) same = same && value_on(p) == value_on(0);
    if (same) continue;
    ++differing;
    if (shown == max_fields) continue;
    ++shown;
    std::string line = dotted(field) + ":";
    for (size_t p = 0; p < flat.size(); ++p)
      line += (p ? ", " : " ") + value_on(p) + " on process " + std::to_string(p);
    out += (out.empty() ? "" : "; ") + line;
  }
  if (differing > shown) out += "; and " + std::to_string(differing - shown) + " more field(s)";
  return out;
}

void check_ranks_agree(const std::string& config_json, const std::map<std::string, std::string>& extra) {
  dist::ProcessGroup& group = dist::process_group();
  if (group.process_count() <= 1) return;
  nlohmann::json settings = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (settings.is_discarded()) settings = nlohmann::json::object();
  for (const auto& [flag, value] : extra) settings[flag] = value;
  const std::string mine = settings.dump();
  // The digests first: a whole config per process is gathered only when they differ.
  const int64_t mine_digest = int64_t(digest(mine) >> 1);
  const std::vector<int64_t> all = group.all_gather(from_host(&mine_digest, Shape{1}, DType::i64)).to_vector<int64_t>();
  if (std::all_of(all.begin(), all.end(), [&](int64_t d) { return d == all[0]; })) return;
  const std::string differences = describe_rank_differences(all_gather_strings(mine));
  PAX_FAIL("the ", group.process_count(), " processes were started with different settings (every process must run ",
           "the same experiment, overrides and flags): ", differences.empty() ? "their configs differ" : differences);
}

}  // namespace pax::experiments

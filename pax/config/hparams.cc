// The HParams type registry, "did you mean" suggestions and the fields a
// partial config leaves missing.
#include "pax/config/hparams.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "pax/core/error.h"

namespace pax {
namespace {

struct Entry {
  HParamsFactory factory;
  std::string kind;
};

std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;
  return r;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

bool BaseHParams::is_missing(const std::string& field) const {
  return std::find(missing_.begin(), missing_.end(), field) != missing_.end();
}

void BaseHParams::set_missing(const std::string& field, bool missing) {
  auto it = std::find(missing_.begin(), missing_.end(), field);
  if (missing && it == missing_.end()) missing_.push_back(field);
  if (!missing && it != missing_.end()) missing_.erase(it);
}

void register_hparams(const std::string& type_name, HParamsFactory factory, const std::string& kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[type_name] = Entry{factory, kind};
}

bool is_registered_hparams(const std::string& type_name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry().count(type_name) > 0;
}

std::vector<std::string> registered_hparams(const std::string& kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& [name, e] : registry()) {
    if (kind.empty() || e.kind == kind) out.push_back(name);
  }
  return out;
}

std::string registered_hparams_list(const std::string& kind) {
  std::string names;
  for (const std::string& n : registered_hparams(kind)) names += (names.empty() ? "" : ", ") + n;
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(lower(word), lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best.empty() ? "" : "did you mean '" + best + "'? ";
}

HParamsPtr make_hparams(const std::string& type_name, const std::string& kind) {
  HParamsFactory factory = nullptr;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(type_name);
    if (it != registry().end() && (kind.empty() || it->second.kind == kind)) factory = it->second.factory;
  }
  if (!factory) {
    std::vector<std::string> names = registered_hparams(kind);
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    PAX_FAIL("unknown ", kind.empty() ? "config" : kind, " type '", type_name, "'; ", did_you_mean(type_name, names),
             "registered: ", list.empty() ? "(none)" : list);
  }
  return factory();
}

}  // namespace pax

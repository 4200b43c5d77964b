// check_json: a SAX pass over the text that tracks the keys of every open
// object and the nesting depth.
#include "pax/train/json_check.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <vector>

#include "pax/core/error.h"

namespace pax::train {
namespace {

using json = nlohmann::json;

class StrictSax : public nlohmann::json_sax<json> {
 public:
  explicit StrictSax(int max_depth) : max_depth_(max_depth) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return push(true); }
  bool start_array(std::size_t) override { return push(false); }
  bool end_object() override { return pop(); }
  bool end_array() override { return pop(); }
  bool key(string_t& k) override {
    auto& keys = open_.back();  // the parser only reports keys inside an object
    if (keys && !keys->insert(k).second) {
      error_ = "duplicate key \"" + k + "\"" + where();
      return false;
    }
    path_.back() = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error_ = std::string("not valid JSON (") + ex.what() + ")";
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  bool push(bool object) {
    if (int(open_.size()) >= max_depth_) {
      error_ = "nested deeper than " + std::to_string(max_depth_) + " levels" + where();
      return false;
    }
    open_.emplace_back(object ? std::optional<std::unordered_set<std::string>>(std::in_place) : std::nullopt);
    path_.emplace_back();
    return true;
  }
  bool pop() {
    open_.pop_back();
    path_.pop_back();
    return true;
  }
  std::string where() const {
    std::string p;
    for (size_t i = 0; i + 1 < path_.size(); ++i) {
      if (open_[i]) p += "/" + path_[i];
    }
    return p.empty() ? "" : " in object \"" + p.substr(1) + "\"";
  }

  int max_depth_;
  std::vector<std::optional<std::unordered_set<std::string>>> open_;  // keys seen per open container
  std::vector<std::string> path_;                                     // current key per open container
  std::string error_;
};

}  // namespace

void check_json(std::string_view text, const std::string& what, int max_depth) {
  StrictSax sax(max_depth);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax);
  PAX_CHECK(ok, what, ": ", sax.error().empty() ? std::string("not valid JSON") : sax.error());
}

}  // namespace pax::train

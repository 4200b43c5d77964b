// Params lookup, printing and hashing.
#include "pax/ir/params.h"

#include <functional>
#include <ostream>

#include "pax/core/error.h"
#include "pax/core/shape.h"

namespace pax {

Params& Params::set(std::string name, ParamValue value) {
  for (auto& item : items_) {
    if (item.first == name) {
      item.second = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::move(name), std::move(value));
  return *this;
}

bool Params::has(std::string_view name) const {
  for (const auto& item : items_) {
    if (item.first == name) return true;
  }
  return false;
}

const ParamValue& Params::at(std::string_view name) const {
  for (const auto& item : items_) {
    if (item.first == name) return item.second;
  }
  PAX_FAIL("missing primitive parameter '", name, "' in [", str(), "]");
}

void Params::type_error(std::string_view name) const {
  PAX_FAIL("primitive parameter '", name, "' has the wrong type in [", str(), "]");
}

namespace {
std::string value_str(const ParamValue& v) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      std::string s = std::to_string(d);
      return s;
    }
    std::string operator()(DType d) const { return dtype_short_name(d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const Ints& v) const { return ints_str(v); }
    std::string operator()(const ParamObjectPtr& p) const { return p ? p->str() : "None"; }
  };
  return std::visit(Visitor{}, v);
}
}  // namespace

std::string Params::str() const {
  std::string out;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (i) out += ", ";
    out += items_[i].first + "=" + value_str(items_[i].second);
  }
  return out;
}

size_t Params::hash() const {
  size_t h = items_.size();
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (const auto& [name, value] : items_) {
    mix(std::hash<std::string>{}(name));
    mix(value.index());
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, Ints>) {
            for (int64_t x : v) mix(std::hash<int64_t>{}(x));
          } else if constexpr (std::is_same_v<T, DType>) {
            mix(size_t(v));
          } else if constexpr (std::is_same_v<T, ParamObjectPtr>) {
            mix(std::hash<const void*>{}(v.get()));
          } else {
            mix(std::hash<T>{}(v));
          }
        },
        value);
  }
  return h;
}

std::ostream& operator<<(std::ostream& os, const Params& p) { return os << p.str(); }

}  // namespace pax

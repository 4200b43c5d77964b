// Config: path editing, parsing of command-line values, printing, JSON.
#include "pax/config/config.h"

#include <fmt/format.h>

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "pax/config/walk.h"

namespace pax {
namespace {

using json = nlohmann::ordered_json;
using config_detail::describe_kind;

std::vector<FieldRef> fields_of(const BaseHParams& h) {
  std::vector<FieldRef> out;
  h.visit_fields([&](const FieldRef& f) { out.push_back(f); });
  return out;
}

FieldRef find_field(const BaseHParams& h, const std::string& name) {
  std::vector<FieldRef> fields = fields_of(h);
  std::vector<std::string> names;
  for (const FieldRef& f : fields) {
    if (name == f.name) return f;
    names.push_back(f.name);
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  PAX_FAIL("no field '", name, "' in ", h.type_name(), "; ", did_you_mean(name, names),
           "valid fields: ", list.empty() ? "(none)" : list);
}

// ---------------------------------------------------------------------------
// paths

struct Step {
  std::string field;
  std::optional<size_t> index;  // list element
};

// A list index of a path: decimal digits only.
size_t parse_index(const std::string& text, const std::string& path) {
  const bool digits = !text.empty() && text.size() <= 18 && std::all_of(text.begin(), text.end(), ::isdigit);
  PAX_CHECK(digits, "config: list index '", text, "' in path '", path,
            "' is not a number; write a list element as field[0] or field.0");
  return size_t(std::stoull(text));
}

std::vector<Step> parse_path(const std::string& path) {
  PAX_CHECK(!path.empty(), "config: empty path");
  std::vector<Step> steps;
  std::string part;
  auto flush = [&]() {
    PAX_CHECK(!part.empty(), "config: malformed path '", path, "'");
    // "layers[2]" or a bare number after a list field ("layers.2").
    size_t bracket = part.find('[');
    if (bracket != std::string::npos) {
      PAX_CHECK(part.back() == ']', "config: malformed index in path '", path, "'");
      steps.push_back(
          {part.substr(0, bracket), parse_index(part.substr(bracket + 1, part.size() - bracket - 2), path)});
    } else if (std::all_of(part.begin(), part.end(), ::isdigit) && !steps.empty() && !steps.back().index) {
      steps.back().index = parse_index(part, path);
    } else {
      steps.push_back({part, std::nullopt});
    }
    part.clear();
  };
  for (char c : path) {
    if (c == '.') flush();
    else part += c;
  }
  flush();
  return steps;
}

// The HParams object a step leads to.
BaseHParams* descend(BaseHParams* h, const Step& s, const std::string& path) {
  FieldRef f = find_field(*h, s.field);
  switch (f.kind) {
    case FieldKind::nested:
      PAX_CHECK(!s.index, "config: '", s.field, "' in ", h->type_name(), " is not a list (path '", path, "')");
      return static_cast<BaseHParams*>(f.ptr);
    case FieldKind::hparams: {
      PAX_CHECK(!s.index, "config: '", s.field, "' in ", h->type_name(), " is not a list (path '", path, "')");
      auto& p = *static_cast<HParamsPtr*>(f.ptr);
      PAX_CHECK(p, "config: '", s.field, "' in ", h->type_name(), " is None; set it to a type first (path '", path,
                "')");
      return p.get();
    }
    case FieldKind::hparams_list: {
      auto& v = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
      PAX_CHECK(s.index, "config: '", s.field, "' in ", h->type_name(), " is a list; give an index like ", s.field,
                "[0] (path '", path, "')");
      PAX_CHECK(*s.index < v.size(), "config: index ", *s.index, " is out of range for '", s.field, "' (", v.size(),
                " elements) in path '", path, "'");
      PAX_CHECK(v[*s.index], "config: ", s.field, "[", *s.index, "] is None (path '", path, "')");
      return v[*s.index].get();
    }
    default:
      PAX_FAIL("config: '", s.field, "' in ", h->type_name(), " is ", describe_kind(f),
               ", not a config with fields (path '", path, "')");
  }
}

// ---------------------------------------------------------------------------
// values as strings

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string unquote(const std::string& s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string> split_list(const std::string& text, const char* what) {
  std::string s = trim(text);
  if (!s.empty() && s.front() == '[') {
    PAX_CHECK(s.back() == ']', "config: unterminated list '", text, "' for ", what);
    s = s.substr(1, s.size() - 2);
  }
  std::vector<std::string> out;
  if (trim(s).empty()) return out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ',')) out.push_back(unquote(trim(item)));
  return out;
}

[[noreturn]] void bad_value(const BaseHParams& h, const FieldRef& f, const std::string& value) {
  PAX_FAIL("config: field '", f.name, "' of ", h.type_name(), " is ", describe_kind(f), "; cannot set it to '", value,
           "'");
}

int64_t parse_int(const BaseHParams& h, const FieldRef& f, const std::string& s) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  bad_value(h, f, s);
}

double parse_real(const BaseHParams& h, const FieldRef& f, const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  bad_value(h, f, s);
}

std::string format_real(double v) {
  std::string s = fmt::format("{}", v);
  return s;
}

void set_field(BaseHParams& h, const FieldRef& f, const std::string& raw) {
  const std::string value = trim(raw);
  switch (f.kind) {
    case FieldKind::boolean: {
      bool& b = *static_cast<bool*>(f.ptr);
      if (value == "true" || value == "True" || value == "1") b = true;
      else if (value == "false" || value == "False" || value == "0") b = false;
      else bad_value(h, f, value);
      return;
    }
    case FieldKind::integer: {
      int64_t v = parse_int(h, f, value);
      if (f.int_bytes == 4 && (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())) {
        bad_value(h, f, value);
      }
      if (f.int_bytes == 4) *static_cast<int*>(f.ptr) = int(v);
      else *static_cast<int64_t*>(f.ptr) = v;
      return;
    }
    case FieldKind::real: {
      double v = parse_real(h, f, value);
      if (f.real_bytes == 4) *static_cast<float*>(f.ptr) = float(v);
      else *static_cast<double*>(f.ptr) = v;
      return;
    }
    case FieldKind::string: *static_cast<std::string*>(f.ptr) = unquote(value); return;
    case FieldKind::dtype: try { *static_cast<DType*>(f.ptr) = dtype_from_name(unquote(value));
      } catch (const Error&) {
        bad_value(h, f, value);
      }
      return;
    case FieldKind::integers: {
      std::vector<int64_t> v;
      for (const std::string& s : split_list(value, f.name)) v.push_back(parse_int(h, f, s));
      *static_cast<std::vector<int64_t>*>(f.ptr) = v;
      return;
    }
    case FieldKind::reals: {
      std::vector<double> v;
      for (const std::string& s : split_list(value, f.name)) v.push_back(parse_real(h, f, s));
      *static_cast<std::vector<double>*>(f.ptr) = v;
      return;
    }
    case FieldKind::strings: *static_cast<std::vector<std::string>*>(f.ptr) = split_list(value, f.name); return;
    case FieldKind::optional_integer: {
      auto& o = *static_cast<std::optional<int64_t>*>(f.ptr);
      if (value == "None" || value == "null") o.reset();
      else o = parse_int(h, f, value);
      return;
    }
    case FieldKind::optional_real: {
      auto& o = *static_cast<std::optional<double>*>(f.ptr);
      if (value == "None" || value == "null") o.reset();
      else o = parse_real(h, f, value);
      return;
    }
    case FieldKind::enumeration: {
      const std::vector<std::string>& names = f.enum_names->names;
      const std::string v = unquote(value);
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == v) {
          *static_cast<int*>(f.ptr) = int(i);
          return;
        }
      }
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      PAX_FAIL("config: field '", f.name, "' of ", h.type_name(), " is a ", f.enum_names->type_name, "; '", v,
               "' is not one of its values; ", did_you_mean(v, names), "valid: ", list);
    }
    case FieldKind::hparams:  // Config::set swaps templates (template_slot)
    case FieldKind::nested:
    case FieldKind::hparams_list:
      PAX_FAIL("config: field '", f.name, "' of ", h.type_name(), " is ", describe_kind(f),
               "; set its elements' fields by path instead");
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + "]";
}

std::string get_field(const FieldRef& f) {
  switch (f.kind) {
    case FieldKind::boolean: return *static_cast<bool*>(f.ptr) ? "true" : "false";
    case FieldKind::integer:
      return std::to_string(f.int_bytes == 4 ? int64_t(*static_cast<int*>(f.ptr)) : *static_cast<int64_t*>(f.ptr));
    case FieldKind::real:
      return format_real(f.real_bytes == 4 ? double(*static_cast<float*>(f.ptr)) : *static_cast<double*>(f.ptr));
    case FieldKind::string: return *static_cast<std::string*>(f.ptr);
    case FieldKind::dtype: return dtype_name(*static_cast<DType*>(f.ptr));
    case FieldKind::integers: {
      std::vector<std::string> s;
      for (int64_t v : *static_cast<std::vector<int64_t>*>(f.ptr)) s.push_back(std::to_string(v));
      return join(s);
    }
    case FieldKind::reals: {
      std::vector<std::string> s;
      for (double v : *static_cast<std::vector<double>*>(f.ptr)) s.push_back(format_real(v));
      return join(s);
    }
    case FieldKind::strings: return join(*static_cast<std::vector<std::string>*>(f.ptr));
    case FieldKind::optional_integer: {
      auto& o = *static_cast<std::optional<int64_t>*>(f.ptr);
      return o ? std::to_string(*o) : "None";
    }
    case FieldKind::optional_real: {
      auto& o = *static_cast<std::optional<double>*>(f.ptr);
      return o ? format_real(*o) : "None";
    }
    case FieldKind::enumeration: {
      int i = *static_cast<int*>(f.ptr);
      return i >= 0 && size_t(i) < f.enum_names->names.size() ? f.enum_names->names[size_t(i)] : std::to_string(i);
    }
    case FieldKind::nested: return static_cast<BaseHParams*>(f.ptr)->type_name();
    case FieldKind::hparams: {
      auto& p = *static_cast<HParamsPtr*>(f.ptr);
      return p ? p->type_name() : "None";
    }
    case FieldKind::hparams_list: {
      std::vector<std::string> s;
      for (const HParamsPtr& p : *static_cast<std::vector<HParamsPtr>*>(f.ptr))
        s.push_back(p ? p->type_name() : "None");
      return join(s);
    }
  }
  return "?";
}

// ---------------------------------------------------------------------------
// printing

// Indented "name = value  # doc" lines. A shared template is printed once,
// at its first path; each place it appears lists every path that reaches it
// (setting a field through any of them changes the one object).
struct Printer {
  config_detail::TemplatePaths reach;
  std::set<const BaseHParams*> printed;
  bool docs;
  std::ostringstream out;

  // " [shared: a, b]" for a template reached from several fields.
  std::string shared_note(const BaseHParams* p) const {
    if (reach.count(p) < 2) return "";
    std::string note;
    for (const std::string& path : reach.paths.at(p)) note += (note.empty() ? "" : ", ") + path;
    return "  [shared: " + note + "]";
  }

  void expand(const BaseHParams* p, int depth) {
    if (p && printed.insert(p).second) fields(*p, depth);
  }

  void fields(const BaseHParams& h, int depth) {
    const std::string pad(size_t(depth) * 2, ' ');
    for (const FieldRef& f : fields_of(h)) {
      const std::string value = h.is_missing(f.name) ? "MISSING" : get_field(f);
      out << pad << f.name << " = "
          << (f.kind == FieldKind::string && !h.is_missing(f.name) ? '"' + value + '"' : value);
      if (f.kind == FieldKind::hparams) out << shared_note(static_cast<HParamsPtr*>(f.ptr)->get());
      if (docs && f.doc && *f.doc) out << "  # " << f.doc;
      out << "\n";
      if (f.kind == FieldKind::nested) {
        fields(*static_cast<BaseHParams*>(f.ptr), depth + 1);
      } else if (f.kind == FieldKind::hparams) {
        expand(static_cast<HParamsPtr*>(f.ptr)->get(), depth + 1);
      } else if (f.kind == FieldKind::hparams_list) {
        const auto& v = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
        for (size_t i = 0; i < v.size(); ++i) {
          out << pad << "  [" << i << "] = " << (v[i] ? v[i]->type_name() : "None") << shared_note(v[i].get()) << "\n";
          expand(v[i].get(), depth + 2);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------
// JSON

// A template shared from two places is written once, with an "$id", and
// referred to by "$ref"; a missing field is written as {"$missing": true}.
struct JsonWriter {
  config_detail::TemplatePaths reach;
  std::map<const BaseHParams*, std::string> ids;

  json object(const BaseHParams& h, const std::string& path, bool shareable) {
    json j;
    if (shareable && reach.count(&h) > 1) {
      auto it = ids.find(&h);
      if (it != ids.end()) return json{{"$ref", it->second}};
      ids[&h] = path;
      j["$id"] = path;
    }
    j["type"] = h.type_name();
    for (const FieldRef& f : fields_of(h)) {
      j[f.name] = h.is_missing(f.name) ? json{{"$missing", true}} : value(f, config_detail::join_path(path, f.name));
    }
    return j;
  }

  json value(const FieldRef& f, const std::string& path) {
    switch (f.kind) {
      case FieldKind::boolean: return *static_cast<bool*>(f.ptr);
      case FieldKind::integer:
        return f.int_bytes == 4 ? int64_t(*static_cast<int*>(f.ptr)) : *static_cast<int64_t*>(f.ptr);
      case FieldKind::real:
        return f.real_bytes == 4 ? double(*static_cast<float*>(f.ptr)) : *static_cast<double*>(f.ptr);
      case FieldKind::string: return *static_cast<std::string*>(f.ptr);
      case FieldKind::dtype: return dtype_name(*static_cast<DType*>(f.ptr));
      case FieldKind::integers: return *static_cast<std::vector<int64_t>*>(f.ptr);
      case FieldKind::reals: return *static_cast<std::vector<double>*>(f.ptr);
      case FieldKind::strings: return *static_cast<std::vector<std::string>*>(f.ptr);
      case FieldKind::optional_integer: {
        auto& o = *static_cast<std::optional<int64_t>*>(f.ptr);
        return o ? json(*o) : json(nullptr);
      }
      case FieldKind::optional_real: {
        auto& o = *static_cast<std::optional<double>*>(f.ptr);
        return o ? json(*o) : json(nullptr);
      }
      case FieldKind::enumeration: return get_field(f);
      case FieldKind::nested: return object(*static_cast<BaseHParams*>(f.ptr), path, false);
      case FieldKind::hparams: {
        auto& p = *static_cast<HParamsPtr*>(f.ptr);
        return p ? object(*p, path, true) : json(nullptr);
      }
      case FieldKind::hparams_list: {
        json arr = json::array();
        const auto& v = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
        for (size_t i = 0; i < v.size(); ++i) {
          arr.push_back(v[i] ? object(*v[i], path + "[" + std::to_string(i) + "]", true) : json(nullptr));
        }
        return arr;
      }
    }
    return nullptr;
  }
};

// A JSON value for an error message: its first 80 characters.
std::string excerpt(const json& v) {
  constexpr size_t kMax = 80;
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() <= kMax) return text;
  return text.substr(0, kMax) + "... (" + std::to_string(text.size()) + " characters)";
}

// Deeper JSON than any config needs is refused while parsing: nothing later
// (printing, copying) then recurses over an input built to exhaust the stack.
constexpr int kMaxJsonDepth = 100;

// The integer `v` holds if it fits a signed integer of `bytes` (4 or 8).
std::optional<int64_t> json_integer(const json& v, size_t bytes) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  const int64_t x = v.get<int64_t>();
  if (bytes == 4 && (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())) return std::nullopt;
  return x;
}

// Whether every element of the array `v` passes `ok`.
template <class F>
bool all_of(const json& v, F ok) {
  for (const json& e : v)
    if (!ok(e)) return false;
  return true;
}

struct JsonReader {
  std::map<std::string, HParamsPtr> ids;

  [[noreturn]] void wrong(const BaseHParams& h, const FieldRef& f, const json& v, const std::string& path) {
    PAX_FAIL("config JSON: field '", path, "' (", f.name, " of ", h.type_name(), ") must be ", describe_kind(f),
             ", got ", excerpt(v));
  }

  HParamsPtr object(const json& j, const std::string& path) {
    if (j.is_null()) return nullptr;
    PAX_CHECK(j.is_object(), "config JSON: '", path.empty() ? "<root>" : path, "' must be an object, got ", excerpt(j));
    if (j.contains("$ref")) {
      auto it = ids.find(j["$ref"].get<std::string>());
      PAX_CHECK(it != ids.end(), "config JSON: '", path, "' refers to unknown '", j["$ref"].get<std::string>(), "'");
      return it->second;
    }
    PAX_CHECK(j.contains("type") && j["type"].is_string(), "config JSON: '", path.empty() ? "<root>" : path,
              "' has no \"type\"");
    HParamsPtr h = make_hparams(j["type"].get<std::string>());
    if (j.contains("$id")) ids[j["$id"].get<std::string>()] = h;
    fill(*h, j, path);
    return h;
  }

  void fill(BaseHParams& h, const json& j, const std::string& path) {
    for (const auto& [key, v] : j.items()) {
      // "$experiment": the registered name a job's config.json records for people to read.
      if (key == "type" || key == "$id" || key == "$experiment") continue;
      FieldRef f = find_field(h, key);
      const std::string sub = config_detail::join_path(path, key);
      if (v.is_object() && v.contains("$missing")) {
        config_detail::mark_field_missing(h, f, sub);
        continue;
      }
      switch (f.kind) {
        case FieldKind::boolean:
          if (!v.is_boolean()) wrong(h, f, v, sub);
          *static_cast<bool*>(f.ptr) = v.get<bool>();
          break;
        case FieldKind::integer: {
          const std::optional<int64_t> x = json_integer(v, size_t(f.int_bytes));
          if (!x) wrong(h, f, v, sub);
          if (f.int_bytes == 4) *static_cast<int*>(f.ptr) = int(*x);
          else *static_cast<int64_t*>(f.ptr) = *x;
          break;
        }
        case FieldKind::real:
          if (!v.is_number()) wrong(h, f, v, sub);
          if (f.real_bytes == 4) *static_cast<float*>(f.ptr) = v.get<float>();
          else *static_cast<double*>(f.ptr) = v.get<double>();
          break;
        case FieldKind::string:
          if (!v.is_string()) wrong(h, f, v, sub);
          *static_cast<std::string*>(f.ptr) = v.get<std::string>();
          break;
        case FieldKind::dtype:
        case FieldKind::enumeration:
          if (!v.is_string()) wrong(h, f, v, sub);
          set_field(h, f, v.get<std::string>());
          break;
        case FieldKind::integers:
          if (!v.is_array() || !all_of(v, [](const json& e) { return json_integer(e, 8).has_value(); })) {
            wrong(h, f, v, sub);
          }
          *static_cast<std::vector<int64_t>*>(f.ptr) = v.get<std::vector<int64_t>>();
          break;
        case FieldKind::reals:
          if (!v.is_array() || !all_of(v, [](const json& e) { return e.is_number(); })) wrong(h, f, v, sub);
          *static_cast<std::vector<double>*>(f.ptr) = v.get<std::vector<double>>();
          break;
        case FieldKind::strings:
          if (!v.is_array() || !all_of(v, [](const json& e) { return e.is_string(); })) wrong(h, f, v, sub);
          *static_cast<std::vector<std::string>*>(f.ptr) = v.get<std::vector<std::string>>();
          break;
        case FieldKind::optional_integer: {
          auto& o = *static_cast<std::optional<int64_t>*>(f.ptr);
          if (v.is_null()) o.reset();
          else if (auto x = json_integer(v, 8)) o = *x;
          else wrong(h, f, v, sub);
          break;
        }
        case FieldKind::optional_real: {
          auto& o = *static_cast<std::optional<double>*>(f.ptr);
          if (v.is_null()) o.reset();
          else if (v.is_number()) o = v.get<double>();
          else wrong(h, f, v, sub);
          break;
        }
        case FieldKind::nested: {
          auto* n = static_cast<BaseHParams*>(f.ptr);
          PAX_CHECK(v.is_object(), "config JSON: '", sub, "' must be an object");
          PAX_CHECK(!v.contains("type") || v["type"] == n->type_name(), "config JSON: '", sub, "' must be a ",
                    n->type_name(), ", got ", excerpt(v["type"]));
          fill(*n, v, sub);
          break;
        }
        case FieldKind::hparams: *static_cast<HParamsPtr*>(f.ptr) = object(v, sub); break;
        case FieldKind::hparams_list: {
          if (!v.is_array()) wrong(h, f, v, sub);
          std::vector<HParamsPtr> list;
          for (size_t i = 0; i < v.size(); ++i) list.push_back(object(v[i], sub + "[" + std::to_string(i) + "]"));
          *static_cast<std::vector<HParamsPtr>*>(f.ptr) = list;
          break;
        }
      }
    }
  }
};

// Deep copy with a map from old to new objects so that sharing survives.
HParamsPtr clone_shared(const HParamsPtr& p, std::map<const BaseHParams*, HParamsPtr>& done);

void clone_children(BaseHParams& copy, std::map<const BaseHParams*, HParamsPtr>& done) {
  config_detail::for_each_slot(copy, "", [&](HParamsPtr& p, const std::string&) { p = clone_shared(p, done); });
}

HParamsPtr clone_shared(const HParamsPtr& p, std::map<const BaseHParams*, HParamsPtr>& done) {
  if (!p) return nullptr;
  auto it = done.find(p.get());
  if (it != done.end()) return it->second;
  HParamsPtr copy = p->clone();
  done[p.get()] = copy;
  clone_children(*copy, done);
  return copy;
}

// ---------------------------------------------------------------------------
// templates by path

// The object holding the field that the last step names.
BaseHParams* owner_of(const HParamsPtr& root, const std::vector<Step>& steps, const std::string& path) {
  BaseHParams* h = root.get();
  for (size_t i = 0; i + 1 < steps.size(); ++i) h = descend(h, steps[i], path);
  return h;
}

// The template slot that step `s` (naming field `f` of `h`) leads to: a
// template field or an element of a list of templates; nullptr for any
// other field.
HParamsPtr* template_slot(BaseHParams& h, const FieldRef& f, const Step& s, const std::string& path) {
  if (!s.index) return f.kind == FieldKind::hparams ? static_cast<HParamsPtr*>(f.ptr) : nullptr;
  PAX_CHECK(f.kind == FieldKind::hparams_list, "config: '", s.field, "' in ", h.type_name(),
            " is not a list of templates (path '", path, "')");
  auto& v = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
  PAX_CHECK(*s.index < v.size(), "config: index ", *s.index, " is out of range for '", s.field, "' (", v.size(),
            " elements)");
  return &v[*s.index];
}

// The template at `source` ("@source" in a value), for `path` to share.
HParamsPtr template_at(const HParamsPtr& root, const std::string& source, const std::string& path) {
  const std::vector<Step> steps = parse_path(source);
  BaseHParams* owner = owner_of(root, steps, source);
  const FieldRef f = find_field(*owner, steps.back().field);
  HParamsPtr* slot = template_slot(*owner, f, steps.back(), source);
  PAX_CHECK(slot, "config: cannot set '", path, "' to @", source, ": '", source, "' is ", describe_kind(f),
            ", not a template; only a template can be shared");
  PAX_CHECK(*slot, "config: cannot set '", path, "' to @", source, ": '", source, "' is None");
  return *slot;
}

// Puts `repl` in every slot of the tree that holds `old`: a template swapped
// through one of the paths that share it is swapped for all of them.
void replace_everywhere(const HParamsPtr& root, const HParamsPtr& old, const HParamsPtr& repl) {
  std::vector<HParamsPtr*> slots;
  for (BaseHParams* h : config_detail::template_paths(root).order) {
    config_detail::for_each_slot(*h, "", [&](HParamsPtr& slot, const std::string&) {
      if (slot == old) slots.push_back(&slot);
    });
  }
  for (HParamsPtr* slot : slots) *slot = repl;
}

// Sets a template slot from a value: "@other.path" makes this slot share
// that template; a type name or None replaces the template it held wherever
// that one is shared.
void set_template(const HParamsPtr& root, HParamsPtr& slot, const std::string& value, const std::string& path) {
  const std::string text = unquote(trim(value));
  if (!text.empty() && text.front() == '@') {
    HParamsPtr target = template_at(root, text.substr(1), path);
    // A template that reached this slot would contain itself.
    bool cycle = false;
    for (BaseHParams* h : config_detail::template_paths(target).order) {
      config_detail::for_each_slot(*h, "", [&](HParamsPtr& s, const std::string&) { cycle = cycle || &s == &slot; });
    }
    PAX_CHECK(!cycle, "config: cannot set '", path, "' to ", text, ": that template contains '", path,
              "', so it would contain itself");
    slot = target;
    return;
  }
  HParamsPtr repl = text == "None" || text == "null" ? nullptr : make_hparams(text);
  const HParamsPtr old = slot;  // kept alive while every slot is rewritten
  if (old) replace_everywhere(root, old, repl);
  else slot = repl;
}

}  // namespace

HParamsPtr deep_clone(const HParamsPtr& root) {
  std::map<const BaseHParams*, HParamsPtr> done;
  return clone_shared(root, done);
}

Config Config::make(const std::string& type_name, const std::string& kind) {
  return Config(make_hparams(type_name, kind));
}

const char* Config::type_name() const { return root_ ? root_->type_name() : "None"; }

void Config::set(const std::string& path, const std::string& value) {
  PAX_CHECK(root_, "config: set('", path, "') on an empty config");
  const std::vector<Step> steps = parse_path(path);
  BaseHParams* h = owner_of(root_, steps, path);
  const FieldRef f = find_field(*h, steps.back().field);
  if (HParamsPtr* slot = template_slot(*h, f, steps.back(), path)) set_template(root_, *slot, value, path);
  else set_field(*h, f, value);
  if (!steps.back().index) h->set_missing(f.name, false);
}

void Config::mark_missing(const std::string& path) {
  PAX_CHECK(root_, "config: mark_missing('", path, "') on an empty config");
  const std::vector<Step> steps = parse_path(path);
  PAX_CHECK(!steps.back().index, "config: '", path,
            "' is a list element; only a field can be missing (mark the element's fields instead)");
  BaseHParams* h = owner_of(root_, steps, path);
  config_detail::mark_field_missing(*h, find_field(*h, steps.back().field), path);
}

void Config::apply_overrides(const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) {
    size_t eq = a.find('=');
    PAX_CHECK(eq != std::string::npos && eq > 0, "config: override '", a, "' must look like path=value");
    set(trim(a.substr(0, eq)), a.substr(eq + 1));
  }
}

std::string Config::get(const std::string& path) const {
  PAX_CHECK(root_, "config: get('", path, "') on an empty config");
  const std::vector<Step> steps = parse_path(path);
  BaseHParams* h = owner_of(root_, steps, path);
  const Step& last = steps.back();
  if (last.index) return descend(h, last, path)->type_name();
  PAX_CHECK(!h->is_missing(last.field), "config: '", path,
            "' is missing (a partial config leaves it to fill); set it first");
  return get_field(find_field(*h, last.field));
}

HParamsPtr Config::at(const std::string& path) const {
  PAX_CHECK(root_, "config: at('", path, "') on an empty config");
  const std::vector<Step> steps = parse_path(path);
  BaseHParams* owner = owner_of(root_, steps, path);
  BaseHParams* target = descend(owner, steps.back(), path);  // checks the path leads to a config
  if (HParamsPtr* slot = template_slot(*owner, find_field(*owner, steps.back().field), steps.back(), path))
    return *slot;
  // A nested value struct: an aliasing handle that keeps the root alive.
  return HParamsPtr(root_, target);
}

Config Config::partial(const std::string& type_name, const std::vector<std::string>& assignments,
                       const std::vector<std::string>& missing) {
  Config c = make(type_name);
  c.apply_overrides(assignments);
  for (const std::string& path : missing) c.mark_missing(path);
  return c;
}

Config Config::complete(const std::vector<std::string>& assignments) const {
  Config c = clone();
  c.apply_overrides(assignments);
  check_complete(c.root_, "Config::complete");
  return c;
}

std::string Config::to_json(int indent) const {
  JsonWriter w;
  w.reach = config_detail::template_paths(root_);
  json j = root_ ? w.object(*root_, "", true) : json(nullptr);
  return j.dump(indent);
}

Config Config::from_json(const std::string& text) {
  json j;
  bool too_deep = false;
  try {
    j = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        too_deep = true;
        throw std::runtime_error("too deep");
      }
      return true;
    });
  } catch (const std::exception& e) {
    PAX_CHECK(!too_deep, "config JSON: nested deeper than ", kMaxJsonDepth, " levels; a config is a few levels deep");
    std::string why = e.what();  // nlohmann quotes the offending token, which may be huge
    if (why.size() > 200) why = why.substr(0, 200) + "... (" + std::to_string(why.size()) + " characters)";
    PAX_FAIL("config JSON: not valid JSON: ", why);
  }
  JsonReader r;
  return Config(r.object(j, ""));
}

std::string Config::str(bool with_docs) const {
  if (!root_) return "None\n";
  Printer p{config_detail::template_paths(root_), {}, with_docs, {}};
  p.out << root_->type_name() << "\n";
  p.expand(root_.get(), 1);
  return p.out.str();
}

Config Config::clone() const { return Config(deep_clone(root_)); }

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << c.str(); }

}  // namespace pax

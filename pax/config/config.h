// Config: a Fiddle-like handle on a tree of HParams objects. Fields are
// edited by dotted path with typed parsing of command-line strings; the tree
// prints readably and saves to / loads from JSON (round trip exact, shared
// sub-configs preserved). Every mistake is a pax::Error raised before any
// work starts: an unknown field names the type, suggests the closest field
// and lists the valid ones; a value of the wrong type names the expected
// type; an unknown type name lists the registered ones. A template shared by
// several fields is one object: set through any path that reaches it, it
// changes for all of them. A partial config (fdl.Partial) leaves fields to
// fill; it cannot be built until they are set (pax/config/partial.h).
//
//   Config cfg = Config::make("TransformerLm");
//   cfg.set("stack.num_layers", "6");
//   cfg.set("stack.transformer.ff.activation_tpl", "GELU");  // swap a template's type
//   cfg.set("stack.transformer.ff.activation_tpl.approximate", "false");
//   cfg.as<TransformerLm::HParams>().vocab_size = 32000;     // typed access
//   std::string json = cfg.to_json();
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pax/config/hparams.h"
#include "pax/config/partial.h"
#include "pax/core/error.h"

namespace pax {

class Config {
 public:
  Config() = default;
  explicit Config(HParamsPtr root) : root_(std::move(root)) {}
  // Default configuration of a registered type.
  static Config make(const std::string& type_name, const std::string& kind = "");
  template <class H>
  static Config of(H hparams = H()) {
    return Config(std::make_shared<H>(std::move(hparams)));
  }

  bool defined() const { return root_ != nullptr; }
  const HParamsPtr& root() const { return root_; }
  const char* type_name() const;
  // The root as its concrete type (throws naming both types on mismatch).
  template <class H>
  H& as() const {
    auto* p = dynamic_cast<H*>(root_.get());
    PAX_CHECK(p, "Config::as: the config is a ", type_name(), ", not the requested type");
    return *p;
  }

  // path: "a.b.c", list elements as "layers[2]" or "layers.2". `value` is
  // parsed by the field's type: numbers, true/false, dtype names, lists as
  // "[1, 2]", enum value names, None for optional / template fields. For a
  // template field (or list element): a registered type name replaces the
  // template by that type's defaults — at every path that shares it — and
  // "@other.path" makes the field share the template at other.path. A field
  // left missing is filled.
  void set(const std::string& path, const std::string& value);
  // Applies "path=value" assignments in order.
  void apply_overrides(const std::vector<std::string>& assignments);
  // The field's value, formatted as set() accepts it.
  std::string get(const std::string& path) const;
  // The HParams object at `path` (a template or nested field).
  HParamsPtr at(const std::string& path) const;

  // A partial config (fdl.Partial; the seed's
  // `Linear.HParams.partial(input_dims=1)`): the defaults of `type_name`
  // with `assignments` applied and the fields at the `missing` paths left to
  // fill. Building it fails naming every field still missing until set() or
  // complete() supplies them; JSON keeps the marks ({"$missing": true}).
  //   Config p = Config::partial("Linear", {"input_dims=1"}, {"output_dims"});
  //   p.missing();                                        // {"output_dims (an integer)"}
  //   auto linear = nn::build_layer(p.complete({"output_dims=4"}));
  static Config partial(const std::string& type_name, const std::vector<std::string>& assignments,
                        const std::vector<std::string>& missing);
  // Leaves the field at `path` to fill later (a template field becomes None).
  void mark_missing(const std::string& path);
  // "path (type)" of every field left to fill; empty for a complete config.
  std::vector<std::string> missing() const { return missing_fields(root_); }
  // The partial called with the rest of its arguments: a copy with
  // `assignments` applied, which must then be complete (else a pax::Error
  // names every field still missing).
  Config complete(const std::vector<std::string>& assignments) const;

  std::string to_json(int indent = 2) const;
  static Config from_json(const std::string& text);
  // Indented "name = value  # doc" lines; a missing field reads MISSING, and
  // a shared template lists every path that reaches it ("[shared: a, b]").
  std::string str(bool with_docs = true) const;
  // A deep copy (shared sub-configs stay shared within the copy).
  Config clone() const;
  // Same types and field values (compared through JSON).
  bool operator==(const Config& other) const { return to_json() == other.to_json(); }

 private:
  HParamsPtr root_;
};

std::ostream& operator<<(std::ostream& os, const Config& c);

// Deep copy of one HParams tree, preserving sharing inside it.
HParamsPtr deep_clone(const HParamsPtr& root);

}  // namespace pax

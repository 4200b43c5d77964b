// HParams: configuration structs with reflection. Each struct declares its
// fields as ordinary members with defaults and lists them once, each with its
// one-line description and, for a number, its valid range (field_range.h), in
// PAX_HPARAMS(...), which generates a visitor, the type name and a copy. From that visitor, pax/config/config.h builds
// a Fiddle-like dynamic Config: edit by dotted path, parse command-line values, save / load JSON, print — with typo
// detection.
//
//   struct LinearHParams : LayerHParams {
//     int64_t input_dims = 0;
//     int64_t output_dims = 0;
//     PAX_HPARAMS(Linear, LayerHParams,
//                 (input_dims, "Depth of the input.", range::size),
//                 (output_dims, "Depth of the output.", range::size));
//   };
//
// A field holding another HParams (HParamsPtr) is a template: its type can
// be swapped by name (e.g. the activation of a block). Two fields pointing
// to one object share it (one layer instance, shared weights), as in Fiddle.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pax/config/field_range.h"
#include "pax/core/dtype.h"

namespace pax {

class BaseHParams;
using HParamsPtr = std::shared_ptr<BaseHParams>;

// The names of an enum's values, for fields of enum type.
struct EnumNames {
  const char* type_name;
  std::vector<std::string> names;  // indexed by the enum's integer value
};

enum class FieldKind : uint8_t {
  boolean,
  integer,
  real,
  string,
  dtype,
  integers,
  reals,
  strings,
  optional_integer,
  optional_real,
  enumeration,
  nested,
  hparams,
  hparams_list,
};

// A reference to one field of an HParams object, for the visitor.
struct FieldRef {
  const char* name;
  const char* doc;
  FieldKind kind;
  void* ptr;
  int int_bytes = 8;                      // integer: 4 for int, 8 for int64_t
  int real_bytes = 8;                     // real: 4 for float, 8 for double
  const EnumNames* enum_names = nullptr;  // enumeration
  std::optional<FieldRange> range;        // numeric fields: the values allowed (field_range.h)
};

class BaseHParams {
 public:
  virtual ~BaseHParams() = default;
  // The registered type name ("Linear", "StackedTransformer", ...).
  virtual const char* type_name() const = 0;
  virtual HParamsPtr clone() const = 0;
  // Calls f for every field, base-class fields first, in declaration order.
  virtual void visit_fields(const std::function<void(const FieldRef&)>& f) = 0;
  void visit_fields(const std::function<void(const FieldRef&)>& f) const {
    const_cast<BaseHParams*>(this)->visit_fields(f);
  }

  // Fields left to fill, by name: a partial config, like fdl.Partial's
  // arguments not given yet. Config::set fills them; building the config
  // fails naming each one until then (see Config::partial).
  bool is_missing(const std::string& field) const;
  void set_missing(const std::string& field, bool missing);
  const std::vector<std::string>& missing_fields() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

// ---------------------------------------------------------------------------
// Field references by member type.

namespace config_detail {

inline FieldRef ref(const char* n, const char* d, bool& v) { return {n, d, FieldKind::boolean, &v}; }
inline FieldRef ref(const char* n, const char* d, int& v) { return {n, d, FieldKind::integer, &v, 4}; }
inline FieldRef ref(const char* n, const char* d, int64_t& v) { return {n, d, FieldKind::integer, &v, 8}; }
inline FieldRef ref(const char* n, const char* d, float& v) { return {n, d, FieldKind::real, &v, 8, 4}; }
inline FieldRef ref(const char* n, const char* d, double& v) { return {n, d, FieldKind::real, &v}; }
inline FieldRef ref(const char* n, const char* d, std::string& v) { return {n, d, FieldKind::string, &v}; }
inline FieldRef ref(const char* n, const char* d, DType& v) { return {n, d, FieldKind::dtype, &v}; }
inline FieldRef ref(const char* n, const char* d, std::vector<int64_t>& v) { return {n, d, FieldKind::integers, &v}; }
inline FieldRef ref(const char* n, const char* d, std::vector<double>& v) { return {n, d, FieldKind::reals, &v}; }
inline FieldRef ref(const char* n, const char* d, std::vector<std::string>& v) {
  return {n, d, FieldKind::strings, &v};
}
inline FieldRef ref(const char* n, const char* d, std::optional<int64_t>& v) {
  return {n, d, FieldKind::optional_integer, &v};
}
inline FieldRef ref(const char* n, const char* d, std::optional<double>& v) {
  return {n, d, FieldKind::optional_real, &v};
}
inline FieldRef ref(const char* n, const char* d, HParamsPtr& v) { return {n, d, FieldKind::hparams, &v}; }
inline FieldRef ref(const char* n, const char* d, std::vector<HParamsPtr>& v) {
  return {n, d, FieldKind::hparams_list, &v};
}
// A by-value nested HParams struct (not swappable), e.g. a WeightInit.
template <class T>
requires std::is_base_of_v<BaseHParams, T> FieldRef ref(const char* n, const char* d, T& v) {
  return {n, d, FieldKind::nested, static_cast<BaseHParams*>(&v)};
}
template <class E>
requires std::is_enum_v<E> FieldRef ref(const char* n, const char* d, E& v) {
  static_assert(sizeof(E) == sizeof(int), "enum fields need an int-sized underlying type");
  return {n, d, FieldKind::enumeration, &v, 4, 8, &pax_enum_names(static_cast<E*>(nullptr))};
}

// A copy of an HParams struct. An abstract one (the fields that several
// registered structs share, declared once in their base) has no copies of
// its own: its concrete subclasses override clone.
template <class T>
HParamsPtr clone_of(const T& hparams) {
  if constexpr (std::is_abstract_v<T>) {
    throw std::logic_error(std::string("clone of the abstract HParams ") + hparams.type_name());
  } else {
    return std::make_shared<T>(hparams);
  }
}

// A field's range, when its PAX_HPARAMS entry gives one (numbers only).
inline FieldRef with_range(FieldRef f) { return f; }
inline FieldRef with_range(FieldRef f, const FieldRange& range) {
  f.range = range;
  return f;
}

}  // namespace config_detail

// Registry of HParams types by name (layers and other configurable types).
using HParamsFactory = HParamsPtr (*)();
void register_hparams(const std::string& type_name, HParamsFactory factory, const std::string& kind);
// A default-constructed HParams of the registered type; throws pax::Error
// listing the registered names (of `kind`, when given) if unknown.
HParamsPtr make_hparams(const std::string& type_name, const std::string& kind = "");
bool is_registered_hparams(const std::string& type_name);
std::vector<std::string> registered_hparams(const std::string& kind = "");
// The same names comma-separated, for error messages ("Adam, Sgd, ...").
std::string registered_hparams_list(const std::string& kind);
// "did you mean 'x'?" over `candidates` (empty when nothing is close).
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace pax

// ---------------------------------------------------------------------------
// Macros.

#define PAX_HP_EXPAND(x) x
// An entry's first element is the member, or (name, member expression) for a
// field stored elsewhere under another name: ((beta1, options.b1), "doc").
#define PAX_HP_CAT(a, b) PAX_HP_CAT_(a, b)
#define PAX_HP_CAT_(a, b) a##b
#define PAX_HP_SECOND(a, b, ...) b
#define PAX_HP_SECOND_OF(...) PAX_HP_EXPAND(PAX_HP_SECOND(__VA_ARGS__))
#define PAX_HP_IS_PAIR(x) PAX_HP_SECOND_OF(PAX_HP_PAIR_PROBE x, 0, ~)
#define PAX_HP_PAIR_PROBE(...) ~, 1
#define PAX_HP_NAME_0(member) #member
#define PAX_HP_NAME_1(pair) PAX_HP_EXPAND(PAX_HP_NAME_OF pair)
#define PAX_HP_NAME_OF(name, member) #name
#define PAX_HP_MEMBER_0(member) member
#define PAX_HP_MEMBER_1(pair) PAX_HP_EXPAND(PAX_HP_MEMBER_OF pair)
#define PAX_HP_MEMBER_OF(name, member) member
#define PAX_HP_FIELD(field, doc, ...)                                                        \
  f(::pax::config_detail::with_range(                                                        \
      ::pax::config_detail::ref(PAX_HP_CAT(PAX_HP_NAME_, PAX_HP_IS_PAIR(field))(field), doc, \
                                PAX_HP_CAT(PAX_HP_MEMBER_, PAX_HP_IS_PAIR(field))(field)) __VA_OPT__(, __VA_ARGS__)));
#define PAX_HP_APPLY(pair) PAX_HP_FIELD pair
#define PAX_HP_FE_1(x) PAX_HP_APPLY(x)
#define PAX_HP_FE_2(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_1(__VA_ARGS__))
#define PAX_HP_FE_3(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_2(__VA_ARGS__))
#define PAX_HP_FE_4(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_3(__VA_ARGS__))
#define PAX_HP_FE_5(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_4(__VA_ARGS__))
#define PAX_HP_FE_6(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_5(__VA_ARGS__))
#define PAX_HP_FE_7(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_6(__VA_ARGS__))
#define PAX_HP_FE_8(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_7(__VA_ARGS__))
#define PAX_HP_FE_9(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_8(__VA_ARGS__))
#define PAX_HP_FE_10(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_9(__VA_ARGS__))
#define PAX_HP_FE_11(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_10(__VA_ARGS__))
#define PAX_HP_FE_12(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_11(__VA_ARGS__))
#define PAX_HP_FE_13(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_12(__VA_ARGS__))
#define PAX_HP_FE_14(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_13(__VA_ARGS__))
#define PAX_HP_FE_15(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_14(__VA_ARGS__))
#define PAX_HP_FE_16(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_15(__VA_ARGS__))
#define PAX_HP_FE_17(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_16(__VA_ARGS__))
#define PAX_HP_FE_18(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_17(__VA_ARGS__))
#define PAX_HP_FE_19(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_18(__VA_ARGS__))
#define PAX_HP_FE_20(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_19(__VA_ARGS__))
#define PAX_HP_FE_21(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_20(__VA_ARGS__))
#define PAX_HP_FE_22(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_21(__VA_ARGS__))
#define PAX_HP_FE_23(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_22(__VA_ARGS__))
#define PAX_HP_FE_24(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_23(__VA_ARGS__))
#define PAX_HP_FE_25(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_24(__VA_ARGS__))
#define PAX_HP_FE_26(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_25(__VA_ARGS__))
#define PAX_HP_FE_27(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_26(__VA_ARGS__))
#define PAX_HP_FE_28(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_27(__VA_ARGS__))
#define PAX_HP_FE_29(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_28(__VA_ARGS__))
#define PAX_HP_FE_30(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_29(__VA_ARGS__))
#define PAX_HP_FE_31(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_30(__VA_ARGS__))
#define PAX_HP_FE_32(x, ...) PAX_HP_APPLY(x) PAX_HP_EXPAND(PAX_HP_FE_31(__VA_ARGS__))
#define PAX_HP_GET(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, \
                   _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, NAME, ...)                               \
  NAME
#define PAX_HP_FOR_EACH(...)                                                                                          \
  PAX_HP_EXPAND(PAX_HP_GET(__VA_ARGS__, PAX_HP_FE_32, PAX_HP_FE_31, PAX_HP_FE_30, PAX_HP_FE_29, PAX_HP_FE_28,         \
                           PAX_HP_FE_27, PAX_HP_FE_26, PAX_HP_FE_25, PAX_HP_FE_24, PAX_HP_FE_23, PAX_HP_FE_22,        \
                           PAX_HP_FE_21, PAX_HP_FE_20, PAX_HP_FE_19, PAX_HP_FE_18, PAX_HP_FE_17, PAX_HP_FE_16,        \
                           PAX_HP_FE_15, PAX_HP_FE_14, PAX_HP_FE_13, PAX_HP_FE_12, PAX_HP_FE_11, PAX_HP_FE_10,        \
                           PAX_HP_FE_9, PAX_HP_FE_8, PAX_HP_FE_7, PAX_HP_FE_6, PAX_HP_FE_5, PAX_HP_FE_4, PAX_HP_FE_3, \
                           PAX_HP_FE_2, PAX_HP_FE_1)(__VA_ARGS__))

// Inside an HParams struct: the type name, the base (whose fields come
// first; ::pax::BaseHParams for none) and each field as (member, "doc"[,
// range]), or ((name, member expression), "doc"[, range]) for a field kept
// inside another struct: ((beta1, options.b1), "Decay of the first moment.").
#define PAX_HPARAMS(TypeName, Base, ...)                                                     \
  const char* type_name() const override { return #TypeName; }                               \
  ::pax::HParamsPtr clone() const override { return ::pax::config_detail::clone_of(*this); } \
  using ::pax::BaseHParams::visit_fields;                                                    \
  void visit_fields(const std::function<void(const ::pax::FieldRef&)>& f) override {         \
    if constexpr (!std::is_same_v<Base, ::pax::BaseHParams>) Base::visit_fields(f);          \
    PAX_HP_FOR_EACH(__VA_ARGS__)                                                             \
  }

// An HParams struct with no fields of its own.
#define PAX_HPARAMS_NO_FIELDS(TypeName, Base)                                                                        \
  const char* type_name() const override { return #TypeName; }                                                       \
  ::pax::HParamsPtr clone() const override { return std::make_shared<std::remove_cvref_t<decltype(*this)>>(*this); } \
  using ::pax::BaseHParams::visit_fields;                                                                            \
  void visit_fields(const std::function<void(const ::pax::FieldRef&)>& f) override {                                 \
    if constexpr (!std::is_same_v<Base, ::pax::BaseHParams>) Base::visit_fields(f);                                  \
  }

// Registers an HParams struct under its type name (in a .cc file).
#define PAX_REGISTER_HPARAMS(Struct, kind)                                                         \
  static const bool pax_hparams_registered_##Struct##_ = [] {                                      \
    ::pax::register_hparams(                                                                       \
        Struct().type_name(), [] { return ::pax::HParamsPtr(std::make_shared<Struct>()); }, kind); \
    return true;                                                                                   \
  }()

// Declares the value names of an enum used as a field type, in the enum's
// namespace (found by argument-dependent lookup):
//   PAX_ENUM(WeightInitMethod, "constant", "gaussian", ...)
#define PAX_ENUM(Enum, ...)                                \
  inline const ::pax::EnumNames& pax_enum_names(Enum*) {   \
    static const ::pax::EnumNames n{#Enum, {__VA_ARGS__}}; \
    return n;                                              \
  }

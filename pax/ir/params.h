// Params: the static parameters of one primitive application (axes, shapes,
// dtypes, dimension numbers...), as plain named values so that equations print,
// compare and hash (jaxpr `reduce_sum[axes=(0,)]`).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <iosfwd>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "pax/core/dtype.h"

namespace pax {

using Ints = std::vector<int64_t>;

// A structured parameter: the sub-jaxprs of control-flow primitives, the
// user rules of custom_vjp. Compared and hashed by identity.
class ParamObject {
 public:
  virtual ~ParamObject() = default;
  virtual std::string str() const = 0;
};
using ParamObjectPtr = std::shared_ptr<const ParamObject>;

using ParamValue = std::variant<bool, int64_t, double, DType, std::string, Ints, ParamObjectPtr>;

class Params {
 public:
  using Item = std::pair<std::string, ParamValue>;
  Params() = default;
  Params(std::initializer_list<Item> items) : items_(items) {}

  Params& set(std::string name, ParamValue value);
  bool has(std::string_view name) const;
  const ParamValue& at(std::string_view name) const;  // throws pax::Error if missing

  template <class T>
  const T& get(std::string_view name) const {
    const ParamValue& v = at(name);
    if (const T* p = std::get_if<T>(&v)) return *p;
    type_error(name);
  }
  int64_t i(std::string_view name) const { return get<int64_t>(name); }
  double f(std::string_view name) const { return get<double>(name); }
  bool b(std::string_view name) const { return get<bool>(name); }
  DType dtype(std::string_view name) const { return get<DType>(name); }
  const std::string& s(std::string_view name) const { return get<std::string>(name); }
  const Ints& ints(std::string_view name) const { return get<Ints>(name); }
  // A structured parameter of type T (e.g. the Jaxpr of a jit_call).
  template <class T>
  std::shared_ptr<const T> object(std::string_view name) const {
    auto p = std::dynamic_pointer_cast<const T>(get<ParamObjectPtr>(name));
    if (!p) type_error(name);
    return p;
  }

  const std::vector<Item>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  bool operator==(const Params&) const = default;
  size_t hash() const;
  std::string str() const;  // "axes=(0, 1), keepdims=False"

 private:
  [[noreturn]] void type_error(std::string_view name) const;
  std::vector<Item> items_;
};

std::ostream& operator<<(std::ostream& os, const Params& p);

}  // namespace pax

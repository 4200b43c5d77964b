// Dtype classes accepted by primitives.
#include "pax/prims/dtype_rules.h"

#include "pax/core/error.h"

namespace pax {

bool accepts(Accepts a, DType d) {
  switch (a) {
    case Accepts::floating: return is_floating(d);
    case Accepts::numeric: return d != DType::bool_;
    case Accepts::integer: return is_integer(d);
    case Accepts::int_or_bool: return is_integer(d) || d == DType::bool_;
    case Accepts::any: return true;
  }
  return false;
}

const char* describe(Accepts a) {
  switch (a) {
    case Accepts::floating: return "a floating dtype (bf16, f16, f32, f64)";
    case Accepts::numeric: return "a numeric dtype (u8, u32, i32, i64, bf16, f16, f32, f64)";
    case Accepts::integer: return "an integer dtype (u8, u32, i32, i64)";
    case Accepts::int_or_bool: return "bool or an integer dtype (u8, u32, i32, i64)";
    case Accepts::any: return "any dtype";
  }
  return "";
}

void check_accepts(Prim p, Accepts a, const AVal& x) {
  PAX_CHECK(accepts(a, x.dtype), prim_name(p), ": operand ", x.str(), " has dtype ", dtype_name(x.dtype),
            "; it requires ", describe(a));
}

}  // namespace pax

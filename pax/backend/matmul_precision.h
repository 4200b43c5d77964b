// The precision of f32 products and convolutions on devices with faster,
// less precise modes (jax.default_matmul_precision). paxcc computes f32
// products in f32 unless asked: "tensorfloat32" lets a GPU's tensor cores
// take TF32 inputs (10 mantissa bits) with f32 accumulation, and
// "bfloat16" (JAX's fastest) is served with TF32 as well, never less. The
// CPU computes f32 products in f32 whatever is asked.
//
// The setting is read by the kernels when they run: process-wide, from
// PAX_DEFAULT_MATMUL_PRECISION on first use, paxcc's
// --jax_default_matmul_precision, set_default_matmul_precision() or a
// DefaultMatmulPrecision scope.
#pragma once

#include <string>

namespace pax {

enum class MatmulPrecision { float32, tensorfloat32, bfloat16 };

// JAX's names: "float32" / "highest", "tensorfloat32" / "high",
// "bfloat16" / "default" / "fastest". pax::Error names the valid ones.
MatmulPrecision parse_matmul_precision(const std::string& name);
const char* matmul_precision_name(MatmulPrecision p);

// The current setting (float32 unless set; PAX_DEFAULT_MATMUL_PRECISION
// is read on the first call, and a bad value is a pax::Error).
MatmulPrecision default_matmul_precision();
void set_default_matmul_precision(MatmulPrecision p);

// Whether f32 products may use TF32 tensor cores under the setting.
inline bool f32_products_in_tf32() { return default_matmul_precision() != MatmulPrecision::float32; }

// Sets the precision for its scope (jax.default_matmul_precision as a
// context manager) and restores the previous one after it.
class DefaultMatmulPrecision {
 public:
  explicit DefaultMatmulPrecision(MatmulPrecision p) : previous_(default_matmul_precision()) {
    set_default_matmul_precision(p);
  }
  explicit DefaultMatmulPrecision(const std::string& name) : DefaultMatmulPrecision(parse_matmul_precision(name)) {}
  ~DefaultMatmulPrecision() { set_default_matmul_precision(previous_); }
  DefaultMatmulPrecision(const DefaultMatmulPrecision&) = delete;
  DefaultMatmulPrecision& operator=(const DefaultMatmulPrecision&) = delete;

 private:
  MatmulPrecision previous_;
};

}  // namespace pax

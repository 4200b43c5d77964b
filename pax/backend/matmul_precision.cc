// The process's matmul precision setting (see matmul_precision.h).
#include "pax/backend/matmul_precision.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "pax/core/error.h"

namespace pax {
namespace {

std::atomic<int> g_precision{-1};  // -1: not read from the environment yet
std::once_flag g_env_once;

}  // namespace

MatmulPrecision parse_matmul_precision(const std::string& name) {
  if (name == "float32" || name == "highest") return MatmulPrecision::float32;
  if (name == "tensorfloat32" || name == "high") return MatmulPrecision::tensorfloat32;
  if (name == "bfloat16" || name == "default" || name == "fastest") return MatmulPrecision::bfloat16;
  PAX_FAIL("matmul precision '", name,
           "' is not one of float32 (highest), tensorfloat32 (high), bfloat16 (default, fastest)");
}

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::float32: return "float32";
    case MatmulPrecision::tensorfloat32: return "tensorfloat32";
    case MatmulPrecision::bfloat16: return "bfloat16";
  }
  return "float32";
}

MatmulPrecision default_matmul_precision() {
  std::call_once(g_env_once, [] {
    const char* env = std::getenv("PAX_DEFAULT_MATMUL_PRECISION");
    int expected = -1;
    const int value = env && *env ? int(parse_matmul_precision(env)) : int(MatmulPrecision::float32);
    g_precision.compare_exchange_strong(expected, value);  // a value set before the first read wins
  });
  return MatmulPrecision(g_precision.load(std::memory_order_relaxed));
}

void set_default_matmul_precision(MatmulPrecision p) { g_precision.store(int(p), std::memory_order_relaxed); }

}  // namespace pax

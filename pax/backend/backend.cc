// The registry of backends: the table the layers below the backends use.
#include "pax/backend/backend.h"

#include <atomic>

#include "pax/core/error.h"

namespace pax {
namespace {

std::atomic<const Backend*> g_default{nullptr};

}  // namespace

void register_backend(const Backend& backend) { g_default.store(&backend, std::memory_order_release); }

const Backend& default_backend() {
  const Backend* b = g_default.load(std::memory_order_acquire);
  PAX_CHECK(b, "no backend is registered: link pax::pax (or a backend library such as pax_backend_cpu)");
  return *b;
}

std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options) {
  PAX_CHECK(jaxpr, "compile: no jaxpr");
  return default_backend().compile(std::move(jaxpr), options);
}

}  // namespace pax

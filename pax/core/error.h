// pax::Error, the one exception type paxcc throws for user mistakes (bad shapes,
// dtypes, axes, configs, files), and the PAX_CHECK macro that raises it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pax {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
// Streams every argument into one string: PAX_CHECK(ok, "op: got ", shape, ", want ...").
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace pax

// Throws pax::Error with the streamed message when `cond` is false.
#define PAX_CHECK(cond, ...)                                             \
  do {                                                                   \
    if (!(cond)) throw ::pax::Error(::pax::detail::concat(__VA_ARGS__)); \
  } while (0)

// Throws pax::Error unconditionally.
#define PAX_FAIL(...) throw ::pax::Error(::pax::detail::concat(__VA_ARGS__))

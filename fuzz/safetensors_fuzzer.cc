// libFuzzer target: arbitrary bytes as a safetensors file. Reading must
// succeed or throw pax::Error; anything else (a crash, a sanitizer report,
// another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pax/core/error.h"
#include "pax/train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pax::train::SafetensorsContents c =
        pax::train::read_safetensors(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.safetensors");
    for (const pax::train::NamedArray& t : c.tensors) {
      if (t.array.nbytes() > size) __builtin_trap();  // read more than it was given
    }
  } catch (const pax::Error&) {
  }
  return 0;
}

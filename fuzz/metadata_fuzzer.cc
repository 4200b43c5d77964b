// libFuzzer target: arbitrary bytes as metadata.json. Parsing (and rebuilding
// the trees it describes) must succeed or throw pax::Error; anything else is
// a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "pax/core/error.h"
#include "pax/train/checkpoint_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pax::train::CheckpointMetadata m = pax::train::parse_checkpoint_metadata(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/metadata.json");
    for (const auto& [name, rec] : m.trees) {
      const std::vector<pax::Array> leaves(rec.tensors.size(), pax::scalar(0.0f));
      pax::train::tree_from_records(rec.structure, leaves);
    }
  } catch (const pax::Error&) {
  }
  return 0;
}

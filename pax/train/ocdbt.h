// TensorStore's OCDBT key-value store, read-only: the database Orbax writes
// its arrays into by default (manifest.ocdbt, d/<file>, and per-process
// ocdbt.process_<i>/ databases the top-level one refers into).
#pragma once

#include <memory>
#include <string>

#include "pax/train/orbax_checkpoint.h"

namespace pax::train {

// The database whose manifest.ocdbt is in `dir`: every key of its latest
// version. pax::Error naming the file for anything malformed (a bad magic
// number, length, checksum or encoding).
std::unique_ptr<KeyValueReader> open_ocdbt_store(const std::string& dir);

}  // namespace pax::train

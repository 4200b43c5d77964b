// Batching. The vmap level carries a batch axis on each value and applies
// the primitives' batching rules; a named axis lets collectives (psum, pmean,
// pmax, all_gather) reduce over the batch, as across replicas.
#pragma once

#include <memory>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/interp/trace.h"

namespace pax {

class VmapTrace : public Trace, public std::enable_shared_from_this<VmapTrace> {
 public:
  VmapTrace(int64_t axis_size, std::string axis_name) : axis_size_(axis_size), axis_name_(std::move(axis_name)) {}
  std::vector<Array> process(Prim prim, std::span<const Array> inputs, const Params& params) override;
  std::string name() const override { return "vmap"; }
  const std::string* axis_name() const override { return axis_name_.empty() ? nullptr : &axis_name_; }
  // A value with its batch axis at `bdim` (>= 0) as this level's tracer.
  Array batched(const Array& value, int64_t bdim);
  // (value, bdim) of x; bdim -1 when x is not this level's.
  std::pair<Array, int64_t> unpack(const Array& x) const;
  int64_t axis_length() const override { return axis_size_; }

 private:
  int64_t axis_size_;
  std::string axis_name_;
};

class VmapTracer : public LevelTracer {
 public:
  VmapTracer(std::shared_ptr<Trace> trace, Array value, int64_t bdim)
      : LevelTracer(std::move(trace)), value(std::move(value)), bdim(bdim) {}
  const Array value;
  const int64_t bdim;
};

// Where output j of n goes (its batch axis; nullopt: the output is not
// mapped, and must not depend on the mapped axis), asked once per output
// after the function has run.
using OutAxisFn = std::function<std::optional<int64_t>(size_t output, size_t num_outputs)>;

// vmap over flat arrays: in_axes[i] is the batch axis of argument i
// (nullopt: not batched), out_axes says where each output's batch axis goes.
std::vector<Array> vmap_flat(const FlatFn& f, std::span<const Array> args,
                             std::span<const std::optional<int64_t>> in_axes, const OutAxisFn& out_axes,
                             const std::string& axis_name);
// out_axes[j] for output j, or out_axes[0] for every output.
std::vector<Array> vmap_flat(const FlatFn& f, std::span<const Array> args,
                             std::span<const std::optional<int64_t>> in_axes, std::span<const int64_t> out_axes,
                             const std::string& axis_name);

// Helpers for batching rules: move the batch axis of `x` from `from` to `to`
// (from = -1: broadcast a new axis of `size`).
Array move_batch_axis(const Array& x, int64_t from, int64_t to, int64_t size);

}  // namespace pax

// Fully sharded data parallelism (the seed's fsdp, praxis's weight sharding
// over the data axis): each process holds one block of every large
// parameter, split along one dimension over a named process axis. init
// creates only this process's blocks; Layer::theta all-gathers a block into
// the declared weight just before use, so that inside Repeat's scan one layer
// is whole at a time, and the gather's derivative hands each process the
// summed gradient of its own block.
//
//   nn::ShardingPlan plan{.fsdp = {.axis = "data", .size = 4, .index = 1}};
//   Tree vars = nn::init_sharded(model, key, plan);  // blocks of the params
//   nn::apply(model, vars, {.sharding = plan}, x);  // whole weights per layer
#pragma once

#include <cstdint>
#include <string>

#include "pax/core/array.h"
#include "pax/nn/weight_init.h"

namespace pax::nn {

struct FsdpOptions {
  std::string axis;                         // the named axis the params are split over ("" : off)
  int64_t size = 1;                         // processes on that axis
  int64_t index = 0;                        // this process's position on it (the block it holds)
  int64_t min_elements = int64_t(1) << 14;  // smaller params stay whole on every process
  bool enabled() const { return !axis.empty() && size > 1; }
};

// The dimension of a params variable of declaration `spec` that fsdp splits
// (-1: kept whole): spec.fsdp_dim when set (checked: after the repeat prefix,
// divisible by the axis size), else the largest dimension after the repeat
// prefix that the axis size divides (the first of equals), for variables of
// at least min_elements.
int64_t fsdp_split_dim(const WeightHParams& spec, const FsdpOptions& fsdp, const std::string& what);

// Block `index` of `count` equal blocks of `full` along `dim`.
Array block_along(const Array& full, int64_t dim, int64_t count, int64_t index);
// Block fsdp.index of `full` along `dim` (`full` when dim < 0).
Array fsdp_block(const Array& full, int64_t dim, const FsdpOptions& fsdp);

// The declared weight from this process's block: the one dimension where
// block and declaration differ by the axis size is all-gathered; a block of
// the declared shape is returned as it is. Throws naming `what` otherwise.
Array fsdp_gather(const Array& block, const Shape& declared, const FsdpOptions& fsdp, const std::string& what);

}  // namespace pax::nn

// Kernels of the fused loops beyond the elementwise kernels they call:
//  - non-temporal stores for the results of large loops: written once per
//    block and not read again soon, they go to memory without first reading
//    the destination into the cache (which would add a third of the traffic);
//  - accumulator chains: a loop whose instructions each combine the previous
//    result with an input or a constant runs in vector registers, one load of
//    each operand and one store per element instead of a round trip through a
//    block per instruction. Each operation is the one the elementwise kernel
//    applies (same Highway operations, same NaN rules), so results match them
//    bit for bit, except the sign and payload of a NaN computed from two NaN
//    operands (which one an instruction returns depends on the operand order
//    the C++ compiler chose for a commutative operation, in either kernel);
//  - bf16 values held as f32 in the registers of a loop: narrowing to bf16
//    for stores (elementwise.h rounds them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pax/backend/cpu/elementwise.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

// Copies `bytes` from src to dst (64-byte aligned), bypassing the cache.
void stream_copy(void* dst, const void* src, size_t bytes);
// Orders the streamed stores of this thread before later stores and reads.
void stream_fence();

// y[i] = *value for i < n, elements of `width` bytes (1, 2, 4 or 8), in full
// vector stores, on the calling thread (a fused block's broadcast operands,
// each chunk of copy.h's fill).
void fill_block(size_t width, const void* value, void* y, size_t n);

// One step of an accumulator chain: acc = op(acc, leaf), or op(leaf, acc)
// when leaf_first, or op(acc) for a unary step.
struct ChainStep {
  bool binary = true;
  uint8_t op = 0;  // UnaryOp (neg, abs) or BinaryOp (add, sub, mul, div, max, min)
  bool leaf_first = false;
  bool scalar = false;  // the leaf is one element, the same for every i
  const void* leaf = nullptr;
};

// y[i] = the bf16 bits of x[i], a value that bf16 represents exactly (the
// upper half of its bits: sign and payload of a NaN are kept). With `stream`,
// y is written with non-temporal stores where it is aligned (call
// stream_fence() before the values are read elsewhere).
void narrow_to_bf16(const float* x, uint16_t* y, size_t n, bool stream = false);

// Whether chains compute these operations (f32 and f64 only).
bool chain_supports(bool binary, uint8_t op, DType dtype);

// y[i] = the steps applied in turn to first[i] (first[0] when first_scalar),
// leaves read at [i] (or [0] when scalar), for i < n. y may be first or a
// leaf (every operand of element i is read before y[i] is written). With
// `stream`, y is written with non-temporal stores where it is 64-byte
// aligned (call stream_fence() before the values are read elsewhere).
void chain(DType dtype, const void* first, bool first_scalar, std::span<const ChainStep> steps, void* y, size_t n,
           bool stream = false);

}  // namespace pax::cpu

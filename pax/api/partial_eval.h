// flax.jax_utils.partial_eval_by_shape: evaluates a function whose inputs are
// known only by shape and dtype. "Similar to jax.eval_shape, with the key
// difference that outputs that can be computed without the concrete values
// of the inputs are returned as they are instead of as shapes" (the seed):
// flax's init_by_shape initialises a model's parameters this way, from a
// random key, without any input data.
//
//   Array key = random::key(0);
//   Tree out = partial_eval_by_shape(
//       [&](const std::vector<Array>& in) {
//         Array w = random::normal(key, {784, 10});            // known: a concrete array
//         return Tree::dict({{"w", w}, {"logits", matmul(in[0], w)}});  // unknown: a shape
//       },
//       {{{128, 784}}});                                        // f32[128,784], never allocated
//
// fn is traced once on abstract inputs; the operations that depend on no
// input are then run (only those some output needs), the rest never are. An
// output is concrete when it depends on no input, and otherwise an abstract
// Array (printed as ShapeDtypeStruct, like eval_shape's results). flax's
// extra *args and **kwargs are what fn captures. Usable inside grad, vmap and
// jit: captured tracers of those transforms stay tracers.
#pragma once

#include <functional>
#include <vector>

#include "pax/core/array.h"
#include "pax/core/tree.h"

namespace pax {

// The shape and dtype of one input (jax.ShapeDtypeStruct); flax's input_spec
// entries are a shape, or a (shape, dtype) pair, float32 when not given.
struct ShapeDtypeStruct {
  Shape shape;
  DType dtype = DType::f32;
};

// fn(inputs) with inputs[i] abstract of input_spec[i]'s shape and dtype.
Tree partial_eval_by_shape(const std::function<Tree(const std::vector<Array>& inputs)>& fn,
                           const std::vector<ShapeDtypeStruct>& input_spec);

}  // namespace pax

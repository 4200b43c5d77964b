// Embedding layers, as praxis.layers.embedding_softmax: Embedding (a lookup
// table), SharedEmbeddingSoftmax (one table that both embeds ids and
// produces logits, i.e. tied input / output embeddings), PositionalEmbedding
// (fixed sinusoids) and TrainablePositionalEmbedding (a learnt table).
//
// Lookups gather whole rows of the table. Ids outside [0, rows) are clamped
// to the nearest valid row (XLA's "clip" gather mode): under jit their values
// are unknown when the program is built, so they cannot be rejected there.
//
// Tables are (rows, depth) and default to params_init = gaussian_sqrt_fan_in
// with the depth axis as the fan-in (the axis the logits projection
// contracts, as the (input_dims, num_classes) softmax weight of Praxis): each
// entry ~ N(0, 1 / depth), the Gaussian(1 / sqrt(model_dims)) Praxis's
// language-model configs use, so that scale_sqrt_depth gives embeddings of
// unit variance.
#pragma once

#include <cstdint>

#include "pax/nn/layer.h"

namespace pax::nn {

// ids -> table[ids], table: (num_classes, input_dims) named "emb_var".
class Embedding : public Layer {
 public:
  struct HParams : Layer::HParams {
    HParams() { params_init = WeightInit::gaussian_sqrt_fan_in(); }
    int64_t num_classes = 0;
    int64_t input_dims = 0;
    bool scale_sqrt_depth = false;
    PAX_HPARAMS(Embedding, Layer::HParams, (num_classes, "Number of rows of the table (vocabulary size).", range::size),
                (input_dims, "Depth of each embedding.", range::size),
                (scale_sqrt_depth, "Multiply looked-up embeddings by sqrt(input_dims)."));
  };
  // ids: integer (...) -> (..., input_dims); out-of-range ids are clamped.
  Array fprop(const Array& ids) const { return emb_lookup(ids); }
  Array emb_lookup(const Array& ids) const;
  // x @ table^T: (..., input_dims) -> (..., num_classes) logits (never scaled).
  Array attend(const Array& x) const;

 protected:
  void setup() override;
  // Under tensor parallelism the table's rows split over mdl where the axis
  // size divides num_classes (nn/tensor_parallel.h): attend_part gives this
  // process's logits, whole_logits gathers them (the identity when whole).
  Array attend_part(const Array& x) const;
  Array whole_logits(const Array& part) const;
};

// An Embedding whose table also produces logits (tied input and output
// embeddings), with an optional bias (num_classes) "bias":
//   logits = x @ emb_var^T + bias;  cap * tanh(logits / cap) when cap > 0.
// emb_lookup and attend come from Embedding; fprop is the softmax role
// (get_logits). The loss is left to the model.
class SharedEmbeddingSoftmax : public Embedding {
 public:
  struct HParams : Embedding::HParams {
    bool has_bias = true;
    double soft_cap_logits = 0.0;
    PAX_HPARAMS(SharedEmbeddingSoftmax, Embedding::HParams,
                (has_bias, "Add a learnt bias (initialised to 0) to the logits."),
                (soft_cap_logits, "If > 0, logits = cap * tanh(logits / cap); 0 disables the cap.",
                 range::non_negative));
  };
  // x: (..., input_dims) -> (..., num_classes).
  Array fprop(const Array& x) const { return get_logits(x); }
  Array get_logits(const Array& x) const;

 protected:
  void setup() override;
};

// Sinusoidal position signal ("Attention Is All You Need"): for timescales
// geometrically spaced from min_timescale to max_timescale, the first
// embedding_dims / 2 channels are sin(position / timescale), the next ones
// cos(...), and an odd embedding_dims gets a last channel of zeros. No
// variables. Computed in f32 (f64 when fprop_dtype is f64), returned in
// fprop_dtype. (Praxis multiplies the inverse timescales by min_timescale
// where the definition divides; the two agree for the default of 1.)
class PositionalEmbedding : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t embedding_dims = 0;
    double min_timescale = 1.0;
    double max_timescale = 10000.0;
    PAX_HPARAMS(PositionalEmbedding, Layer::HParams, (embedding_dims, "Depth of the signal.", range::size),
                (min_timescale, "Shortest timescale (period / 2 pi) of the sinusoids.", range::positive),
                (max_timescale, "Longest timescale of the sinusoids.", range::positive));
  };
  // Positions 0 .. seq_length - 1: (1, seq_length, embedding_dims).
  Array fprop(int64_t seq_length) const;
  // positions: integer or floating (B, T) -> (B, T, embedding_dims).
  Array fprop(const Array& positions) const;

 protected:
  void setup() override;
};

// A learnt (max_seq_length, embedding_dims) table "emb_var" of position
// embeddings.
class TrainablePositionalEmbedding : public Layer {
 public:
  struct HParams : Layer::HParams {
    HParams() { params_init = WeightInit::gaussian_sqrt_fan_in(); }
    int64_t embedding_dims = 0;
    int64_t max_seq_length = 10240;
    PAX_HPARAMS(TrainablePositionalEmbedding, Layer::HParams, (embedding_dims, "Depth of the embeddings.", range::size),
                (max_seq_length, "Number of positions the table holds.", range::size));
  };
  // The first seq_length rows: (1, seq_length, embedding_dims).
  Array fprop(int64_t seq_length) const;
  // positions: integer (B, T) -> (B, T, embedding_dims). Concrete positions
  // outside [0, max_seq_length) throw; traced ones are clamped.
  Array fprop(const Array& positions) const;

 protected:
  void setup() override;
};

}  // namespace pax::nn

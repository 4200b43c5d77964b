// Embedding, SharedEmbeddingSoftmax, PositionalEmbedding,
// TrainablePositionalEmbedding.
#include "pax/nn/embedding.h"

#include <cmath>
#include <vector>

#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

namespace {

// A (rows, depth) table whose depth axis is the fan-in (see the header); its
// rows split over mdl under tensor parallelism where the axis divides them.
WeightHParams table_spec(int64_t rows, int64_t depth) {
  WeightHParams w;
  w.shape = Shape{rows, depth};
  w.fan_in_axes = {1};
  w.fan_out_axes = {0};
  w.mdl_dim = 0;
  w.mdl_split_if_divisible = true;
  return w;
}

void check_ids(const Layer& l, const Array& ids, const char* what) {
  PAX_CHECK(is_integer(ids.dtype()), l.type_name(), " '", l.path(), "': ", what,
            " must have an integer dtype (u8, u32, i32, i64), got ", ids.aval().str());
}

// table[ids] with ids clamped into [0, rows): (...) -> (..., depth).
Array gather_rows(const Array& table, const Array& ids) {
  const int64_t k = ids.ndim();
  lax::GatherDimensionNumbers dn;
  dn.offset_dims = {k};
  dn.collapsed_slice_dims = {0};
  dn.start_index_map = {0};
  return lax::gather(table, lax::expand_dims(ids, {k}), dn, {1, table.dim(1)}, lax::GatherMode::clip);
}

void check_dims(const Layer& l, const char* rows_name, int64_t rows, const char* depth_name, int64_t depth) {
  PAX_CHECK(rows > 0 && depth > 0, l.type_name(), " '", l.path(), "': ", rows_name, " and ", depth_name,
            " must be > 0, got ", rows, " and ", depth);
}

void check_positions(const Layer& l, const Array& positions) {
  PAX_CHECK(positions.ndim() == 2, l.type_name(), " '", l.path(), "': positions ", positions.aval().str(),
            " must have shape (B, T)");
}

void check_seq_length(const Layer& l, int64_t seq_length) {
  PAX_CHECK(seq_length >= 0, l.type_name(), " '", l.path(), "': seq_length must be >= 0, got ", seq_length);
}

}  // namespace

// ---------------------------------------------------------------------------
// Embedding

void Embedding::setup() {
  const auto& hp = hparams<HParams>();
  check_dims(*this, "num_classes", hp.num_classes, "input_dims", hp.input_dims);
  create_variable("emb_var", table_spec(hp.num_classes, hp.input_dims));
}

Array Embedding::emb_lookup(const Array& ids) const {
  const auto& hp = hparams<HParams>();
  check_ids(*this, ids, "ids");
  const Array table = theta("emb_var");  // (N, D), or this process's N / mdl rows
  Array embs;                            // (..., D)
  if (table.dim(0) == hp.num_classes) {
    embs = gather_rows(table, ids);
  } else {
    // Rows split over mdl: each process looks up the ids in its rows (zeros
    // elsewhere), and the parts are summed. Ids are clamped first, as whole.
    const TensorParallelOptions& tp = tensor_parallel();
    const int64_t rows = table.dim(0);
    const Array clamped = clip(ids.astype(DType::i32), 0, int32_t(hp.num_classes - 1));
    const Array local = clamped - lax::axis_index(tp.axis).astype(DType::i32) * int32_t(rows);
    const Array mine = logical_and(local >= 0, local < int32_t(rows));
    const Array part = gather_rows(table, local);  // clipped outside this process's rows
    embs = leave_split(where(expand_dims(mine, {-1}), part, zeros_like(part)), tp);
  }
  if (hp.scale_sqrt_depth) embs = embs * std::sqrt(double(hp.input_dims));
  return embs;
}

Array Embedding::attend(const Array& x) const { return whole_logits(attend_part(x)); }

// x @ table^T without materialising the transpose: (..., D) -> (..., N), or
// (..., N / mdl) for this process's rows of a table split over mdl.
Array Embedding::attend_part(const Array& x) const {
  const auto& hp = hparams<HParams>();
  const Array xf = to_fprop_dtype(x);
  PAX_CHECK(xf.ndim() >= 1 && xf.dim(-1) == hp.input_dims && is_floating(xf.dtype()), type_name(), " '", path(),
            "': input ", x.aval().str(), " must be floating and end in input_dims = ", hp.input_dims);
  const Array table = theta("emb_var");
  const Array input = table.dim(0) == hp.num_classes ? xf : enter_split(xf, tensor_parallel());
  return lax::dot_general(input, table, {{xf.ndim() - 1}, {1}, {}, {}});
}

Array Embedding::whole_logits(const Array& part) const {
  const auto& hp = hparams<HParams>();
  return part.dim(-1) == hp.num_classes ? part : gather_parts(part, part.ndim() - 1, tensor_parallel());
}

// ---------------------------------------------------------------------------
// SharedEmbeddingSoftmax

void SharedEmbeddingSoftmax::setup() {
  Embedding::setup();
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.soft_cap_logits >= 0 && std::isfinite(hp.soft_cap_logits), "SharedEmbeddingSoftmax '", path(),
            "': soft_cap_logits must be >= 0 (0 disables it), got ", hp.soft_cap_logits);
  if (hp.has_bias) {
    WeightHParams bias;
    bias.shape = Shape{hp.num_classes};
    bias.init = WeightInit::constant(0.0);
    bias.mdl_dim = 0;  // split with the table's rows
    bias.mdl_split_if_divisible = true;
    create_variable("bias", bias);
  }
}

Array SharedEmbeddingSoftmax::get_logits(const Array& x) const {
  const auto& hp = hparams<HParams>();
  Array logits = attend_part(x);  // (..., N), or this process's N / mdl under tp
  if (hp.has_bias) logits = logits + theta("bias");
  logits = whole_logits(logits);  // (..., N)
  if (hp.soft_cap_logits > 0) logits = tanh(logits / hp.soft_cap_logits) * hp.soft_cap_logits;
  return logits;
}

// ---------------------------------------------------------------------------
// PositionalEmbedding

void PositionalEmbedding::setup() {
  const auto& hp = hparams<HParams>();
  PAX_CHECK(hp.embedding_dims > 0, "PositionalEmbedding '", path(), "': embedding_dims must be > 0, got ",
            hp.embedding_dims);
  PAX_CHECK(hp.min_timescale > 0 && hp.max_timescale >= hp.min_timescale && std::isfinite(hp.max_timescale),
            "PositionalEmbedding '", path(), "': timescales need 0 < min_timescale <= max_timescale < inf, got ",
            hp.min_timescale, " and ", hp.max_timescale);
}

Array PositionalEmbedding::fprop(int64_t seq_length) const {
  check_seq_length(*this, seq_length);
  return fprop(lax::iota(DType::i32, {1, seq_length}, 1));
}

Array PositionalEmbedding::fprop(const Array& positions) const {
  const auto& hp = hparams<HParams>();
  check_positions(*this, positions);
  PAX_CHECK(is_integer(positions.dtype()) || is_floating(positions.dtype()), "PositionalEmbedding '", path(),
            "': positions ", positions.aval().str(), " must have an integer or floating dtype");
  const DType compute = base_hparams().fprop_dtype == DType::f64 ? DType::f64 : DType::f32;
  // Timescales min * (max / min)^(i / (n - 1)), i < n; static, so built on
  // the host in f64.
  const int64_t n = hp.embedding_dims / 2;
  const double increment = std::log(hp.max_timescale / hp.min_timescale) / double(std::max<int64_t>(n - 1, 1));
  std::vector<double> inv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) inv[size_t(i)] = std::exp(-double(i) * increment) / hp.min_timescale;
  Array inv_timescales = array(inv, Shape{1, 1, n}).astype(compute);            // (1, 1, n)
  Array scaled = expand_dims(positions.astype(compute), {2}) * inv_timescales;  // (B, T, n)
  std::vector<Array> parts = {sin(scaled), cos(scaled)};
  if (hp.embedding_dims % 2) parts.push_back(zeros({positions.dim(0), positions.dim(1), 1}, compute));
  return to_fprop_dtype(concatenate(parts, 2));  // (B, T, D)
}

// ---------------------------------------------------------------------------
// TrainablePositionalEmbedding

void TrainablePositionalEmbedding::setup() {
  const auto& hp = hparams<HParams>();
  check_dims(*this, "max_seq_length", hp.max_seq_length, "embedding_dims", hp.embedding_dims);
  create_variable("emb_var", table_spec(hp.max_seq_length, hp.embedding_dims));
}

Array TrainablePositionalEmbedding::fprop(int64_t seq_length) const {
  const auto& hp = hparams<HParams>();
  check_seq_length(*this, seq_length);
  PAX_CHECK(seq_length <= hp.max_seq_length, "TrainablePositionalEmbedding '", path(), "': seq_length ", seq_length,
            " exceeds max_seq_length = ", hp.max_seq_length);
  Array rows = lax::slice(theta("emb_var"), {0, 0}, {seq_length, hp.embedding_dims});  // (T, D)
  return lax::expand_dims(rows, {0});                                                  // (1, T, D)
}

Array TrainablePositionalEmbedding::fprop(const Array& positions) const {
  const auto& hp = hparams<HParams>();
  check_positions(*this, positions);
  check_ids(*this, positions, "positions");
  if (positions.is_concrete() && positions.size() > 0) {
    const Array lo = min(positions), hi = max(positions);
    const int64_t first = lo.item<int64_t>(), last = hi.item<int64_t>();
    PAX_CHECK(first >= 0 && last < hp.max_seq_length, "TrainablePositionalEmbedding '", path(), "': positions ",
              positions.aval().str(), " range over [", first, ", ", last,
              "], outside [0, max_seq_length = ", hp.max_seq_length, ")");
  }
  return gather_rows(theta("emb_var"), positions);  // (B, T, D)
}

PAX_REGISTER_LAYER(Embedding);
PAX_REGISTER_LAYER(SharedEmbeddingSoftmax);
PAX_REGISTER_LAYER(PositionalEmbedding);
PAX_REGISTER_LAYER(TrainablePositionalEmbedding);

}  // namespace pax::nn

// IndexedInput and ArrayInput.
#include "pax/data/indexed_input.h"

#include <cstring>

namespace pax::data {

void IndexedInput::set_num_examples(int64_t num_examples) {
  order_ = ExampleOrder(num_examples, base_hparams(), description());
}

Tree IndexedInput::get_next() { return make_batch(order_.next_batch()); }
void IndexedInput::reset() { order_.reset(); }
Tree IndexedInput::state() const { return order_.state(); }
void IndexedInput::restore_state(const Tree& state) { order_.restore_state(state); }
std::optional<Tree> IndexedInput::reshard_state(const Tree& host0_state) const {
  return order_.reshard_state(host0_state);
}

ArrayInput::ArrayInput(const HParams& hparams, const Tree& examples) : IndexedInput(hparams) {
  PAX_CHECK(examples.is_dict() && examples.size() > 0, description(),
            ": examples must be a non-empty dict of arrays, got ", examples.str());
  auto [leaves, def] = tree_flatten(examples);
  const std::vector<std::string> paths = tree_paths(examples);
  def_ = def;
  PAX_CHECK(!leaves.empty(), description(), ": examples have no arrays: ", examples.str());
  const int64_t n = leaves[0].ndim() > 0 ? leaves[0].dim(0) : -1;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    PAX_CHECK(a.ndim() >= 1 && a.dim(0) == n, description(), ": every array needs the same leading (example) ",
              "dimension; '", paths[0], "' is ", leaves[0].aval().str(), " but '", paths[i], "' is ", a.aval().str());
    Column c;
    c.dtype = a.dtype();
    std::vector<int64_t> dims(a.shape().dims().begin() + 1, a.shape().dims().end());
    c.row_shape = Shape(dims);
    c.row_bytes = size_t(c.row_shape.numel()) * itemsize(c.dtype);
    c.data.resize(a.nbytes());
    a.copy_to_host(c.dtype, c.data.data());
    c.padding.assign(c.row_bytes, 0);
    if (paths[i] == "paddings") {
      std::vector<double> ones(size_t(c.row_shape.numel()), 1.0);
      convert_host(DType::f64, ones.data(), c.dtype, c.padding.data(), ones.size());
    }
    columns_.push_back(std::move(c));
  }
  add_weights_ = !examples.contains("weights");
  set_num_examples(n);
}

Tree ArrayInput::make_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = int64_t(indices.size());
  std::vector<Array> leaves;
  for (const Column& c : columns_) {
    std::vector<uint8_t> out(size_t(b) * c.row_bytes);
    for (int64_t i = 0; i < b; ++i) {
      const int64_t e = indices[size_t(i)];
      const uint8_t* src = e >= 0 ? c.data.data() + size_t(e) * c.row_bytes : c.padding.data();
      std::memcpy(out.data() + size_t(i) * c.row_bytes, src, c.row_bytes);
    }
    std::vector<int64_t> dims{b};
    dims.insert(dims.end(), c.row_shape.dims().begin(), c.row_shape.dims().end());
    leaves.push_back(from_host(out.data(), Shape(dims), c.dtype));
  }
  Tree batch = tree_unflatten(def_, leaves);
  if (add_weights_) {
    std::vector<float> w(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) w[size_t(i)] = indices[size_t(i)] >= 0 ? 1.0f : 0.0f;
    batch.set("weights", array(w));
  }
  return batch;
}

}  // namespace pax::data

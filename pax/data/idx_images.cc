// IDX reading / writing and IdxImageInput.
#include "pax/data/idx_images.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "pax/core/parallel.h"
#include "pax/data/datasets.h"
#include "pax/data/file_io.h"

namespace pax::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803, kLabelsMagic = 0x00000801;

uint32_t big_endian_u32(const std::string& b, size_t at) {
  return uint32_t(uint8_t(b[at])) << 24 | uint32_t(uint8_t(b[at + 1])) << 16 | uint32_t(uint8_t(b[at + 2])) << 8 |
         uint32_t(uint8_t(b[at + 3]));
}

void put_big_endian_u32(std::string& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(char((v >> s) & 0xff));
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  const std::string bytes = read_file(path);
  PAX_CHECK(bytes.size() >= 4, "read_idx: '", path, "' is too short for an IDX header (", bytes.size(), " bytes)");
  const uint32_t magic = big_endian_u32(bytes, 0);
  const int type = uint8_t(bytes[2]), ndim = uint8_t(bytes[3]);
  PAX_CHECK(bytes[0] == 0 && bytes[1] == 0 && ndim >= 1, "read_idx: '", path, "' is not an IDX file (magic ",
            hex(magic), "; IDX files start with 0x0000, a type byte and the number of dimensions)");
  PAX_CHECK(type == 0x08, "read_idx: '", path, "' holds IDX type ", hex(uint32_t(type)),
            "; only unsigned bytes (0x08) are supported");
  const size_t header = 4 + 4 * size_t(ndim);
  PAX_CHECK(bytes.size() >= header, "read_idx: '", path, "' is truncated: its header needs ", header,
            " bytes, the file has ", bytes.size());
  IdxArray out;
  uint64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t dim = big_endian_u32(bytes, 4 + 4 * size_t(d));
    out.dims.push_back(int64_t(dim));
    total *= dim;
    PAX_CHECK(total <= bytes.size(), "read_idx: '", path, "' is truncated: its header promises dimensions of more ",
              "than the file's ", bytes.size(), " bytes");
  }
  const size_t expected = header + size_t(total);
  PAX_CHECK(bytes.size() >= expected, "read_idx: '", path, "' is truncated: the header promises ", total,
            " data bytes (", expected, " in all) but the file has ", bytes.size());
  PAX_CHECK(bytes.size() == expected, "read_idx: '", path, "' has ", bytes.size() - expected, " bytes after the ",
            total, " data bytes its header promises");
  out.data.assign(bytes.begin() + std::ptrdiff_t(header), bytes.end());
  return out;
}

void write_idx(const std::string& path, const IdxArray& array) {
  PAX_CHECK(!array.dims.empty() && array.dims.size() < 256, "write_idx: '", path, "': need 1 to 255 dimensions, got ",
            array.dims.size());
  uint64_t total = 1;
  for (int64_t d : array.dims) {
    PAX_CHECK(d >= 0 && d <= int64_t(UINT32_MAX), "write_idx: '", path, "': dimension ", d, " does not fit a u32");
    total *= uint64_t(d);
  }
  PAX_CHECK(total == array.data.size(), "write_idx: '", path, "': the dimensions hold ", total, " bytes, data has ",
            array.data.size());
  std::string bytes = {0, 0, 0x08, char(array.dims.size())};
  for (int64_t d : array.dims) put_big_endian_u32(bytes, uint32_t(d));
  bytes.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  write_file_atomic(path, bytes, path.ends_with(".gz"));
}

IdxImages load_idx_images(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  PAX_CHECK(images.dims.size() == 3, "load_idx_images: '", images_path, "' must hold images (n, rows, cols) (magic ",
            hex(kImagesMagic), "), it has ", images.dims.size(), " dimensions (magic ",
            hex(0x800u | uint32_t(images.dims.size())), ")");
  PAX_CHECK(labels.dims.size() == 1, "load_idx_images: '", labels_path, "' must hold labels (n,) (magic ",
            hex(kLabelsMagic), "), it has ", labels.dims.size(), " dimensions (magic ",
            hex(0x800u | uint32_t(labels.dims.size())), ")");
  PAX_CHECK(images.dims[0] == labels.dims[0], "load_idx_images: '", images_path, "' has ", images.dims[0],
            " images but '", labels_path, "' has ", labels.dims[0], " labels");
  PAX_CHECK(images.dims[0] > 0 && images.dims[1] > 0 && images.dims[2] > 0, "load_idx_images: '", images_path,
            "' holds no pixels (dimensions ", images.dims[0], " x ", images.dims[1], " x ", images.dims[2], ")");
  IdxImages out;
  out.count = images.dims[0];
  out.rows = images.dims[1];
  out.cols = images.dims[2];
  out.pixels = std::move(images.data);
  out.labels = std::move(labels.data);
  return out;
}

// ---------------------------------------------------------------------------
// IdxImageInput

IdxImageInput::IdxImageInput(const HParams& hp) : IndexedInput(hp) {
  PAX_CHECK(hp.pixel_stddev > 0, description(), ": pixel_stddev must be > 0, got ", hp.pixel_stddev);
  const std::string dir = hp.dir.empty() ? fashion_mnist_dir(hp.data_dir) : hp.dir;
  const std::string prefix = hp.split == ImageSplit::train ? "train" : "t10k";
  const std::filesystem::path d(dir);
  images_ = load_idx_images((d / (prefix + "-images-idx3-ubyte.gz")).string(),
                            (d / (prefix + "-labels-idx1-ubyte.gz")).string());
  for (int v = 0; v < 256; ++v) lut_[v] = float((v / 255.0 - hp.pixel_mean) / hp.pixel_stddev);
  set_num_examples(images_.count);
}

Tree IdxImageInput::make_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = int64_t(indices.size()), pixels = images_.rows * images_.cols;
  std::vector<float> inputs(size_t(b * pixels));
  std::vector<int32_t> labels(static_cast<size_t>(b));
  std::vector<float> weights(static_cast<size_t>(b));
  parallel_for(b, std::max<int64_t>(1, 8192 / pixels), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t e = indices[size_t(i)];
      float* dst = inputs.data() + i * pixels;
      if (e < 0) continue;  // padding: zeros with weight 0
      const uint8_t* src = images_.pixels.data() + e * pixels;
      for (int64_t p = 0; p < pixels; ++p) dst[p] = lut_[src[p]];
      labels[size_t(i)] = images_.labels[size_t(e)];
      weights[size_t(i)] = 1.0f;
    }
  });
  return Tree::dict({{"inputs", array(inputs, {b, images_.rows, images_.cols, 1})},
                     {"labels", array(labels)},
                     {"weights", array(weights)}});
}

PAX_REGISTER_INPUT(IdxImageInput);

}  // namespace pax::data

// IDX files (the format of MNIST and Fashion-MNIST) and IdxImageInput, the
// input over an image / label pair of them.
//
// An IDX file is a big-endian header — two zero bytes, a type byte (0x08:
// unsigned bytes, the only type these datasets use), the number of
// dimensions, then each dimension as a u32 — followed by the data. Images
// are (n, rows, cols) (magic 0x00000803), labels (n,) (magic 0x00000801).
// Files may be gzip-compressed (the usual .gz) or plain.
//
// IdxImageInput batches (the keys ClassificationModel reads):
//   inputs  (B, rows, cols, 1) f32: pixel / 255, then (x - pixel_mean) / pixel_stddev
//   labels  (B,) i32
//   weights (B,) f32: 1, or 0 for the padding of a finite eval set (whose
//           inputs and labels are 0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pax/data/indexed_input.h"

namespace pax::data {

// The u8 contents of one IDX file.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, prod(dims) bytes
};

// Reads an IDX file of unsigned bytes; throws pax::Error naming the file for
// a bad magic number, an unsupported type, or a size that does not match the
// header (truncated or with trailing bytes).
IdxArray read_idx(const std::string& path);
// Writes an IDX file of unsigned bytes (gzip-compressed when the name ends
// in .gz), atomically.
void write_idx(const std::string& path, const IdxArray& array);

// Images (n, rows, cols) and their labels (n,) from two IDX files, checked
// against each other.
struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows, cols)
  std::vector<uint8_t> labels;  // (count,)
};
IdxImages load_idx_images(const std::string& images_path, const std::string& labels_path);

enum class ImageSplit : int { train, test };
PAX_ENUM(ImageSplit, "train", "test")

class IdxImageInput : public IndexedInput {
 public:
  struct HParams : BaseInput::HParams {
    std::string dir;
    std::string data_dir;
    ImageSplit split = ImageSplit::train;
    double pixel_mean = 0.0;
    double pixel_stddev = 1.0;
    PAX_HPARAMS(IdxImageInput, BaseInput::HParams,
                (dir,
                 "Directory of the IDX files ({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz); "
                 "empty: Fashion-MNIST."),
                (data_dir, "Data directory (empty: --data_dir, $PAX_DATA_DIR or ./data)."),
                (split, "train (train-*) or test (t10k-*) files."),
                (pixel_mean, "Subtracted from the pixels after scaling them to [0, 1].", range::finite),
                (pixel_stddev, "Divides the pixels after subtracting pixel_mean.", range::positive));
  };

  explicit IdxImageInput(const HParams& hparams);
  const IdxImages& images() const { return images_; }

 protected:
  Tree make_batch(const std::vector<int64_t>& indices) const override;

 private:
  IdxImages images_;
  float lut_[256];  // normalised value of each pixel byte
};

}  // namespace pax::data

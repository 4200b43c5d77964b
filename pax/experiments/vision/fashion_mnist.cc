// Image classifiers on Fashion-MNIST (Debian's dataset-fashion-mnist):
// vision.FashionMnistMlp (two hidden layers of 512) and
// vision.FashionMnistCnn (two 3x3 convolutions with max pooling, then a
// dense layer, with dropout), both trained with Adam and evaluated on the 10k test images.
#include "pax/data/idx_images.h"
#include "pax/experiments/adam_rampup.h"
#include "pax/experiments/experiment.h"
#include "pax/nn/activations.h"
#include "pax/nn/containers.h"
#include "pax/nn/convolutions.h"
#include "pax/nn/dropout.h"
#include "pax/nn/linears.h"
#include "pax/nn/models/classification.h"
#include "pax/nn/poolings.h"

namespace pax::experiments {
namespace {

constexpr int64_t kClasses = 10;
constexpr int64_t kTrainExamples = 60000;

// Pixel statistics of the Fashion-MNIST training images (in [0, 1]).
constexpr double kPixelMean = 0.2860, kPixelStddev = 0.3530;

std::shared_ptr<data::IdxImageInput::HParams> fashion_mnist_input(const std::string& name, data::ImageSplit split,
                                                                  int64_t batch_size) {
  auto p = std::make_shared<data::IdxImageInput::HParams>();
  p->name = name;
  p->split = split;
  p->batch_size = batch_size;
  p->pixel_mean = kPixelMean;
  p->pixel_stddev = kPixelStddev;
  if (split == data::ImageSplit::train) {
    p->shuffle = true;
    p->repeat = true;
  } else {
    p->repeat = false;
    p->reset_for_eval = true;  // every evaluation reads the whole test set once
  }
  return p;
}

HParamsPtr feed_forward(int64_t in, int64_t out, bool relu) {
  auto ff = nn::tpl<nn::FeedForward>();
  ff->input_dims = in;
  ff->output_dims = out;
  if (!relu) ff->activation_tpl = nn::tpl<nn::Identity>();
  return ff;
}

HParamsPtr conv(int64_t in, int64_t out) {
  auto conv = nn::tpl<nn::Conv2D>();
  conv->filter_shape = {3, 3, in, out};
  conv->bias = true;
  return conv;
}

HParamsPtr dropout(double keep_prob) {
  auto d = nn::tpl<nn::Dropout>();
  d->keep_prob = keep_prob;
  return d;
}

HParamsPtr classifier(std::vector<HParamsPtr> layers) {
  auto network = nn::tpl<nn::Sequential>();
  network->layers = std::move(layers);
  auto model = nn::tpl<nn::ClassificationModel>();
  model->network_tpl = network;
  model->num_classes = kClasses;
  return model;
}

Task classifier_task(HParamsPtr model, int64_t batch_size, int64_t epochs, double learning_rate) {
  const int64_t steps = epochs * kTrainExamples / batch_size;
  Task t;
  t.model = std::move(model);
  t.learner->optimizer = adam_with_rampup(learning_rate, /*warmup_steps=*/100, steps, 0.05);
  t.train->num_train_steps = steps;
  t.train->save_interval_steps = steps / epochs;  // once per epoch
  t.train->summary_interval_steps = 100;
  t.train->eval_interval_steps = steps / epochs;
  return t;
}

Datasets classifier_datasets(int64_t batch_size) {
  Datasets d;
  d.train = fashion_mnist_input("train", data::ImageSplit::train, batch_size);
  d.eval = {fashion_mnist_input("test", data::ImageSplit::test, 1000)};
  return d;
}

constexpr int64_t kBatch = 128;

class FashionMnistMlp : public BaseExperiment {
 public:
  Task task() const override {
    return classifier_task(classifier({nn::tpl<nn::Flatten>(), feed_forward(28 * 28, 512, true),
                                       feed_forward(512, 512, true), feed_forward(512, kClasses, false)}),
                           kBatch, /*epochs=*/8, 1e-3);
  }
  Datasets datasets() const override { return classifier_datasets(kBatch); }
  std::string description() const override { return "MLP 784-512-512-10 on Fashion-MNIST (>= 88% test accuracy)"; }
};

class FashionMnistCnn : public BaseExperiment {
 public:
  Task task() const override {
    return classifier_task(classifier({conv(1, 32), nn::tpl<nn::ReLU>(), nn::tpl<nn::MaxPool>(),   // 14x14x32
                                       conv(32, 64), nn::tpl<nn::ReLU>(), nn::tpl<nn::MaxPool>(),  // 7x7x64
                                       nn::tpl<nn::Flatten>(), dropout(0.75), feed_forward(7 * 7 * 64, 256, true),
                                       dropout(0.6), feed_forward(256, kClasses, false)}),
                           kBatch, /*epochs=*/8, 1e-3);
  }
  Datasets datasets() const override { return classifier_datasets(kBatch); }
  std::string description() const override {
    return "CNN (two 3x3 conv + max pool, dropout, dense 256) on Fashion-MNIST (>= 91% test accuracy)";
  }
};

}  // namespace

PAX_REGISTER_EXPERIMENT("vision.FashionMnistMlp", FashionMnistMlp);
PAX_REGISTER_EXPERIMENT("vision.FashionMnistCnn", FashionMnistCnn);

}  // namespace pax::experiments

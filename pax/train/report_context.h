// What report.html shows besides the metrics' charts: the run's machine and
// build, its configuration, the model's parameter table and its latest
// decoded samples. The runner fills it once (pax/experiments/runner.cc);
// the page reads the samples file anew at every regeneration.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pax::train {

// One row of the parameter table.
struct ReportParameter {
  std::string name;      // tree path, "lm/transformer/x_layers_0/ff_layer/ffn_layer1/linear/w"
  std::string shape;     // the whole array's, "(64, 256)"
  std::string dtype;     // "f32"
  int64_t count = 0;     // elements
  std::string sharding;  // "replicated", "dim 1 in 4 blocks over data", ...
};

struct ReportContext {
  // (what, value) rows: CPU, ISA, threads, devices, peak and how it was derived, version.
  std::vector<std::pair<std::string, std::string>> machine;
  std::string config_json;  // the resolved configuration (config.json's text), shown collapsed
  std::vector<ReportParameter> parameters;
  // A directory of samples_step_<N>.txt files (the runner's decode/): the
  // page shows the file of the highest step. Empty: no samples section.
  std::string decode_dir;
};

}  // namespace pax::train

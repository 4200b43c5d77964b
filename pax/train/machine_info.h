// The machine and build a run used, as (what, value) rows for report.html:
// host, CPU (model, architecture, cores), the instruction sets the kernels
// run, kernel threads, the devices and the default one, and the paxcc build.
// The peak that MFU is taken against is the runner's to add (it knows how it
// derived the figure).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pax::train {

std::vector<std::pair<std::string, std::string>> machine_rows();

}  // namespace pax::train

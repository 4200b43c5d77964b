// Ranks agree before they work: under mpirun every process may have been
// started with its own flags (`mpirun -np 1 paxcc ... : -np 1 paxcc ...`),
// and ranks with different learning rates, batches or meshes would train
// apart without a word.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace pax::experiments {

// Every process compares its resolved config (JSON) and `extra` settings
// that are not in it (flags such as --mode) with every other process's; any
// difference throws, on every process, one pax::Error listing the differing
// fields with each process's value. One process: nothing to compare.
void check_ranks_agree(const std::string& config_json, const std::map<std::string, std::string>& extra);

// The fields in which the processes' settings differ, one line per field
// ("learner.optimizer.learning_rate: 0.003 on process 0, 0.3 on process 1"),
// at most `max_fields` of them; `per_process` holds each process's config
// JSON and extra settings as check_ranks_agree gathers them. Empty when they agree.
std::string describe_rank_differences(const std::vector<std::string>& per_process, size_t max_fields = 8);

}  // namespace pax::experiments

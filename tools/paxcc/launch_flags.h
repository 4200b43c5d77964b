// Pax launch flags that do not apply to paxcc: paxml's main.py takes flags
// for JAX, XLA and TPUs (--pmap_use_tensorstore=True, --jax_*, --xla_*,
// --tpu_*), and a user's launch scripts carry them. paxcc accepts them and
// says once that it ignores them, instead of refusing the whole command.
//
//   std::vector<std::string> ignored = drop_foreign_launch_flags(args);
//   // args without them; ignored: "--pmap_use_tensorstore", ...
#pragma once

#include <string>
#include <vector>

namespace paxcc {

// Removes from `args` (argv without argv[0]) the flags that paxml, JAX, XLA
// or TPUs take and paxcc does not: --NAME, --noNAME and --NAME=VALUE of the
// names paxml's main.py defines for them and of the prefixes jax_, xla_ and
// tpu_ (--jax_default_matmul_precision, which paxcc honours, stays). Returns
// the flags removed, as given up to any '='. Arguments after "--" and those
// of a subcommand's own options are not flags of this kind.
std::vector<std::string> drop_foreign_launch_flags(std::vector<std::string>& args);

// "paxcc: warning: ignoring launch flags that do not apply to paxcc: ..."
// (empty when none were given).
std::string foreign_flags_warning(const std::vector<std::string>& ignored);

}  // namespace paxcc

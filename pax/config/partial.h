// Partial configs (Fiddle's fdl.Partial, the seed's
// `Linear.HParams.partial(input_dims=1)`): an HParams tree whose fields may
// be left missing until a later call fills them. The marks live on each
// object (BaseHParams::missing_fields), so copies, shared templates and
// JSON keep them; everything that builds from a config (nn::build_layer,
// data::build_input, a run) first calls check_complete, which names every
// field still missing, with its path and type, in one error.
#pragma once

#include <string>
#include <vector>

#include "pax/config/hparams.h"

namespace pax {

// "path (type)" of every field left missing under `root`, in tree order
// (a shared template's fields once, under its first path).
std::vector<std::string> missing_fields(const HParamsPtr& root);

// Throws pax::Error naming every missing field under `root`; `what` says
// who is building it ("build_layer").
void check_complete(const HParamsPtr& root, const std::string& what);

namespace config_detail {

// Marks field `f` of `h` missing (`path` names it in errors). Any field but a
// nested struct or a list of templates (mark their fields instead) may be
// missing; a missing template holds None until it is set.
void mark_field_missing(BaseHParams& h, const FieldRef& f, const std::string& path);

}  // namespace config_detail
}  // namespace pax

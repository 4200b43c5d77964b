// Partial configs: listing and checking the fields left missing.
#include "pax/config/partial.h"

#include "pax/config/walk.h"
#include "pax/core/error.h"

namespace pax {

std::vector<std::string> missing_fields(const HParamsPtr& root) {
  std::vector<std::string> out;
  const config_detail::TemplatePaths reach = config_detail::template_paths(root);
  for (BaseHParams* h : reach.order) {
    config_detail::for_each_field(*h, reach.paths.at(h).front(),
                                  [&](BaseHParams& owner, const FieldRef& f, const std::string& sub) {
                                    if (owner.is_missing(f.name))
                                      out.push_back(sub + " (" + config_detail::describe_kind(f) + ")");
                                  });
  }
  return out;
}

void check_complete(const HParamsPtr& root, const std::string& what) {
  const std::vector<std::string> missing = missing_fields(root);
  if (missing.empty()) return;
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  PAX_FAIL(what, ": the ", root->type_name(), " config is partial: ", missing.size(),
           missing.size() == 1 ? " field is" : " fields are", " missing: ", list,
           "; set them first (Config::set, Config::complete, or --set path=value)");
}

namespace config_detail {

void mark_field_missing(BaseHParams& h, const FieldRef& f, const std::string& path) {
  PAX_CHECK(f.kind != FieldKind::nested && f.kind != FieldKind::hparams_list, "config: '", path, "' (", f.name, " of ",
            h.type_name(), ") is ", describe_kind(f),
            "; only single fields can be missing, so mark its fields instead");
  if (f.kind == FieldKind::hparams) static_cast<HParamsPtr*>(f.ptr)->reset();
  h.set_missing(f.name, true);
}

}  // namespace config_detail
}  // namespace pax

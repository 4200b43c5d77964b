// Walking an HParams tree by path (see walk.h).
#include "pax/config/walk.h"

namespace pax::config_detail {

const char* describe_kind(const FieldRef& f) {
  switch (f.kind) {
    case FieldKind::boolean: return "a bool (true or false)";
    case FieldKind::integer: return f.int_bytes == 4 ? "an integer from -2147483648 to 2147483647" : "an integer";
    case FieldKind::real: return "a number";
    case FieldKind::string: return "a string";
    case FieldKind::dtype: return "a dtype (float32, bfloat16, int32, ...)";
    case FieldKind::integers: return "a list of integers like [1, 2]";
    case FieldKind::reals: return "a list of numbers like [0.5, 1]";
    case FieldKind::strings: return "a list of strings like [a, b]";
    case FieldKind::optional_integer: return "an integer or None";
    case FieldKind::optional_real: return "a number or None";
    case FieldKind::enumeration: return "an enum value";
    case FieldKind::nested: return "a nested config (set its fields)";
    case FieldKind::hparams: return "a config template (a registered type name, None, or @path of a template to share)";
    case FieldKind::hparams_list: return "a list of config templates";
  }
  return "?";
}

std::string join_path(const std::string& path, const std::string& field) {
  return path.empty() ? field : path + "." + field;
}

void for_each_field(BaseHParams& h, const std::string& path, const FieldFn& f) {
  h.visit_fields([&](const FieldRef& field) {
    const std::string sub = join_path(path, field.name);
    f(h, field, sub);
    if (field.kind == FieldKind::nested) for_each_field(*static_cast<BaseHParams*>(field.ptr), sub, f);
  });
}

void for_each_slot(BaseHParams& h, const std::string& path, const SlotFn& f) {
  for_each_field(h, path, [&](BaseHParams&, const FieldRef& field, const std::string& sub) {
    if (field.kind == FieldKind::hparams) {
      f(*static_cast<HParamsPtr*>(field.ptr), sub);
    } else if (field.kind == FieldKind::hparams_list) {
      auto& list = *static_cast<std::vector<HParamsPtr>*>(field.ptr);
      for (size_t i = 0; i < list.size(); ++i) f(list[i], sub + "[" + std::to_string(i) + "]");
    }
  });
}

namespace {

void reach(BaseHParams& h, const std::string& path, TemplatePaths& out) {
  std::vector<std::string>& paths = out.paths[&h];
  paths.push_back(path);
  if (paths.size() > 1) return;
  out.order.push_back(&h);
  for_each_slot(h, path, [&](HParamsPtr& slot, const std::string& sub) {
    if (slot) reach(*slot, sub, out);
  });
}

}  // namespace

TemplatePaths template_paths(const HParamsPtr& root) {
  TemplatePaths out;
  if (root) reach(*root, "", out);
  return out;
}

}  // namespace pax::config_detail

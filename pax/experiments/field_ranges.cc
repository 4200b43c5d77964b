// The numeric fields of a config with their declared ranges, and the check (field_ranges.h).
#include "pax/experiments/field_ranges.h"

#include "pax/core/error.h"

namespace pax::experiments {
namespace {

void collect(const BaseHParams& hp, const std::string& prefix, std::vector<NumericField>& out) {
  hp.visit_fields([&](const FieldRef& f) {
    const std::string path = prefix.empty() ? f.name : prefix + "." + f.name;
    NumericField field{path, f.name, hp.type_name(), {}, f.range};
    switch (f.kind) {
      case FieldKind::integer:
        field.values.push_back(f.int_bytes == 4 ? double(*static_cast<int*>(f.ptr))
                                                : double(*static_cast<int64_t*>(f.ptr)));
        break;
      case FieldKind::real:
        field.values.push_back(f.real_bytes == 4 ? double(*static_cast<float*>(f.ptr)) : *static_cast<double*>(f.ptr));
        break;
      case FieldKind::integers:
        for (int64_t v : *static_cast<std::vector<int64_t>*>(f.ptr)) field.values.push_back(double(v));
        break;
      case FieldKind::reals: field.values = *static_cast<std::vector<double>*>(f.ptr); break;
      case FieldKind::optional_integer:
        if (const auto& v = *static_cast<std::optional<int64_t>*>(f.ptr)) field.values.push_back(double(*v));
        break;
      case FieldKind::optional_real:
        if (const auto& v = *static_cast<std::optional<double>*>(f.ptr)) field.values.push_back(*v);
        break;
      case FieldKind::nested: collect(*static_cast<BaseHParams*>(f.ptr), path, out); return;
      case FieldKind::hparams:
        if (const HParamsPtr& p = *static_cast<HParamsPtr*>(f.ptr)) collect(*p, path, out);
        return;
      case FieldKind::hparams_list: {
        const auto& list = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
        for (size_t i = 0; i < list.size(); ++i)
          if (list[i]) collect(*list[i], path + "[" + std::to_string(i) + "]", out);
        return;
      }
      default: return;  // booleans, strings, dtypes, enumerations
    }
    out.push_back(std::move(field));
  });
}

}  // namespace

std::vector<NumericField> numeric_fields(const Config& config) {
  std::vector<NumericField> out;
  if (config.defined()) collect(*config.root(), "", out);
  return out;
}

void check_field_ranges(const Config& config) {
  for (const NumericField& f : numeric_fields(config)) {
    if (!f.range) continue;
    for (double v : f.values)
      PAX_CHECK(f.range->contains(v), f.path, " = ", number_text(v), " is out of range: it must be ", f.range->str());
  }
}

}  // namespace pax::experiments

// EarlyStopping: the update rule and the tree form for checkpoints.
#include "pax/train/early_stopping.h"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "pax/core/error.h"

namespace pax::train {

namespace {

void check_settings(const EarlyStopping& s, const char* fn) {
  PAX_CHECK(s.min_delta >= 0, fn, ": min_delta must be >= 0, got ", s.min_delta);
  PAX_CHECK(s.patience >= 0, fn, ": patience must be >= 0, got ", s.patience);
  PAX_CHECK(s.patience_count >= 0, fn, ": patience_count must be >= 0, got ", s.patience_count);
}

// The scalar at tree[key], read back as double.
double scalar_at(const Tree& tree, const char* key) {
  PAX_CHECK(tree.contains(key), "EarlyStopping::from_tree: missing key '", key, "' in ", tree.str());
  const Tree& t = tree[key];
  PAX_CHECK(t.is_leaf() && t.leaf().size() == 1, "EarlyStopping::from_tree: '", key, "' must be a scalar array, got ",
            t.str());
  return t.leaf().item<double>();
}

int64_t integer_at(const Tree& tree, const char* key) {
  double v = scalar_at(tree, key);
  PAX_CHECK(std::isfinite(v) && v == std::floor(v), "EarlyStopping::from_tree: '", key, "' must be an integer, got ",
            v);
  return int64_t(v);
}

}  // namespace

EarlyStopping EarlyStopping::update(double metric) const {
  check_settings(*this, "EarlyStopping::update");
  EarlyStopping next = *this;
  bool nothing_seen = best_metric == std::numeric_limits<double>::infinity();
  if (!std::isnan(metric) && (nothing_seen || best_metric - metric > min_delta)) {
    next.best_metric = metric;
    next.patience_count = 0;
    next.has_improved = true;
  } else {
    next.should_stop = patience_count >= patience || should_stop;
    next.patience_count = patience_count + 1;
    next.has_improved = false;
  }
  return next;
}

EarlyStopping EarlyStopping::reset() const {
  EarlyStopping next;
  next.min_delta = min_delta;
  next.patience = patience;
  return next;
}

Tree EarlyStopping::to_tree() const {
  return Tree::dict({{"min_delta", scalar<double>(min_delta)},
                     {"patience", scalar<int64_t>(patience)},
                     {"best_metric", scalar<double>(best_metric)},
                     {"patience_count", scalar<int64_t>(patience_count)},
                     {"should_stop", scalar<bool>(should_stop)},
                     {"has_improved", scalar<bool>(has_improved)}});
}

EarlyStopping EarlyStopping::from_tree(const Tree& tree) {
  PAX_CHECK(tree.is_dict(), "EarlyStopping::from_tree: expected a dict of scalars, got ", tree.str());
  EarlyStopping s;
  s.min_delta = scalar_at(tree, "min_delta");
  s.patience = integer_at(tree, "patience");
  s.best_metric = scalar_at(tree, "best_metric");
  s.patience_count = integer_at(tree, "patience_count");
  s.should_stop = scalar_at(tree, "should_stop") != 0;
  s.has_improved = scalar_at(tree, "has_improved") != 0;
  check_settings(s, "EarlyStopping::from_tree");
  return s;
}

namespace {

// best_metric in JSON: a number, or "inf" / "-inf" / "nan", which JSON
// numbers cannot hold. null (how +inf was written before) reads as +inf.
nlohmann::json metric_to_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

double metric_from_json(const nlohmann::json& j) {
  if (j.is_null()) return INFINITY;
  if (j.is_number()) return j.get<double>();
  const std::string s = j.is_string() ? j.get<std::string>() : j.dump();
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  if (s == "nan") return NAN;
  PAX_FAIL("EarlyStopping::restore_json: best_metric must be a number, \"inf\", \"-inf\", \"nan\" or null, got ",
           j.dump());
}

}  // namespace

std::string EarlyStopping::to_json() const {
  nlohmann::json j = {{"best_metric", metric_to_json(best_metric)},
                      {"patience_count", patience_count},
                      {"should_stop", should_stop},
                      {"has_improved", has_improved}};
  return j.dump();
}

EarlyStopping EarlyStopping::restore_json(const std::string& text) const {
  EarlyStopping e = *this;
  nlohmann::json best;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    best = j.at("best_metric");
    e.patience_count = j.at("patience_count").get<int64_t>();
    e.should_stop = j.at("should_stop").get<bool>();
    e.has_improved = j.at("has_improved").get<bool>();
  } catch (const nlohmann::json::exception& err) {
    PAX_FAIL("EarlyStopping::restore_json: not an early-stopping state: ", err.what());
  }
  e.best_metric = metric_from_json(best);
  check_settings(e, "EarlyStopping::restore_json");
  return e;
}

}  // namespace pax::train

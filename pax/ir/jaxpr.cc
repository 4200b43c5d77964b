// Jaxpr printing, type checking, evaluation and closure conversion.
#include "pax/ir/jaxpr.h"

#include <ostream>
#include <sstream>

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {

std::vector<AVal> Jaxpr::in_avals() const {
  std::vector<AVal> out;
  for (Var v : invars) out.push_back(aval(v));
  return out;
}

std::vector<AVal> Jaxpr::out_avals() const {
  std::vector<AVal> out;
  for (Var v : outvars) out.push_back(aval(v));
  return out;
}

namespace {

// a, b, ..., z, ba, bb, ... as JAX names variables.
std::string var_name(Var v) {
  std::string s;
  int64_t n = v;
  do {
    s.insert(s.begin(), char('a' + n % 26));
    n /= 26;
  } while (n > 0);
  return s;
}

std::string indent(const std::string& text, size_t spaces) {
  std::string out;
  std::string pad(spaces, ' ');
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start + 1);
    out += (start ? pad : "") + line;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

}  // namespace

std::string Jaxpr::str() const {
  std::ostringstream os;
  auto decl = [&](Var v) { return var_name(v) + ":" + aval(v).str(); };
  os << "{ lambda ";
  for (size_t i = 0; i < constvars.size(); ++i) os << (i ? " " : "") << decl(constvars[i]);
  os << "; ";
  for (size_t i = 0; i < invars.size(); ++i) os << (i ? " " : "") << decl(invars[i]);
  os << ". let\n";
  for (const Eqn& e : eqns) {
    os << "    ";
    for (size_t i = 0; i < e.outputs.size(); ++i) os << (i ? " " : "") << decl(e.outputs[i]);
    os << " = " << prim_name(e.prim);
    if (!e.params.empty()) os << "[" << indent(e.params.str(), 6) << "]";
    for (Var in : e.inputs) os << " " << var_name(in);
    os << "\n";
  }
  os << "  in (";
  for (size_t i = 0; i < outvars.size(); ++i) os << (i ? ", " : "") << var_name(outvars[i]);
  if (outvars.size() == 1) os << ",";
  os << ") }";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Jaxpr& j) { return os << j.str(); }

void typecheck(const Jaxpr& j) {
  std::vector<bool> defined(j.avals.size(), false);
  auto define = [&](Var v, const char* what) {
    PAX_CHECK(v >= 0 && size_t(v) < j.avals.size(), "typecheck: ", what, " variable ", v, " does not exist");
    PAX_CHECK(!defined[size_t(v)], "typecheck: variable ", var_name(v), " is defined twice");
    defined[size_t(v)] = true;
  };
  PAX_CHECK(j.consts.size() == j.constvars.size(), "typecheck: ", j.constvars.size(), " constvars but ",
            j.consts.size(), " consts");
  for (size_t i = 0; i < j.constvars.size(); ++i) {
    define(j.constvars[i], "const");
    PAX_CHECK(
        j.consts[i].aval().shape == j.aval(j.constvars[i]).shape && j.consts[i].dtype() == j.aval(j.constvars[i]).dtype,
        "typecheck: const ", var_name(j.constvars[i]), " is ", j.consts[i].aval().str(), " but declared ",
        j.aval(j.constvars[i]).str());
  }
  for (Var v : j.invars) define(v, "input");
  for (size_t k = 0; k < j.eqns.size(); ++k) {
    const Eqn& e = j.eqns[k];
    std::vector<AVal> in;
    for (Var v : e.inputs) {
      PAX_CHECK(v >= 0 && size_t(v) < j.avals.size() && defined[size_t(v)], "typecheck: equation ", k, " (",
                prim_name(e.prim), ") uses variable ", v >= 0 ? var_name(v) : std::to_string(v),
                " before it is defined");
      in.push_back(j.aval(v));
    }
    std::vector<AVal> out = infer_avals(e.prim, in, e.params);
    PAX_CHECK(out.size() == e.outputs.size(), "typecheck: equation ", k, " (", prim_name(e.prim), ") has ",
              e.outputs.size(), " outputs but the primitive gives ", out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const AVal& declared = j.aval(e.outputs[i]);
      PAX_CHECK(out[i].shape == declared.shape && out[i].dtype == declared.dtype, "typecheck: equation ", k, " (",
                prim_name(e.prim), ") output ", var_name(e.outputs[i]), " is declared ", declared.str(),
                " but the shape rule gives ", out[i].str());
      define(e.outputs[i], "output");
    }
  }
  for (Var v : j.outvars) {
    PAX_CHECK(v >= 0 && size_t(v) < j.avals.size() && defined[size_t(v)], "typecheck: output variable ", v,
              " is never defined");
  }
}

std::vector<Array> eval_jaxpr(const Jaxpr& j, std::span<const Array> args) {
  PAX_CHECK(args.size() == j.invars.size(), "eval_jaxpr: the jaxpr takes ", j.invars.size(), " arguments, got ",
            args.size());
  std::vector<Array> env(j.avals.size());
  for (size_t i = 0; i < j.constvars.size(); ++i) env[size_t(j.constvars[i])] = j.consts[i];
  for (size_t i = 0; i < args.size(); ++i) env[size_t(j.invars[i])] = args[i];
  std::vector<Array> inputs;
  for (const Eqn& e : j.eqns) {
    inputs.clear();
    for (Var v : e.inputs) inputs.push_back(env[size_t(v)]);
    std::vector<Array> out = bind(e.prim, inputs, e.params);
    for (size_t i = 0; i < out.size(); ++i) env[size_t(e.outputs[i])] = std::move(out[i]);
  }
  std::vector<Array> out;
  for (Var v : j.outvars) out.push_back(env[size_t(v)]);
  return out;
}

std::shared_ptr<Jaxpr> convert_constvars(const Jaxpr& j) {
  auto out = std::make_shared<Jaxpr>(j);
  std::vector<Var> invars = j.constvars;
  invars.insert(invars.end(), j.invars.begin(), j.invars.end());
  out->invars = std::move(invars);
  out->constvars.clear();
  out->consts.clear();
  return out;
}

}  // namespace pax

// The type-erased cores of the transforms: functions of lists of Trees. The
// templates in pax/api/transforms.h adapt user functions to these.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pax/ir/executable.h"
#include "pax/core/tree.h"
#include "pax/interp/trace.h"
#include "pax/ir/jaxpr.h"

namespace pax::detail {

// A user function seen as a function of its traced (tree) arguments.
using TreeFn = std::function<Tree(const std::vector<Tree>&)>;

// All leaves of `trees` in order, and each tree's structure.
std::vector<Array> flatten_trees(const std::vector<Tree>& trees, std::vector<TreeDef>* defs);
std::vector<Tree> unflatten_trees(const std::vector<TreeDef>& defs, std::span<const Array> leaves);

// `f` over flat leaves for arguments of the given structures; each call
// records the structure of the result in *out_def.
FlatFn flatten_fn(TreeFn f, std::vector<TreeDef> in_defs, std::shared_ptr<TreeDef> out_def);

struct GradResult {
  Tree value;
  Tree aux;
  std::vector<Tree> grads;  // one per differentiated argument
};
// f returns a scalar float Array, or (with has_aux) a list [scalar, aux].
GradResult value_and_grad_trees(const TreeFn& f, const std::vector<Tree>& args, bool has_aux);

struct VjpTrees {
  Tree out;
  std::function<std::vector<Tree>(const Tree& cotangent)> backward;
};
VjpTrees vjp_trees(const TreeFn& f, const std::vector<Tree>& primals);

std::pair<Tree, Tree> jvp_trees(const TreeFn& f, const std::vector<Tree>& primals, const std::vector<Tree>& tangents);

// in_axes: one entry per argument (nullopt: not mapped) or a single entry for all.
Tree vmap_trees(const TreeFn& f, const std::vector<Tree>& args, const std::vector<std::optional<int64_t>>& in_axes,
                const std::vector<std::optional<int64_t>>& out_axes, const std::string& axis_name);

std::shared_ptr<Jaxpr> make_jaxpr_trees(const TreeFn& f, const std::vector<Tree>& args);
// The output of f with abstract leaves (shapes and dtypes only).
Tree eval_shape_trees(const TreeFn& f, const std::vector<Tree>& args);
// An abstract Array of that shape and dtype, like eval_shape's results
// (printed as ShapeDtypeStruct; any operation on it is an error).
Array shape_dtype_array(const AVal& aval);

// ---------------------------------------------------------------------------
// jit

// A static (non-traced) argument value, part of jit's cache key.
class StaticValue {
 public:
  virtual ~StaticValue() = default;
  virtual size_t hash() const = 0;
  virtual bool equals(const StaticValue& other) const = 0;
};

template <class T>
class StaticValueOf : public StaticValue {
 public:
  explicit StaticValueOf(const T& v) : value_(v) {}
  size_t hash() const override { return std::hash<T>{}(value_); }
  bool equals(const StaticValue& other) const override {
    auto* o = dynamic_cast<const StaticValueOf<T>*>(&other);
    return o && o->value_ == value_;
  }

 private:
  T value_;
};

struct JitKey {
  Device device;  // where it runs: its committed arguments' device, else the default
  std::vector<std::shared_ptr<const StaticValue>> statics;
  std::vector<TreeDef> in_defs;
  std::vector<AVal> avals;
  bool operator==(const JitKey& other) const;
  size_t hash() const;
  std::string str() const;  // the argument signature, for errors
};

struct JitEntry {
  Device device;  // traced and compiled for it
  std::shared_ptr<Program> program;
  std::vector<Array> consts;  // leading inputs of the program
  TreeDef out_def;
};

class JitCache {
 public:
  // The entry for `key`, or nullptr on a miss.
  std::shared_ptr<const JitEntry> find(const JitKey& key) const;
  // Traces and compiles `tree_fn` for `key` (after a miss). Entries whose
  // constants are tracers of an enclosing transformation are not kept.
  std::shared_ptr<const JitEntry> trace(const JitKey& key, const TreeFn& tree_fn, const std::string& name,
                                        const std::vector<bool>& donate_leaf);
  size_t num_traces() const { return num_traces_; }
  size_t size() const;

 private:
  struct Hash {
    size_t operator()(const JitKey& k) const { return k.hash(); }
  };
  mutable std::mutex mu_;
  std::unordered_map<JitKey, std::shared_ptr<const JitEntry>, Hash> entries_;
  size_t num_traces_ = 0;
};

// The device a jitted call runs on (see place_operands), its uncommitted
// leaves brought there.
Device jit_device(std::vector<Array>& leaves, const std::string& name);

// Runs a traced entry on the argument leaves: executes it when everything is
// concrete, or binds a jit_call equation under an enclosing transformation.
std::vector<Array> run_jit_entry(const JitEntry& entry, std::vector<Array> leaves);

}  // namespace pax::detail

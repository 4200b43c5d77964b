// BaseInput: validation of the common fields, the eval-run table, the input
// registry and build_input.
#include "pax/data/base_input.h"

#include <map>
#include <mutex>

#include "pax/core/buffer.h"
#include "pax/data/prefetch.h"

namespace pax::data {
namespace {

struct InputEntry {
  InputFactory factory;
};

std::map<std::string, InputEntry>& input_registry() {
  static std::map<std::string, InputEntry> r;
  return r;
}

std::mutex& input_registry_mutex() {
  static std::mutex m;
  return m;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

BaseInput::BaseInput(const HParams& hparams) : hparams_(std::static_pointer_cast<const HParams>(hparams.clone())) {
  const HParams& p = *hparams_;
  const std::string who = description();
  PAX_CHECK(p.batch_size >= 1, who, ": batch_size must be >= 1, got ", p.batch_size);
  PAX_CHECK(p.num_infeed_hosts >= 1, who, ": num_infeed_hosts must be >= 1, got ", p.num_infeed_hosts);
  PAX_CHECK(p.infeed_host_index >= 0 && p.infeed_host_index < p.num_infeed_hosts, who,
            ": infeed_host_index must be in [0, num_infeed_hosts = ", p.num_infeed_hosts, "), got ",
            p.infeed_host_index);
  PAX_CHECK(!p.eval_loop_num_batches || *p.eval_loop_num_batches >= 1, who,
            ": eval_loop_num_batches must be >= 1 or None, got ", *p.eval_loop_num_batches);
  PAX_CHECK(p.prefetch_batches >= 0, who, ": prefetch_batches must be >= 0, got ", p.prefetch_batches);
}

std::string BaseInput::description() const {
  std::string out = type_name();
  if (!hparams_->name.empty()) out += " '" + hparams_->name + "'";
  return out;
}

const std::vector<std::string>& BaseInput::targets() const {
  static const std::vector<std::string> none;
  return none;
}

std::vector<int32_t> BaseInput::text_to_ids(const std::string& text) const { return {text.begin(), text.end()}; }

std::vector<std::string> BaseInput::ids_to_strings(const Array& ids, const Array& lengths) const {
  PAX_FAIL(description(), ": ids_to_strings needs an input with a tokenizer (e.g. TextLmInput)");
}

namespace {

std::string input_name(const BaseInput::HParams& p) {
  return p.type_name() + (p.name.empty() ? "" : " '" + p.name + "'");
}

}  // namespace

std::optional<int64_t> eval_run_batches(const BaseInput::HParams& p) {
  const std::string who = input_name(p);
  if (p.reset_for_eval) {
    // eval_loop_num_batches is ignored here, as Pax ignores it (eval_table_warning).
    PAX_CHECK(!p.repeat, who,
              ": reset_for_eval = true reads one epoch per eval run, so the input must be finite "
              "(Pax's eval table): set repeat = false");
    return std::nullopt;
  }
  PAX_CHECK(p.eval_loop_num_batches, who,
            ": reset_for_eval = false with eval_loop_num_batches None is not "
            "supported (Pax's eval table): set eval_loop_num_batches = N to read the next N batches per run "
            "(with repeat = true), or reset_for_eval = true and repeat = false to read one epoch per run");
  PAX_CHECK(p.repeat, who, ": reset_for_eval = false reads the next ", *p.eval_loop_num_batches,
            " batches per eval run on a rolling basis, so the input must repeat indefinitely (Pax's eval table): "
            "set repeat = true, or reset_for_eval = true with eval_loop_num_batches = None to read one epoch per run");
  return *p.eval_loop_num_batches;
}

std::string eval_table_warning(const BaseInput::HParams& p) {
  if (!p.reset_for_eval || !p.eval_loop_num_batches) return "";
  return input_name(p) + ": reset_for_eval = true reads one whole epoch per eval run; eval_loop_num_batches = " +
         std::to_string(*p.eval_loop_num_batches) +
         " is ignored, as Pax ignores it (set it to None, or reset_for_eval = false and repeat = true to read N new "
         "batches per run)";
}

std::optional<Tree> BaseInput::reshard_state(const Tree&) const { return std::nullopt; }

int64_t for_each_eval_batch(BaseInput& input, const std::function<void(const Tree&)>& fn) {
  const std::optional<int64_t> limit = eval_run_batches(input.base_hparams());
  int64_t count = 0;
  while (!limit || count < *limit) {
    Tree batch;
    try {
      batch = input.get_next();
    } catch (const OutOfRange&) {
      break;
    }
    fn(batch);
    ++count;
  }
  if (input.base_hparams().reset_for_eval) input.reset();
  return count;
}

// ---------------------------------------------------------------------------
// Registry.

void register_input(const std::string& type_name, InputFactory factory, HParamsFactory hparams) {
  {
    std::lock_guard<std::mutex> lock(input_registry_mutex());
    input_registry()[type_name] = InputEntry{factory};
  }
  register_hparams(type_name, hparams, "input");
}

std::vector<std::string> registered_inputs() {
  std::lock_guard<std::mutex> lock(input_registry_mutex());
  std::vector<std::string> out;
  for (const auto& [name, e] : input_registry()) out.push_back(name);
  return out;
}

namespace detail {
void check_input_hparams(const HParamsPtr& hparams, const char* expected, bool matches) {
  PAX_CHECK(matches, "build_input: expected a ", expected, " config, got ", hparams->type_name());
}
}  // namespace detail

std::unique_ptr<BaseInput> build_input(const HParamsPtr& hparams) {
  PAX_CHECK(hparams, "build_input: the input config is None");
  check_complete(hparams, "build_input");
  InputFactory factory = nullptr;
  {
    std::lock_guard<std::mutex> lock(input_registry_mutex());
    auto it = input_registry().find(hparams->type_name());
    if (it != input_registry().end()) factory = it->second.factory;
  }
  if (!factory) {
    const std::vector<std::string> names = registered_inputs();
    PAX_FAIL("build_input: ", hparams->type_name(), " is not a registered input; ",
             did_you_mean(hparams->type_name(), names), "registered inputs: ", join(names));
  }
  // Inputs read and prepare their data here: an allocation that fails names it.
  const auto* base = dynamic_cast<const BaseInput::HParams*>(hparams.get());
  const AllocationPurpose purpose("building the input '" + (base ? base->name : std::string()) + "' (" +
                                  hparams->type_name() + ")");
  std::unique_ptr<BaseInput> input = factory(hparams);
  const int64_t prefetch = input->base_hparams().prefetch_batches;
  if (prefetch > 0) return std::make_unique<PrefetchInput>(std::move(input), prefetch);
  return input;
}

// ---------------------------------------------------------------------------
// State helpers.

Tree int_state(const std::vector<std::pair<std::string, int64_t>>& values) {
  Tree t = Tree::dict();
  for (const auto& [key, value] : values) t.set(key, scalar<int64_t>(value));
  return t;
}

int64_t state_value(const Tree& state, const std::string& key, const std::string& who) {
  PAX_CHECK(state.is_dict() && state.contains(key), who, ": restore_state: the state has no '", key, "' (got ",
            state.str(), "); was it saved by a different input?");
  const Tree& v = state[key];
  PAX_CHECK(v.is_leaf() && v.leaf().size() == 1 && is_integer(v.leaf().dtype()), who, ": restore_state: '", key,
            "' must be an integer scalar, got ", v.str());
  return v.leaf().item<int64_t>();
}

}  // namespace pax::data

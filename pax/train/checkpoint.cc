// Checkpoint directories: naming and listing, validation of what is saved,
// the atomic write-and-commit protocol, pruning, validated reads, and
// flax's functional API on top.
#include "pax/train/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <utility>

#include "pax/core/error.h"
#include "pax/core/version.h"
#include "pax/core/crc32c.h"
#include "pax/train/fs_util.h"
#include "pax/train/json_check.h"
#include "pax/train/sharded_checkpoint.h"

namespace pax::train {
namespace {

constexpr const char* kTmpPrefix = "tmp_";
constexpr const char* kAsideSuffix = ".old";     // an overwritten checkpoint set aside
constexpr const char* kDeletingSuffix = ".del";  // a checkpoint being deleted
constexpr uint64_t kMaxMetadataBytes = uint64_t(1) << 30;
constexpr uint64_t kMaxJsonItemBytes = uint64_t(1) << 30;
constexpr int kMaxJsonItemDepth = 600;
// Three JSON levels per dict level must stay under the metadata reader's limit.
constexpr int kMaxTreeDepth = 150;

std::string marker_text(const CheckpointStep& step, uint32_t metadata_crc) {
  return "paxcc checkpoint committed\nstep: " + step.str() + "\nmetadata.json crc32c: " + crc32c_hex(metadata_crc) +
         "\n";
}

int tree_depth(const Tree& t) {
  int d = 0;
  if (t.is_list()) {
    for (const Tree& c : t.items()) d = std::max(d, tree_depth(c));
  } else if (t.is_dict()) {
    for (const auto& [k, c] : t.entries()) d = std::max(d, tree_depth(c));
  }
  return d + 1;
}

// Ascending by value: the order of flax's natural sort of the names.
std::vector<CheckpointStep> committed_steps(const std::string& dir, const std::string& prefix) {
  std::vector<CheckpointStep> steps;
  for (const std::string& name : fs::list_dir(dir)) {
    std::optional<CheckpointStep> step = parse_checkpoint_dir_name(name, prefix);
    if (step && is_committed_checkpoint(fs::join(dir, name))) steps.push_back(*step);
  }
  std::stable_sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());  // one step under two spellings
  return steps;
}

std::string steps_str(const std::vector<CheckpointStep>& steps) {
  if (steps.empty()) return "none";
  std::string out;
  for (const CheckpointStep& s : steps) out += (out.empty() ? "" : ", ") + s.str();
  return out;
}

// flax's pruning: with `overwrite`, checkpoints newer than `step` go; then all
// but the newest `keep`, except that walking from the oldest, one is kept
// whenever it is at least keep_every_n_steps past the last one kept.
std::vector<CheckpointStep> flax_steps_to_remove(std::vector<CheckpointStep> steps, const CheckpointStep& step,
                                                 bool overwrite, int64_t keep,
                                                 std::optional<int64_t> keep_every_n_steps) {
  if (!std::binary_search(steps.begin(), steps.end(), step)) {
    steps.insert(std::upper_bound(steps.begin(), steps.end(), step), step);
  }
  std::vector<CheckpointStep> remove;
  if (overwrite) {
    auto newer = std::upper_bound(steps.begin(), steps.end(), step);
    remove.assign(newer, steps.end());
    steps.erase(newer, steps.end());
  }
  if (int64_t(steps.size()) > keep) {
    std::optional<long double> last_kept;
    for (size_t i = 0; i + size_t(keep) < steps.size(); ++i) {
      // flax keeps no step 0 for keep_every_n_steps (its test is `if step_number and ...`).
      const long double value = steps[i].is_integer() ? *steps[i].as_integer() : steps[i].value();
      if (keep_every_n_steps && value != 0 && (!last_kept || value - *last_kept >= *keep_every_n_steps)) {
        last_kept = value;
        continue;
      }
      remove.push_back(steps[i]);
    }
  }
  return remove;
}

// A directory named for another step (a copy of checkpoint_00000010 as
// checkpoint_00000090) would resume at the wrong step: the step in the
// metadata is the truth, and a name that disagrees with it is refused. The
// prefix is the caller's: the step of a name is its longest suffix that reads
// as a step and follows a '_' or '-' ("checkpoint_00000010", "ckpt_1e5",
// "test_0"); a name with no such suffix ("final_v2") is not checked.
void check_name_matches_step(const std::string& path, const CheckpointStep& step, const std::string& metadata_path) {
  const std::string name = fs::basename(path);
  std::optional<CheckpointStep> named;
  size_t at = name.size();
  for (size_t i = name.size(); i-- > 0;) {
    if (std::optional<CheckpointStep> s = parse_checkpoint_step(std::string_view(name).substr(i))) {
      named = s;
      at = i;
    }
  }
  if (!named || at == 0 || (name[at - 1] != '_' && name[at - 1] != '-') || *named == step) return;
  PAX_FAIL("restore: the checkpoint directory '", path, "' is named for step ", *named, " but its ", metadata_path,
           " (and commit marker) say step ", step,
           "; a checkpoint directory keeps the name it was saved under (rename it back to ",
           name.substr(0, at) + checkpoint_dir_name("", step), ")");
}

// A checkpoint directory's metadata.json, validated and checked against the marker.
std::pair<CheckpointMetadata, std::string> read_metadata_checked(const std::string& path) {
  PAX_CHECK(fs::is_dir(path), "restore: checkpoint '", path, "' does not exist or is not a directory");
  const std::string marker_path = fs::join(path, kCommitMarkerFile);
  PAX_CHECK(fs::exists(marker_path), "restore: '", path, "' is not a committed checkpoint (it has no ",
            kCommitMarkerFile, "; an interrupted save leaves such directories)");
  const std::string metadata_path = fs::join(path, kMetadataFile);
  const std::string text = fs::read_file(metadata_path, kMaxMetadataBytes);
  CheckpointMetadata m = parse_checkpoint_metadata(text, metadata_path);
  const std::string marker = fs::read_file(marker_path, 4096);
  PAX_CHECK(marker == marker_text(m.step, crc32c(text.data(), text.size())), "restore: '", marker_path,
            "' does not match '", metadata_path, "' (step ", m.step, ", metadata.json crc32c ",
            crc32c_hex(crc32c(text.data(), text.size())), "): one of them is corrupted");
  check_name_matches_step(path, m.step, metadata_path);
  return {std::move(m), text};
}

void check_against_target(const TreeItemRecord& rec, const Tree& target, const std::string& file) {
  // The stored structure with a placeholder leaf, to reuse tree_structure_diff's messages.
  const Array placeholder = scalar(0.0f);
  const std::vector<Array> placeholders(rec.tensors.size(), placeholder);
  const Tree stored = tree_from_records(rec.structure, placeholders);
  const std::string diff = tree_structure_diff(stored, target);
  // The difference alone: the whole trees (thousands of leaves) would bury it.
  PAX_CHECK(diff.empty(), "restore: '", file, "': the stored tree differs from the target ", diff, " (stored ",
            rec.tensors.size(), " arrays, target ", tree_leaves(target).size(),
            "); the checkpoint was written by another model or optimizer config");
  const std::vector<Array> leaves = tree_leaves(target);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const TensorRecord& t = rec.tensors[i];
    const AVal& want = leaves[i].aval();
    PAX_CHECK(want.dtype == t.dtype && want.shape == t.shape, "restore: '", file, "': tensor '", t.name, "' is ",
              AVal{t.shape, t.dtype, false}.str(), " in the checkpoint but ", AVal{want.shape, want.dtype, false}.str(),
              " in the target");
  }
}

Tree read_tree_item(const std::string& path, const std::string& name, const TreeItemRecord& rec, const Tree* target) {
  // Whole arrays, assembled from the blocks.
  if (rec.sharded()) return read_sharded_tree_item(path, name, rec, target, {});
  const std::string file = fs::join(path, name + ".safetensors");
  if (target && !target->is_none()) check_against_target(rec, *target, file);
  std::vector<Array> target_leaves;
  if (target && !target->is_none()) target_leaves = tree_leaves(*target);

  SafetensorsReader reader(file);
  const auto& stored = reader.header().tensors;
  PAX_CHECK(stored.size() == rec.tensors.size(), "restore: safetensors file '", file, "' holds ", stored.size(),
            " tensors but metadata.json lists ", rec.tensors.size());
  std::map<std::string, size_t> index;  // tensor name -> leaf position
  for (size_t i = 0; i < rec.tensors.size(); ++i) {
    const TensorRecord& t = rec.tensors[i];
    const SafetensorsEntry* e = reader.find(t.name);
    PAX_CHECK(e != nullptr, "restore: safetensors file '", file, "': tensor '", t.name,
              "' is listed in metadata.json but missing from the file");
    PAX_CHECK(e->dtype == t.dtype && e->shape == t.shape, "restore: safetensors file '", file, "': tensor '", t.name,
              "' is ", AVal{e->shape, e->dtype, false}.str(), " in the file but ", AVal{t.shape, t.dtype, false}.str(),
              " in metadata.json");
    index[t.name] = i;
  }
  // Read in file order so that the disk sees one sequential pass.
  std::vector<Array> leaves(rec.tensors.size());
  for (const SafetensorsEntry& e : stored) {
    const size_t i = index.at(e.name);
    const bool weak = i < target_leaves.size() && target_leaves[i].weak_type();
    uint32_t crc = 0;
    leaves[i] = reader.read(e, &crc, weak);
    PAX_CHECK(crc == rec.tensors[i].crc32c, "restore: safetensors file '", file, "': tensor '", e.name,
              "' fails its CRC32C check (metadata.json says ", crc32c_hex(rec.tensors[i].crc32c), ", the data gives ",
              crc32c_hex(crc), "): the file is corrupted");
  }
  return tree_from_records(rec.structure, leaves);
}

std::string read_json_item(const std::string& path, const std::string& name, const JsonItemRecord& rec) {
  const std::string file = fs::join(path, name + ".json");
  std::string text = fs::read_file(file, kMaxJsonItemBytes);
  PAX_CHECK(text.size() == rec.bytes, "restore: '", file, "' is ", text.size(), " bytes but metadata.json says ",
            rec.bytes, ": the file is truncated or corrupted");
  const uint32_t crc = crc32c(text.data(), text.size());
  PAX_CHECK(crc == rec.crc32c, "restore: '", file, "' fails its CRC32C check (metadata.json says ",
            crc32c_hex(rec.crc32c), ", the data gives ", crc32c_hex(crc), "): the file is corrupted");
  check_json(text, "restore: '" + file + "'", kMaxJsonItemDepth);
  return text;
}

}  // namespace

// ---------------------------------------------------------------------------
// Names and listing

std::string checkpoint_dir_name(const std::string& prefix, CheckpointStep step, StepNames names) {
  if (names == StepNames::flax || !step.is_integer() || *step.as_integer() < 0) return prefix + step.str();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08lld", static_cast<long long>(*step.as_integer()));
  return prefix + buf;
}

std::optional<CheckpointStep> parse_checkpoint_dir_name(std::string_view name, const std::string& prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  return parse_checkpoint_step(name.substr(prefix.size()));
}

bool is_committed_checkpoint(const std::string& path) { return fs::exists(fs::join(path, kCommitMarkerFile)); }

std::string checkpoint_path_of(const std::string& dir, const std::string& prefix, CheckpointStep step) {
  const std::string own = fs::join(dir, checkpoint_dir_name(prefix, step));
  if (is_committed_checkpoint(own)) return own;
  std::string uncommitted;  // a directory of the step without its marker, for the error that follows
  for (const std::string& name : fs::list_dir(dir)) {
    if (parse_checkpoint_dir_name(name, prefix) != step) continue;
    if (is_committed_checkpoint(fs::join(dir, name))) return fs::join(dir, name);
    uncommitted = fs::join(dir, name);
  }
  return uncommitted.empty() ? own : uncommitted;
}

void remove_tmp_checkpoints(const std::string& ckpt_dir, const std::string& prefix) {
  bool changed = false;
  for (const std::string& name : fs::list_dir(ckpt_dir)) {
    if (!name.starts_with(kTmpPrefix)) continue;
    std::string_view base = std::string_view(name).substr(std::string_view(kTmpPrefix).size());
    const bool aside = base.ends_with(kAsideSuffix);
    if (aside || base.ends_with(kDeletingSuffix)) base.remove_suffix(4);
    if (!parse_checkpoint_dir_name(base, prefix)) continue;
    const std::string path = fs::join(ckpt_dir, name);
    const std::string final_path = fs::join(ckpt_dir, std::string(base));
    if (aside && !fs::exists(final_path) && is_committed_checkpoint(path)) {
      fs::rename(path, final_path);  // the overwrite that set it aside never landed
    } else {
      fs::remove_all(path);
    }
    changed = true;
  }
  if (changed) fs::sync_dir(ckpt_dir);
}

// ---------------------------------------------------------------------------
// Saving

PreparedCheckpoint prepare_checkpoint(const CheckpointItems& items, CheckpointStep step,
                                      const std::string& config_json) {
  PreparedCheckpoint p;
  p.metadata.step = step;
  p.metadata.paxcc_version = version();
  if (!config_json.empty()) p.metadata.config_hash = config_hash(config_json);
  for (const auto& [name, tree] : items.trees) {
    PAX_CHECK(is_valid_item_name(name), "save checkpoint: invalid item name '", name,
              "' (letters, digits, '_', '-', '.'; not starting with '.'; not 'metadata' or 'commit_success')");
    PAX_CHECK(tree_depth(tree) <= kMaxTreeDepth, "save checkpoint: item '", name, "' is nested deeper than ",
              kMaxTreeDepth, " levels");
    TreeItemRecord rec;
    rec.structure = tree_structure_records(tree);
    const std::vector<Array> leaves = tree_leaves(tree);
    const std::vector<std::string> paths = tree_paths(tree);
    std::set<std::string> seen;
    std::vector<NamedArray>& named = p.trees[name];
    for (size_t i = 0; i < leaves.size(); ++i) {
      PAX_CHECK(seen.insert(paths[i]).second, "save checkpoint: item '", name, "' has two leaves at the path '",
                paths[i], "' (a dict key containing '/'?); tensor names must be unique");
      PAX_CHECK(paths[i] != "__metadata__", "save checkpoint: item '", name,
                "' has a leaf at the path '__metadata__', a name safetensors reserves");
      PAX_CHECK(leaves[i].is_concrete(), "save checkpoint: item '", name, "', leaf '", paths[i],
                "' is a traced value; only concrete arrays can be saved");
      rec.tensors.push_back({paths[i], leaves[i].dtype(), leaves[i].shape(), 0});
      named.push_back({paths[i], leaves[i]});
    }
    p.metadata.trees.emplace(name, std::move(rec));
  }
  for (const auto& [name, text] : items.json) {
    PAX_CHECK(is_valid_item_name(name), "save checkpoint: invalid JSON item name '", name, "'");
    PAX_CHECK(!items.trees.count(name), "save checkpoint: '", name, "' is both a tree item and a JSON item");
    check_json(text, "save checkpoint: JSON item '" + name + "'", kMaxJsonItemDepth);
    p.json[name] = text;
    p.metadata.json[name] = {};
  }
  return p;
}

std::string tmp_checkpoint_path(const std::string& ckpt_dir, const std::string& prefix, CheckpointStep step,
                                StepNames names) {
  return fs::join(ckpt_dir, kTmpPrefix + checkpoint_dir_name(prefix, step, names));
}

std::string write_checkpoint(const PreparedCheckpoint& p, const std::string& ckpt_dir, const std::string& prefix,
                             StepNames names) {
  const CheckpointStep step = p.metadata.step;
  const std::string tmp = tmp_checkpoint_path(ckpt_dir, prefix, step, names);
  fs::remove_all(tmp);
  fs::make_dirs(tmp);

  CheckpointMetadata m = p.metadata;
  for (const auto& [item, tensors] : p.trees) {
    const std::vector<uint32_t> crcs =
        write_safetensors(fs::join(tmp, item + ".safetensors"), tensors, safetensors_file_metadata(step));
    std::vector<TensorRecord>& records = m.trees.at(item).tensors;
    for (size_t i = 0; i < crcs.size(); ++i) records[i].crc32c = crcs[i];
  }
  return commit_checkpoint(std::move(m), p.json, ckpt_dir, prefix, names);
}

std::map<std::string, std::string> safetensors_file_metadata(CheckpointStep step) {
  return {{"format", "paxcc"}, {"step", step.str()}};
}

std::string commit_checkpoint(CheckpointMetadata m, const std::map<std::string, std::string>& json,
                              const std::string& ckpt_dir, const std::string& prefix, StepNames names) {
  const CheckpointStep step = m.step;
  const std::string final_path = fs::join(ckpt_dir, checkpoint_dir_name(prefix, step, names));
  const std::string tmp = tmp_checkpoint_path(ckpt_dir, prefix, step, names);
  for (const auto& [item, text] : json) {
    fs::write_file_synced(fs::join(tmp, item + ".json"), text);
    m.json[item] = {text.size(), crc32c(text.data(), text.size())};
  }
  const std::string metadata = checkpoint_metadata_to_json(m);
  fs::write_file_synced(fs::join(tmp, kMetadataFile), metadata);
  fs::write_file_synced(fs::join(tmp, kCommitMarkerFile), marker_text(step, crc32c(metadata.data(), metadata.size())));
  fs::sync_dir(tmp);

  if (!fs::exists(final_path)) {
    fs::rename(tmp, final_path);
    fs::sync_dir(ckpt_dir);
  } else if (fs::exchange(tmp, final_path)) {
    fs::sync_dir(ckpt_dir);
    fs::remove_all(tmp);  // now the replaced checkpoint
  } else {
    const std::string aside = tmp + kAsideSuffix;
    fs::remove_all(aside);
    fs::rename(final_path, aside);
    fs::rename(tmp, final_path);
    fs::sync_dir(ckpt_dir);
    fs::remove_all(aside);
  }
  return final_path;
}

void remove_checkpoint(const std::string& ckpt_dir, const std::string& prefix, CheckpointStep step, bool keep_own_name,
                       StepNames names) {
  for (const std::string& name : fs::list_dir(ckpt_dir)) {
    if (parse_checkpoint_dir_name(name, prefix) != step) continue;
    if (keep_own_name && name == checkpoint_dir_name(prefix, step, names)) continue;
    const std::string path = fs::join(ckpt_dir, name);
    // Renamed first: a crash mid-deletion leaves a tmp_ directory, never a
    // listed checkpoint with files missing.
    const std::string doomed = fs::join(ckpt_dir, kTmpPrefix + name + kDeletingSuffix);
    fs::remove_all(doomed);
    fs::rename(path, doomed);
    fs::sync_dir(ckpt_dir);
    fs::remove_all(doomed);
  }
}

// ---------------------------------------------------------------------------
// Reading

CheckpointMetadata read_checkpoint_metadata(const std::string& path) { return read_metadata_checked(path).first; }

CheckpointItems read_checkpoint(const std::string& path, const std::map<std::string, Tree>& targets) {
  const CheckpointMetadata m = read_metadata_checked(path).first;
  CheckpointItems out;
  auto item_names = [&] {
    std::string s;
    for (const auto& [name, rec] : m.trees) s += (s.empty() ? "'" : ", '") + name + "'";
    return s.empty() ? std::string("none") : s;
  };
  if (targets.empty()) {
    for (const auto& [name, rec] : m.trees) out.trees[name] = read_tree_item(path, name, rec, nullptr);
  } else {
    for (const auto& [name, target] : targets) {
      auto it = m.trees.find(name);
      PAX_CHECK(it != m.trees.end(), "restore: checkpoint '", path, "' has no item '", name,
                "' (its items: ", item_names(), ")");
      out.trees[name] = read_tree_item(path, name, it->second, &target);
    }
  }
  out.json = read_checkpoint_json_items(path, m);
  return out;
}

std::map<std::string, std::string> read_checkpoint_json_items(const std::string& path, const CheckpointMetadata& m) {
  std::map<std::string, std::string> out;
  for (const auto& [name, rec] : m.json) out[name] = read_json_item(path, name, rec);
  return out;
}

// ---------------------------------------------------------------------------
// Functional API

std::string save_checkpoint(const std::string& ckpt_dir, const Tree& target, CheckpointStep step,
                            const SaveCheckpointOptions& options) {
  if (options.async_manager) options.async_manager->wait_previous_save();
  PAX_CHECK(options.keep >= 1, "save_checkpoint: keep must be >= 1, got ", options.keep);
  PAX_CHECK(!options.keep_every_n_steps || *options.keep_every_n_steps >= 1,
            "save_checkpoint: keep_every_n_steps must be >= 1, got ", options.keep_every_n_steps.value_or(0));
  PAX_CHECK(!options.prefix.empty() && options.prefix.find('/') == std::string::npos,
            "save_checkpoint: prefix must be a non-empty file name prefix, got '", options.prefix, "'");
  CheckpointItems items;
  items.trees[kTargetItemName] = target;
  auto prepared = std::make_shared<const PreparedCheckpoint>(prepare_checkpoint(items, step, options.config_json));

  fs::make_dirs(ckpt_dir);
  remove_tmp_checkpoints(ckpt_dir, options.prefix);
  const std::vector<CheckpointStep> steps = committed_steps(ckpt_dir, options.prefix);
  if (!options.overwrite && !steps.empty()) {
    PAX_CHECK(!std::binary_search(steps.begin(), steps.end(), step), "save_checkpoint: a checkpoint for step ", step,
              " already exists in '", ckpt_dir, "' (pass overwrite = true to replace it)");
    PAX_CHECK(step > steps.back(), "save_checkpoint: step ", step, " is older than the latest checkpoint (step ",
              steps.back(), ") in '", ckpt_dir, "' (pass overwrite = true to replace the newer ones)");
  }
  const std::vector<CheckpointStep> remove =
      flax_steps_to_remove(steps, step, options.overwrite, options.keep, options.keep_every_n_steps);
  auto work = [prepared, ckpt_dir, prefix = options.prefix, remove, step] {
    write_checkpoint(*prepared, ckpt_dir, prefix, StepNames::flax);
    remove_checkpoint(ckpt_dir, prefix, step, /*keep_own_name=*/true, StepNames::flax);  // another spelling it replaced
    for (const CheckpointStep& s : remove) remove_checkpoint(ckpt_dir, prefix, s);
  };
  if (options.async_manager) {
    options.async_manager->run(std::move(work));
  } else {
    work();
  }
  return fs::join(ckpt_dir, checkpoint_dir_name(options.prefix, step, StepNames::flax));
}

std::optional<std::string> latest_checkpoint(const std::string& ckpt_dir, const std::string& prefix) {
  const std::vector<CheckpointStep> steps = committed_steps(ckpt_dir, prefix);
  if (steps.empty()) return std::nullopt;
  return checkpoint_path_of(ckpt_dir, prefix, steps.back());
}

std::vector<int64_t> available_steps(const std::string& ckpt_dir, const std::string& prefix) {
  std::vector<int64_t> out;
  for (const CheckpointStep& s : committed_steps(ckpt_dir, prefix)) {
    const std::optional<int64_t> step = s.as_integer();
    PAX_CHECK(step.has_value(), "available_steps: '", ckpt_dir, "' holds a checkpoint of the non-integer step ", s,
              " (", prefix, s, "); available_float_steps lists float steps");
    out.push_back(*step);
  }
  return out;
}

std::vector<double> available_float_steps(const std::string& ckpt_dir, const std::string& prefix) {
  std::vector<double> out;
  for (const CheckpointStep& s : committed_steps(ckpt_dir, prefix)) out.push_back(s.value());
  return out;
}

Tree restore_checkpoint(const std::string& ckpt_dir_or_path, const Tree& target,
                        const RestoreCheckpointOptions& options) {
  const std::string& p = ckpt_dir_or_path;
  std::string path;
  if (options.step) {
    path = checkpoint_path_of(p, options.prefix, *options.step);
    PAX_CHECK(fs::is_dir(path), "restore_checkpoint: no checkpoint for step ", *options.step, " in '", p,
              "' (committed steps: ", steps_str(committed_steps(p, options.prefix)), ")");
  } else {
    const std::string base = fs::basename(p);
    const bool names_checkpoint = parse_checkpoint_dir_name(base, options.prefix).has_value() ||
                                  base.starts_with(kTmpPrefix) || fs::exists(fs::join(p, kMetadataFile)) ||
                                  fs::exists(fs::join(p, kCommitMarkerFile));
    if (!fs::exists(p)) return target;  // as flax: nothing at the path, nothing restored
    if (names_checkpoint) {
      PAX_CHECK(fs::is_dir(p), "restore_checkpoint: checkpoint '", p, "' is not a directory");
      path = p;
    } else {
      std::optional<std::string> latest = latest_checkpoint(p, options.prefix);
      if (!latest) return target;  // nothing saved yet
      path = *latest;
    }
  }
  std::map<std::string, Tree> targets{{kTargetItemName, target}};
  return read_checkpoint(path, targets).trees.at(kTargetItemName);
}

}  // namespace pax::train

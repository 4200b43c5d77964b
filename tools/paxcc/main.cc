// The paxcc command (paxml's main.py): runs a registered experiment.
//
//   paxcc --exp=lm.KjvTransformer --job_log_dir=runs/kjv [--mode=train|eval|decode|inspect]
//         [--set path=value]... [--config file.json] [--restore_step N] [--data_dir DIR] [--peak_flops F]
//   mpirun -np N paxcc --exp=... --job_log_dir=...   (data parallel: one input shard per process)
//   paxcc --list        (names, and the paxml names --exp also takes)
//   paxcc tokenizer --input FILE --vocab_size N --out MODEL
//
// Every failure is one line on stderr naming what is wrong and what is
// valid; the exit status is 2 for bad usage and 1 for a failed run.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cpu/host_memory.h"
#include "pax/backend/matmul_precision.h"
#include "pax/data/file_io.h"
#include "pax/pax.h"
#include "pax/train/checkpoint.h"
#include "pax/train/flax_msgpack.h"
#include "pax/train/import_params.h"
#include "pax/train/orbax_checkpoint.h"
#include "launch_flags.h"

namespace {

using pax::experiments::Mode;

// A CLI11 check that a number lies in [lo, hi], whose message prints both
// bounds the way a user would type them.
CLI::Validator number_between(double lo, double hi, const std::string& unit) {
  std::ostringstream range;
  range << lo << " to " << hi;
  return CLI::Validator(
      [=, range = range.str()](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !(v >= lo && v <= hi)) {
          return "must be a number from " + range + " " + unit + ", got " + text;
        }
        return {};
      },
      "[" + range.str() + "]");
}

int usage_error(const std::string& message) {
  std::cerr << "paxcc: error: " << message << " (see paxcc --help)\n";
  return 2;
}

// In a multi-process run (mpirun) the line names the failing process, and
// the whole job ends at once: the other processes would otherwise wait for
// this one until their collective timeout.
int run_error(const std::string& message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n') c = ' ';
  pax::dist::ProcessGroup* group = nullptr;
  try {
    group = &pax::dist::process_group();
  } catch (const std::exception&) {
  }
  const bool multi = group && group->process_count() > 1;
  // One write, so that the lines of several processes do not interleave.
  const std::string text = "paxcc: error: " +
                           (multi ? "process " + std::to_string(group->process_index()) + " of " +
                                        std::to_string(group->process_count()) + ": "
                                  : std::string()) +
                           line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (multi) group->abort_job(1);
  return 1;
}

// The experiment a job's config.json names ("$experiment"), else the file's path.
std::string recorded_experiment(const std::string& config_file) {
  const nlohmann::json j = nlohmann::json::parse(pax::data::read_file(config_file), nullptr, false);
  if (j.is_object() && j.contains("$experiment") && j["$experiment"].is_string())
    return j["$experiment"].get<std::string>();
  return config_file;
}

// "train", "eval", ... in Mode's order.
const std::vector<std::string>& mode_names() { return pax_enum_names(static_cast<Mode*>(nullptr)).names; }

// One line per experiment: its name, its paxml name where it is a port
// (--exp takes either), and its description.
void list_experiments() {
  std::vector<std::pair<std::string, std::string>> rows;  // name (aliases), description
  size_t width = 0;
  for (const std::string& name : pax::experiments::registered_experiments()) {
    std::string column = name;
    for (const std::string& alias : pax::experiments::experiment_aliases(name)) column += " = " + alias;
    width = std::max(width, column.size());
    rows.emplace_back(column, pax::experiments::make_experiment(name)->description());
  }
  for (const auto& [column, description] : rows)
    std::printf("%-*s  %s\n", int(width), column.c_str(), description.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI, OpenMP or oneDNN start a thread: SIGINT / SIGTERM are then
  // received by one thread, which asks the training loop to save and stop.
  pax::watch_stop_signals();
  // A failed operator new remembers what it was for (pax::AllocationPurpose).
  std::set_new_handler(pax::note_failed_allocation);
  CLI::App app{std::string("paxcc ") + pax::version() + " - Pax experiments in C++ on a JAX-like array core", "paxcc"};
  app.set_version_flag("--version", std::string("paxcc ") + pax::version());
  app.footer(
      "Examples:\n"
      "  paxcc --list\n"
      "  paxcc --list_devices\n"
      "  paxcc --exp=lm.KjvTransformer --job_log_dir=runs/kjv\n"
      "  paxcc --exp=lm.KjvTransformer --job_log_dir=runs/kjv --mode=decode\n"
      "  mpirun -np 2 paxcc --exp=lm.KjvTransformer --job_log_dir=runs/kjv2   (data parallel)\n"
      "  paxcc --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas --mode=inspect\n"
      "  paxcc --exp=vision.FashionMnistCnn --job_log_dir=runs/cnn --set train.num_train_steps=100\n"
      "  paxcc tokenizer --input corpus.txt --vocab_size 8000 --out corpus.model\n"
      "  paxcc export --job_log_dir=runs/kjv   (the params as Flax msgpack)\n"
      "  paxcc import --from=ckpt/ --out=params.msgpack   (an Orbax or Pax checkpoint as Flax msgpack)");

  std::string exp_name, job_dir, mode_name = "train", config_file, data_dir, output_dir, platform;
  std::string matmul_precision, profile_steps;
  std::vector<std::string> overrides;
  std::optional<int64_t> restore_step;
  std::optional<double> peak_flops, dist_timeout, dist_phase_timeout, dist_stop_grace;
  bool list = false, list_devices = false;
  app.add_option("--exp", exp_name,
                 "Registered experiment to run, by name or paxml name (tasks.lm.params.c4.C4Spmd1BAdam4Replicas; see "
                 "--list)");
  app.add_option("--job_log_dir", job_dir, "Directory of the run: config, checkpoints, summaries, samples");
  app.add_option("--mode", mode_name, "train (resumes by itself), eval, decode, or inspect")
      ->check(CLI::IsMember(mode_names()));
  app.add_option("--set", overrides,
                 "Override a config field: --set path=value (repeatable); a template field takes a type name, None, "
                 "or @other.path to share that template (shared templates are one object: set through any path)")
      ->type_name("PATH=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  app.add_option("--config", config_file, "Run this resolved config (a job's config.json) instead of the experiment's");
  app.add_option("--restore_step", restore_step, "eval / decode: the checkpoint step to restore (default: latest)");
  app.add_option("--output_dir", output_dir,
                 "eval / decode: where results go (default: <job_log_dir>/eval_runs/step_<N>, decode_runs/step_<N>); "
                 "the job directory itself is only read");
  app.add_option("--platform", platform,
                 "Where arrays live and programs run: cpu, sim (a test device), cuda, or a list where the first "
                 "present wins (default: $PAX_PLATFORMS, else cpu)");
  app.add_option("--jax_default_matmul_precision", matmul_precision,
                 "f32 products and convolutions: float32 (default; also $PAX_DEFAULT_MATMUL_PRECISION), or "
                 "tensorfloat32 / bfloat16 to let a GPU's tensor cores take TF32 inputs")
      ->check(CLI::IsMember({"float32", "highest", "tensorfloat32", "high", "bfloat16", "default", "fastest"}));
  app.add_option("--profile_steps", profile_steps,
                 "train: trace steps START:END (1-based, inclusive) into <job_log_dir>/summaries/train/plugins/"
                 "profile/, for TensorBoard's profile plugin or Perfetto ($PAX_TRACE_DIR traces a whole run)")
      ->type_name("START:END");
  app.add_option("--data_dir", data_dir, "Data directory (default: $PAX_DATA_DIR or ./data)");
  app.add_option("--peak_flops", peak_flops, "Peak FLOP/s of this machine for MFU (default: the theoretical peak)")
      ->check(number_between(1e6, 1e21, "FLOP/s"));
  app.add_option("--dist_timeout", dist_timeout,
                 "Under mpirun: seconds any process waits for the others before failing with the missing ones' "
                 "names (default 300, or $PAX_DIST_TIMEOUT)")
      ->check(number_between(0.001, 604800, "seconds (a week)"));
  app.add_option("--dist_phase_timeout", dist_phase_timeout,
                 "Under mpirun: seconds the processes wait for a phase that rank 0 runs alone (a restore, a save, "
                 "decoding) (default 3600, or $PAX_DIST_PHASE_TIMEOUT; never less than --dist_timeout)")
      ->check(number_between(0.001, 604800, "seconds (a week)"));
  app.add_option("--dist_stop_grace", dist_stop_grace,
                 "Under mpirun: once a process is asked to stop (SIGINT, SIGTERM), seconds it still waits for the "
                 "others before failing (default 30, or $PAX_DIST_STOP_GRACE)")
      ->check(number_between(0.001, 604800, "seconds (a week)"));
  app.add_flag("--list", list, "List the registered experiments");
  app.add_flag("--list_devices", list_devices,
               "List the devices of every platform (cpu, sim, cuda), and why a platform has none");

  CLI::App* exp_cmd = app.add_subcommand("export", "Write a job's latest checkpoint in another framework's format");
  std::string export_job, export_format = "flax", export_out;
  bool export_opt_state = false;
  exp_cmd->add_option("--job_log_dir", export_job, "The job directory whose checkpoints/ to read")->required();
  exp_cmd->add_option("--format", export_format, "flax: flax.serialization.msgpack_serialize's bytes")
      ->check(CLI::IsMember({"flax"}));
  exp_cmd->add_option("--out", export_out, "The file to write (default: <job_log_dir>/export/params_<step>.msgpack)");
  exp_cmd->add_flag("--with_opt_state", export_opt_state,
                    "The whole train state (step, params, opt_state) instead of the params alone");

  CLI::App* imp_cmd =
      app.add_subcommand("import", "Convert an Orbax or Pax checkpoint (or a Flax msgpack file) to Flax msgpack");
  std::string import_from, import_out;
  bool import_params_only = false;
  imp_cmd->add_option("--from", import_from, "An Orbax checkpoint directory, a Pax checkpoint, or a .msgpack file")
      ->required();
  imp_cmd->add_option("--out", import_out, "The Flax msgpack file to write")->required();
  imp_cmd->add_flag("--params_only", import_params_only,
                    "The params alone (mdl_vars/params of Pax's state, params of Flax's), as train.init_from takes");

  CLI::App* tok = app.add_subcommand("tokenizer", "Train a SentencePiece model on a text file");
  std::string tok_input, tok_out, tok_type = "unigram";
  int64_t tok_vocab = 8000;
  tok->add_option("--input", tok_input, "Text file (plain or .gz), one sentence or document per line")->required();
  tok->add_option("--vocab_size", tok_vocab, "Vocabulary size")
      ->required()
      ->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  tok->add_option("--out", tok_out, "Where to write the model file")->required();
  tok->add_option("--model_type", tok_type, "unigram or bpe")->check(CLI::IsMember({"unigram", "bpe"}));

  // `--exp= --job_log_dir=x` would make CLI11 take the next flag as the
  // empty option's value.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() > 3 && arg.starts_with("--") && arg.back() == '=' && arg.find('=') == arg.size() - 1)
      return usage_error(arg + " has an empty value; give " + arg.substr(0, arg.size() - 1) + "=VALUE");
  }
  // paxml's launch flags for JAX, XLA and TPUs: accepted, ignored, named once.
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string> ignored = paxcc::drop_foreign_launch_flags(args);
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!ignored.empty() && (!rank || std::string(rank) == "0")) std::cerr << paxcc::foreign_flags_warning(ignored);
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  try {
    if (!platform.empty()) pax::set_default_platform(platform);
    if (!matmul_precision.empty()) pax::set_default_matmul_precision(pax::parse_matmul_precision(matmul_precision));
    pax::default_matmul_precision();  // a bad $PAX_DEFAULT_MATMUL_PRECISION fails here, before any work
    if (!data_dir.empty()) pax::data::set_default_data_dir(data_dir);
    if (tok->parsed()) {
      pax::data::SentencePieceTrainOptions options;
      options.vocab_size = tok_vocab;
      options.model_type = tok_type;
      pax::data::train_sentencepiece(tok_input, tok_out, options);
      std::cout << "wrote " << tok_out << " (" << tok_vocab << " pieces)\n";
      return 0;
    }
    if (exp_cmd->parsed()) {
      namespace fs = std::filesystem;
      const std::string ckpt_dir = (fs::path(export_job) / "checkpoints").string();
      std::string out = export_out;
      if (out.empty()) {
        const std::optional<std::string> latest = pax::train::latest_checkpoint(ckpt_dir);
        PAX_CHECK(latest, "export: no committed checkpoint in '", ckpt_dir, "'");
        const auto step = pax::train::parse_checkpoint_dir_name(fs::path(*latest).filename().string(),
                                                                pax::train::kDefaultCheckpointPrefix);
        out = (fs::path(export_job) / "export" /
               ((export_opt_state ? "train_state_" : "params_") + (step ? step->str() : std::string("latest")) +
                ".msgpack"))
                  .string();
      }
      const int64_t step = pax::train::export_flax_checkpoint(ckpt_dir, out, export_opt_state);
      std::cout << "wrote " << out << " (step " << step << ", Flax msgpack: flax.serialization.msgpack_restore)\n";
      return 0;
    }
    if (imp_cmd->parsed()) {
      std::error_code ec;
      const bool directory = std::filesystem::is_directory(import_from, ec);
      PAX_CHECK(directory || std::filesystem::is_regular_file(import_from, ec), "import: no such file or directory '",
                import_from, "'");
      pax::Tree tree = directory ? pax::train::read_orbax_checkpoint(import_from)
                                 : pax::train::read_flax_msgpack(import_from);
      if (import_params_only) tree = pax::train::params_subtree(tree);
      int64_t count = 0;
      const std::vector<pax::Array> leaves = pax::tree_leaves(tree);
      for (const pax::Array& a : leaves) count += a.shape().numel();
      pax::train::write_flax_msgpack(import_out, tree);
      std::cout << "wrote " << import_out << " (" << leaves.size() << " arrays, " << count
                << " elements; Flax msgpack: flax.serialization.msgpack_restore, train.init_from)\n";
      return 0;
    }
    if (list) {
      list_experiments();
      return 0;
    }
    if (list_devices) {
      std::cout << pax::device_report();
      return 0;
    }
    if (exp_name.empty() && config_file.empty()) {
      if (argc <= 1) {
        std::cout << app.help();
        return 0;
      }
      return usage_error("--exp is required (or --config FILE); run paxcc --list for the experiments");
    }
    if (!exp_name.empty() && !config_file.empty())
      return usage_error("--exp and --config both name the experiment to run; pass one of them (--config " +
                         config_file + " already holds a whole resolved experiment)");
    const std::vector<std::string>& names = mode_names();
    const Mode mode = Mode(std::find(names.begin(), names.end(), mode_name) - names.begin());
    if (mode != Mode::inspect && job_dir.empty())
      return usage_error("--job_log_dir is required for --mode=" + mode_name);
    if (!output_dir.empty() && mode != Mode::eval && mode != Mode::decode)
      return usage_error("--output_dir is for --mode=eval and --mode=decode (training writes --job_log_dir)");

    pax::Config config;
    if (!config_file.empty()) {
      config = pax::Config::from_json(pax::data::read_file(config_file));
      PAX_CHECK(std::string(config.type_name()) == "Experiment", "--config ", config_file, " holds a ",
                config.type_name(), " config; expected a job's config.json (an Experiment)");
    } else {
      config = pax::experiments::make_experiment(exp_name)->config();
    }
    config.apply_overrides(overrides);

    if (dist_timeout) pax::dist::process_group().set_timeout_seconds(*dist_timeout);
    if (dist_phase_timeout) pax::dist::process_group().set_phase_timeout_seconds(*dist_phase_timeout);
    if (dist_stop_grace) pax::dist::process_group().set_stop_grace_seconds(*dist_stop_grace);
    pax::experiments::RunOptions options;
    options.job_dir = job_dir;
    options.mode = mode;
    options.restore_step = restore_step;
    options.peak_flops = peak_flops;
    options.experiment_name = exp_name.empty() ? recorded_experiment(config_file) : exp_name;
    options.output_dir = output_dir;
    if (!profile_steps.empty()) options.profile_steps = pax::experiments::parse_profile_steps(profile_steps);
    pax::experiments::run_experiment(config, options);
    return 0;
  } catch (const std::bad_alloc&) {
    // Its size, purpose and the limit that applied (RLIMIT_AS, a cgroup's or
    // the machine's memory), from where the failed operator new recorded them.
    return run_error(pax::cpu::out_of_memory_message() +
                     "; reduce train_input.batch_size or the model's dimensions (--mode=inspect prints its size)");
  } catch (const std::exception& e) {
    return run_error(e.what());
  }
}

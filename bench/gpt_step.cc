// One GPT training step in paxcc, the model and flags of
// bench/peers/torch_gpt.py, so that the two print comparable lines:
//
//   build-bench/bench/gpt_step [--layers 4] [--d 256] [--heads 4] [--seq 256] [--batch 8]
//                              [--vocab 4096] [--dtype f32|bf16] [--steps 10] [--threads 2]
//                              [--peak_flops F] [--trace 1]
//
// The model is a TransformerLm: tied token embedding / softmax without bias,
// a learnt position table of --seq rows, pre-LN blocks (LayerNorm eps 1e-5,
// combined QKV projection, causal attention, GELU-tanh MLP of width 4d, biases
// everywhere), no dropout, a final LayerNorm; the loss is the mean cross
// entropy of f32 logits, written as optax's
// softmax_cross_entropy_with_integer_labels (logsumexp minus the label's
// logit: the same value as -log_softmax at the label, with one full-size
// intermediate less). One jitted step runs value_and_grad, AdamW (3e-4,
// PyTorch's defaults: weight decay 0.01, eps 1e-8) and the update, with the
// train state donated. bf16 is autocast's mixed precision: f32 variables,
// bf16 forward computation (fprop_dtype), f32 loss.
//
// Model FLOPs per token: 6 N + 6 L H Q T, with N the parameters, L layers,
// H heads of Q dimensions (H Q = d) and T the sequence length; the second
// term is the causal attention's logits and weighted sum, forward and
// backward (LanguageModel::flops_per_token; llm.c and bench/peers count
// the same; PaLM's 12 L H Q T counts the masked half too). Per step: tokens
// = B T times that. MFU divides the achieved model FLOP/s by the theoretical peak
// of pax/train/peak_flops.h for the compute dtype (--peak_flops or
// PAX_PEAK_FLOPS override it); the measured GEMM rate is printed beside it.
//
// --trace 1 prints every step's loss and time to stderr. PAX_PROFILE=1 in the
// environment prints the time of every step of the compiled program at exit,
// summed over the timed steps (the two warm-up calls, which also fault in the
// arena's pages, are left out; see pax/backend/cpu/step_profile.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <string>

#include "pax/backend/cpu/native_compiler.h"
#include "pax/backend/cpu/step_profile.h"
#include "pax/pax.h"

namespace {

using namespace pax;

struct Flags {
  int64_t layers = 4, d = 256, heads = 4, seq = 256, batch = 8, vocab = 4096, steps = 10, threads = 2, trace = 0;
  std::string dtype = "f32";
  std::string platform;   // "": $PAX_PLATFORMS, else cpu
  double peak_flops = 0;  // 0: the theoretical peak
};

[[noreturn]] void usage(const char* argv0, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--layers N] [--d N] [--heads N] [--seq N] [--batch N] [--vocab N] "
               "[--dtype f32|bf16] [--steps N] [--threads N] [--peak_flops FLOPS] [--trace 0|1] "
               "[--platform cpu|sim|cuda]\n",
               argv0, problem.c_str(), argv0);
  std::exit(2);
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  std::map<std::string, int64_t*> ints = {
      {"layers", &f.layers}, {"d", &f.d},         {"heads", &f.heads},     {"seq", &f.seq},    {"batch", &f.batch},
      {"vocab", &f.vocab},   {"steps", &f.steps}, {"threads", &f.threads}, {"trace", &f.trace}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg.rfind("--", 0) != 0) usage(argv[0], "unexpected argument '" + arg + "'");
    arg = arg.substr(2);
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(argv[0], "--" + arg + " needs a value");
    }
    char* end = nullptr;
    if (auto it = ints.find(arg); it != ints.end()) {
      *it->second = std::strtoll(value.c_str(), &end, 10);
      const int64_t least = arg == "trace" ? 0 : 1;
      if (*end || *it->second < least) {
        usage(argv[0], "--" + arg + " must be an integer >= " + std::to_string(least) + ", got '" + value + "'");
      }
    } else if (arg == "dtype") {
      if (value != "f32" && value != "bf16") usage(argv[0], "--dtype must be f32 or bf16, got '" + value + "'");
      f.dtype = value;
    } else if (arg == "platform") {
      f.platform = value;
    } else if (arg == "peak_flops") {
      f.peak_flops = std::strtod(value.c_str(), &end);
      if (*end || !(f.peak_flops > 0)) usage(argv[0], "--peak_flops must be a positive number, got '" + value + "'");
    } else {
      usage(argv[0], "unknown flag --" + arg);
    }
  }
  if (f.d % f.heads != 0) usage(argv[0], "--heads must divide --d");
  return f;
}

std::unique_ptr<nn::TransformerLm> build_model(const Flags& f, DType fprop_dtype) {
  auto ln = nn::tpl<nn::LayerNorm>();
  ln->epsilon = 1e-5;  // torch.nn.LayerNorm's default
  auto attention = nn::tpl<nn::DotProductAttention>();
  attention->combine_qkv = true;
  auto gelu = nn::tpl<nn::GELU>();
  gelu->approximate = true;
  auto mlp = nn::tpl<nn::TransformerFeedForward>();
  mlp->activation_tpl = gelu;
  mlp->ln_tpl = ln;
  auto block = nn::tpl<nn::Transformer>();
  block->ln_tpl = ln;
  block->tr_atten_tpl = attention;
  block->tr_fflayer_tpl = mlp;
  auto stack = nn::tpl<nn::StackedTransformer>();
  stack->num_layers = f.layers;
  stack->num_heads = f.heads;
  stack->hidden_dims = 4 * f.d;
  stack->transformer_layer_params_tpl = block;
  auto position = nn::tpl<nn::TrainablePositionalEmbedding>();
  position->max_seq_length = f.seq;
  auto softmax = nn::tpl<nn::SharedEmbeddingSoftmax>();
  softmax->has_bias = false;  // logits = x @ wte^T, as in the PyTorch model

  nn::TransformerLm::HParams hp;
  hp.model_dims = f.d;
  hp.vocab_size = f.vocab;
  hp.fprop_dtype = fprop_dtype;
  hp.position_emb_tpl = position;
  hp.stacked_transformer_tpl = stack;
  hp.final_ln_tpl = ln;
  hp.softmax_tpl = softmax;
  return nn::build<nn::TransformerLm>(hp);
}

}  // namespace

int run_benchmark(const Flags& f) {
  set_num_threads(int(f.threads));
  const DType compute = f.dtype == "bf16" ? DType::bf16 : DType::f32;

  auto model = build_model(f, compute);
  const int64_t n_params = nn::count_parameters(*model);
  Tree params = nn::init(*model, random::key(0))["params"];
  const Array ids = random::randint(random::key(1), {f.batch, f.seq}, 0, f.vocab);
  const Array labels = random::randint(random::key(2), {f.batch, f.seq}, 0, f.vocab);
  const Array paddings = zeros({f.batch, f.seq});

  auto loss_fn = [&](const Tree& p, const Array& x, const Array& y) {
    Tree variables = Tree::dict({{"params", p}});
    Array logits =
        nn::apply_with(*model, variables, [&](const nn::TransformerLm& m) { return m.fprop(x, paddings); }).output;
    return mean(nn::softmax_cross_entropy_with_integer_labels(logits, y));  // f32, as logits.float() in torch
  };
  optim::GradientTransformation tx = optim::adamw(3e-4, {.weight_decay = 0.01});
  auto step = jit(
      [&](const train::TrainState& s, const Array& x, const Array& y) {
        auto [loss, grads] = value_and_grad(loss_fn)(s.params, x, y);
        return std::make_pair(s.apply_gradients(tx, grads), loss);
      },
      {.donate_argnums = {0}});

  train::TrainState state = train::TrainState::create(std::move(params), tx);
  using clock = std::chrono::steady_clock;
  float loss = 0;
  int64_t step_index = 0;
  auto run = [&] {
    const auto t0 = clock::now();
    auto [next, l] = step(std::move(state), ids, labels);
    state = std::move(next);
    loss = l.item<float>();  // waits for the step
    if (f.trace) {
      std::fprintf(stderr, "step %lld loss %.4f %.1f ms\n", (long long)step_index, loss,
                   std::chrono::duration<double>(clock::now() - t0).count() * 1e3);
    }
    ++step_index;
  };
  for (int i = 0; i < 2; ++i) run();  // warm-up, trace and compile included
  cpu::reset_step_profile();          // PAX_PROFILE counts the timed steps only
  const auto start = clock::now();
  for (int64_t i = 0; i < f.steps; ++i) run();
  const double s = std::chrono::duration<double>(clock::now() - start).count() / double(f.steps);

  const double tokens = double(f.batch * f.seq);
  const double flops = (6.0 * double(n_params) + 6.0 * double(f.layers * f.d * f.seq)) * tokens;  // causal
  train::PeakFlopsOptions peak_options;
  if (f.peak_flops > 0) peak_options.override_flops = f.peak_flops;
  const double peak = train::peak_flops(compute, peak_options);
  const double mfu = train::mfu(flops, s, peak);
  if (const std::optional<train::DevicePeak> device = train::device_peak(compute)) {
    // A device with its own peak (a GPU): the CPU's GEMM rate says nothing of it.
    std::printf(
        "paxcc %s %s params=%lld ms/step=%.1f tokens/s=%.0f model_TFLOP/s=%.2f loss=%.3f MFU=%.1f%% (peak %s)\n",
        version(), f.dtype.c_str(), (long long)n_params, s * 1e3, tokens / s, flops / s / 1e12, loss, 100.0 * mfu,
        f.peak_flops > 0 ? "given" : device->how.c_str());
    return 0;
  }
  const double gemm = train::achievable_flops(compute);
  std::printf(
      "paxcc %s %s params=%lld ms/step=%.1f tokens/s=%.0f model_GFLOP/s=%.1f loss=%.3f MFU=%.1f%% "
      "(peak %.1f GFLOP/s; GEMM achieves %.1f, %.0f%% of it)\n",
      version(), f.dtype.c_str(), (long long)n_params, s * 1e3, tokens / s, flops / s / 1e9, loss, 100.0 * mfu,
      peak / 1e9, gemm / 1e9, 100.0 * gemm / peak);
  if (f.peak_flops <= 0) std::printf("peak: %s\n", train::theoretical_peak(compute).str().c_str());
  if (const std::string built = cpu::native_build_summary(); !built.empty()) std::printf("%s\n", built.c_str());
  return 0;
}

int main(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  try {
    if (!f.platform.empty()) set_default_platform(f.platform);
    return run_benchmark(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_step: error: %s\n", e.what());
    return 1;
  }
}

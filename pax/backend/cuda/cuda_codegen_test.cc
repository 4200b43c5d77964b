// The CUDA code generator without a GPU: every kernel that lowering a set of
// test programs for the CUDA backend produces (elementwise chains over every
// operation of the dialect in f32, bf16 and int32, softmax, layer norm, the
// cross entropy and its gradient, row and column reductions, and the GPT
// training step's gradient in f32 and bf16) renders and compiles through
// NVRTC for sm_80 and sm_90; the dialect renders every operation or lists it
// as left out; the CUBIN cache hits, misses by architecture and rebuilds a
// damaged entry; compiles in flight at once are one; an NVRTC error carries
// its log; the lowering target's answers match what the renderer renders.
// The kernels also run on the host (their CUDA C built as C++ over a shim of
// threads and barriers) and give eager execution's bits or values. With a
// device, they run there too (skipped without one).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "pax/backend/cpu/native_compiler.h"
#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_dialect.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/cuda_lowering_target.h"
#include "pax/backend/cuda/nvrtc_compiler.h"
#include "pax/compile/lower.h"
#include "pax/pax.h"
#include "pax/testing/scoped_env.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

namespace fs = std::filesystem;
using testing::random_array;

// A fresh kernel cache for the test's scope, so that every compile it
// expects happens (and nothing of the user's cache is touched).
class ScopedCacheDir {
 public:
  ScopedCacheDir() : dir_(make()), env_("PAX_CACHE_DIR", dir_.c_str()) {}
  ~ScopedCacheDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return dir_; }

 private:
  static std::string make() {
    std::string d = (fs::temp_directory_path() / "pax-cuda-codegen-XXXXXX").string();
    EXPECT_NE(::mkdtemp(d.data()), nullptr);
    return d;
  }
  std::string dir_;
  testing::ScopedEnv env_;
};

LoweredProgram lower_for_cuda(const JaxprPtr& jaxpr) { return lower(jaxpr, CompileOptions{}, cuda_lowering_target()); }

// The kernels of lowered programs, each source once.
struct KernelSet {
  std::vector<std::string> sources;
  std::set<std::string> seen;
  std::vector<std::shared_ptr<const LoopProgram>> programs;  // every loop, for coverage
  int loops = 0, sweeps = 0;

  void add_source(const std::string& s) {
    if (seen.insert(s).second) sources.push_back(s);
  }
  // Every fused group's kernel and every row sweep's; each must render.
  void add(const LoweredProgram& lp, const std::string& what) {
    const StepSchedule& s = lp.schedule;
    for (size_t g = 0; g < s.groups.size(); ++g) {
      if (!s.groups[g].program) continue;
      const LoopProgram& p = *s.groups[g].program;
      const std::string problem = cuda_loop_problem(p);
      ADD_FAILURE_IF(!problem.empty(), what + ": group " + std::to_string(g) + ": " + problem);
      if (!problem.empty()) continue;
      add_source(cuda_loop_kernel(p).source);
      programs.push_back(s.groups[g].program);
      ++loops;
    }
    for (const RowSweep& sw : s.sweeps) {
      const std::vector<CudaSweepLoop> loops_of = cuda_sweep_loops(lp.jaxpr, s, sw);
      const std::string problem = cuda_sweep_problem(loops_of, sw.rows, sw.row_len);
      ADD_FAILURE_IF(!problem.empty(), what + ": a sweep: " + problem);
      if (!problem.empty()) continue;
      add_source(cuda_sweep_kernel(loops_of, sw.rows, sw.row_len).source);
      ++sweeps;
    }
  }
  static void ADD_FAILURE_IF(bool bad, const std::string& text) {
    if (bad) ADD_FAILURE() << text;
  }
};

// Compiles every source for every architecture on a few threads; returns
// the number of CUBINs made.
int compile_all(const std::vector<std::string>& sources, const std::vector<int>& archs) {
  std::vector<std::pair<size_t, int>> jobs;
  for (size_t i = 0; i < sources.size(); ++i) {
    for (int arch : archs) jobs.emplace_back(i, arch);
  }
  std::vector<std::string> errors(jobs.size());
  std::vector<size_t> sizes(jobs.size(), 0);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j; (j = next++) < jobs.size();) {
      try {
        sizes[j] = compile_cubin(sources[jobs[j].first], jobs[j].second)->bytes.size();
      } catch (const std::exception& e) {
        errors[j] = e.what();
      }
    }
  };
  const unsigned n = std::clamp(std::thread::hardware_concurrency(), 2u, 4u);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  int made = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_TRUE(errors[j].empty()) << "sm_" << jobs[j].second << ": " << errors[j];
    EXPECT_TRUE(!errors[j].empty() || sizes[j] > 0) << "sm_" << jobs[j].second << ": an empty CUBIN";
    made += sizes[j] > 0;
  }
  return made;
}

// Every operation of the dialect on x and y (same shape and dtype, a float
// dtype), summed into one value so that the loops keep each.
Array float_chain(const Array& x, const Array& y, const Array& row, const Array& col, const Array& scalar) {
  const DType t = x.dtype();
  std::vector<Array> terms;
  for (auto f :
       {lax::neg, lax::abs, lax::sign, lax::exp, lax::expm1, lax::log, lax::log1p, lax::sqrt, lax::rsqrt, lax::cbrt,
        lax::tanh, lax::logistic, lax::erf, lax::erf_inv, lax::sin, lax::cos, lax::floor, lax::ceil}) {
    terms.push_back(f(x));
  }
  terms.push_back(lax::round(x, lax::RoundingMethod::away_from_zero));
  terms.push_back(lax::round(x, lax::RoundingMethod::to_nearest_even));
  for (auto f : {lax::add, lax::sub, lax::mul, lax::div, lax::max, lax::min, lax::rem, lax::pow}) {
    terms.push_back(f(x, y));
  }
  for (auto f : {lax::eq, lax::ne, lax::lt, lax::le, lax::gt, lax::ge}) terms.push_back(lax::select_n(f(x, y), {x, y}));
  terms.push_back(lax::select_n(lax::is_finite(x), {y, x}));
  terms.push_back(lax::integer_pow(x, 3));
  terms.push_back(lax::integer_pow(y, -2));
  const Array as_int = lax::convert_element_type(x, DType::i32);  // float -> int32
  terms.push_back(lax::convert_element_type(as_int, t));          // int32 -> float
  const Array mask = lax::convert_element_type(y, DType::bool_);  // float -> bool
  terms.push_back(lax::convert_element_type(mask, t));            // bool -> float
  const DType other = t == DType::f32 ? DType::bf16 : DType::f32;
  const Array widened = lax::convert_element_type(x, other);
  terms.push_back(lax::convert_element_type(lax::mul(widened, widened), t));  // between f32 and bf16
  // Broadcast views (a row along the columns, a column along the rows) and
  // a splat.
  const Shape& s = x.shape();
  terms.push_back(lax::broadcast_in_dim(row, s.dims(), {1}));
  terms.push_back(lax::broadcast_in_dim(col, s.dims(), {0}));
  terms.push_back(lax::mul(x, lax::broadcast_in_dim(scalar, s.dims(), {})));
  Array total = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) total = lax::add(total, terms[i]);
  return total;
}

Array int_chain(const Array& a, const Array& b, const Array& x) {
  std::vector<Array> terms;
  for (auto f : {lax::neg, lax::abs, lax::sign, lax::bitwise_not}) terms.push_back(f(a));
  for (auto f :
       {lax::add, lax::sub, lax::mul, lax::div, lax::rem, lax::pow, lax::max, lax::min, lax::bitwise_and,
        lax::bitwise_or, lax::bitwise_xor, lax::shift_left, lax::shift_right_logical, lax::shift_right_arithmetic}) {
    terms.push_back(f(a, b));
  }
  for (auto f : {lax::eq, lax::ne, lax::lt, lax::le, lax::gt, lax::ge}) terms.push_back(lax::select_n(f(a, b), {a, b}));
  terms.push_back(lax::integer_pow(a, 3));
  terms.push_back(lax::integer_pow(b, -1));
  const Array mask = lax::convert_element_type(b, DType::bool_);  // int32 -> bool
  terms.push_back(lax::convert_element_type(mask, DType::i32));   // bool -> int32
  terms.push_back(lax::convert_element_type(x, DType::i32));      // float -> int32
  Array total = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) total = lax::add(total, terms[i]);
  return lax::convert_element_type(total, DType::f32);  // int32 -> float
}

Array layer_norm(const Array& x, const Array& g, const Array& b) {
  const Array mu = mean(x, {-1}, true);
  const Array var = mean(square(x - mu), {-1}, true);
  return (x - mu) * rsqrt(var + 1e-5) * g + b;
}

// What the loops of a set compute: (table, op) of every instruction, per
// operand dtype.
std::set<std::string> instructions_of(const std::vector<std::shared_ptr<const LoopProgram>>& programs) {
  std::set<std::string> out;
  for (const auto& p : programs) {
    for (const FusedInstr& ins : p->instrs) {
      const std::string dt = dtype_name(ins.dtype);
      switch (ins.kind) {
        case FusedInstr::Kind::unary: out.insert(dt + " unary " + unary_op_name(UnaryOp(ins.op))); break;
        case FusedInstr::Kind::binary: out.insert(dt + " binary " + binary_op_name(BinaryOp(ins.op))); break;
        case FusedInstr::Kind::compare: out.insert(dt + " compare " + std::to_string(ins.op)); break;
        case FusedInstr::Kind::is_finite: out.insert(dt + " is_finite"); break;
        case FusedInstr::Kind::integer_pow:
          out.insert(dt + " integer_pow" + (ins.exponent < 0 ? " negative" : ""));
          break;
        case FusedInstr::Kind::convert: out.insert(dt + " convert " + dtype_name(ins.out_dtype)); break;
        case FusedInstr::Kind::select_n:
          out.insert(std::string("select ") + dtype_name(p->slots[size_t(ins.args[1])].dtype));
          break;
      }
    }
  }
  return out;
}

TEST(CudaCodegen, TheDialectRendersEveryOperationOrListsItAsLeftOut) {
  const LoopDialect& d = cuda_dialect();
  std::map<std::pair<std::string, int>, std::string> left;
  for (const LeftOut& l : cuda_dialect_left_out()) left[{std::string(l.table), l.op}] = std::string(l.why);
  auto check = [&](const std::string& table, int n, auto&& tmpl, auto&& name) {
    for (int op = 0; op < n; ++op) {
      const bool listed = left.count({table, op}) > 0;
      EXPECT_NE(tmpl(op).empty(), !listed) << table << " " << name(op)
                                           << (listed ? " is listed as left out but has a "
                                                        "template"
                                                      : " has neither a template nor a "
                                                        "reason to be left out");
    }
  };
  auto un = [](int op) { return unary_op_name(UnaryOp(op)); };
  auto bin = [](int op) { return binary_op_name(BinaryOp(op)); };
  check(
      "unary", kNumUnaryOps, [&](int op) { return d.unary[size_t(op)]; }, un);
  check(
      "binary", kNumBinaryOps, [&](int op) { return d.binary[size_t(op)]; }, bin);
  check(
      "unary_int", kNumUnaryOps, [&](int op) { return d.unary_int[size_t(op)]; }, un);
  check(
      "binary_int", kNumBinaryOps, [&](int op) { return d.binary_int[size_t(op)]; }, bin);
  for (int op = 0; op < kNumCompareOps; ++op) {
    EXPECT_FALSE(d.compare_float[size_t(op)].empty()) << op;
    EXPECT_FALSE(d.compare_int[size_t(op)].empty()) << op;
  }
  for (std::string_view t : {d.round_bf16, d.is_finite, d.integer_pow, d.integer_pow_int, d.select, d.select_int,
                             d.mask_to_float, d.float_to_mask, d.int_to_float, d.float_to_int, d.int_to_mask,
                             d.mask_to_int, d.let_float, d.let_int, d.let_mask}) {
    EXPECT_FALSE(t.empty());
  }
  for (SlotFormat f : {SlotFormat::f32, SlotFormat::bf16, SlotFormat::i32, SlotFormat::boolean}) {
    EXPECT_FALSE(d.load[size_t(f)].empty() || d.splat[size_t(f)].empty() || d.store[size_t(f)].empty());
  }
  for (const LeftOut& l : cuda_dialect_left_out()) EXPECT_FALSE(l.why.empty());
}

TEST(CudaCodegen, EveryKernelOfTheTestProgramsCompilesForSm80AndSm90) {
  ScopedCacheDir cache;
  KernelSet set;
  for (DType t : {DType::f32, DType::bf16}) {
    const Array x = random_array({24, 40}, t, 1), y = random_array({24, 40}, t, 2);
    const Array row = random_array({40}, t, 3), col = random_array({24}, t, 4), s = random_array({}, t, 5);
    set.add(lower_for_cuda(make_jaxpr(float_chain)(x, y, row, col, s)), std::string("float chain ") + dtype_name(t));
  }
  const Array a = random_array({24, 40}, DType::i32, 6, -50, 50), b = random_array({24, 40}, DType::i32, 7, -3, 40);
  set.add(lower_for_cuda(make_jaxpr(int_chain)(a, b, random_array({24, 40}, DType::f32, 8, -1e3, 1e3))), "int chain");

  // Softmax, layer norm and the cross entropy, forward and backward, in f32
  // and bf16; row lengths that take a warp, a block of 256 and of 1024.
  for (DType t : {DType::f32, DType::bf16}) {
    for (int64_t len : {100, 3000, 20000}) {
      const Array x = random_array({6, len}, t, 9), g = random_array({6, len}, t, 10);
      auto softmax_grad = [](const Array& l, const Array& w) {
        auto [p, back] = vjp([](const Array& v) { return nn::softmax(v, -1); }, l);
        return std::make_pair(p, back(w));
      };
      set.add(lower_for_cuda(make_jaxpr(softmax_grad)(x, g)), "softmax");
      const Array gain = random_array({len}, t, 11), bias = random_array({len}, t, 12);
      set.add(lower_for_cuda(make_jaxpr(value_and_grad<0, 1, 2>([](const Array& v, const Array& w, const Array& c) {
                return sum(layer_norm(v, w, c).astype(DType::f32));
              }))(x, gain, bias)),
              "layer norm");
    }
    const Array logits = random_array({2, 9, 700}, t, 13, -6, 6);
    const Array labels = random_array({2, 9}, DType::i32, 14, 0, 699);
    set.add(lower_for_cuda(make_jaxpr(value_and_grad<0>([](const Array& l, const Array& y) {
              return mean(nn::softmax_cross_entropy_with_integer_labels(l.astype(DType::f32), y));
            }))(logits, labels)),
            "cross entropy");
    set.add(lower_for_cuda(make_jaxpr([](const Array& l) { return -mean(nn::log_softmax(l, -1)); })(logits)),
            "log softmax");
  }
  // Row and column sums, maxima and minima of f32, bf16 and int32 values.
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    for (Shape shape : {Shape({8, 300}), Shape({4, 5000}), Shape({3000, 70}), Shape({1, 900})}) {
      const Array x = random_array(shape, t, 15, -20, 20);
      auto reductions = [](const Array& v) {
        const Array w = v * v;
        return std::make_tuple(sum(w, {-1}), max(w + v, {-1}), min(w - v, {-1}), sum(w * v, {0}), max(abs(v), {0}),
                               min(-v, {0}));
      };
      set.add(lower_for_cuda(make_jaxpr(reductions)(x)), std::string("reductions ") + dtype_name(t));
    }
  }

  // Every instruction of the dialect came up at least once: the float ones
  // in f32 and in bf16.
  const std::set<std::string> seen = instructions_of(set.programs);
  const LoopDialect& d = cuda_dialect();
  std::vector<std::string> missing;
  auto want = [&](const std::string& what) {
    if (!seen.count(what)) missing.push_back(what);
  };
  const std::string f32 = dtype_name(DType::f32), bf16 = dtype_name(DType::bf16), i32 = dtype_name(DType::i32),
                    boolean = dtype_name(DType::bool_);
  for (const std::string& t : {f32, bf16}) {
    for (int op = 0; op < kNumUnaryOps; ++op) {
      if (!d.unary[size_t(op)].empty()) want(t + " unary " + unary_op_name(UnaryOp(op)));
    }
    for (int op = 0; op < kNumBinaryOps; ++op) {
      if (!d.binary[size_t(op)].empty()) want(t + " binary " + binary_op_name(BinaryOp(op)));
    }
    for (int op = 0; op < kNumCompareOps; ++op) want(t + " compare " + std::to_string(op));
    for (const char* w : {" is_finite", " integer_pow", " integer_pow negative"}) want(t + w);
    want(t + " convert " + i32);
    want(t + " convert " + boolean);
    want(boolean + " convert " + t);
    want(i32 + " convert " + t);
    want("select " + t);
  }
  want(f32 + " convert " + bf16);
  want(bf16 + " convert " + f32);
  for (int op = 0; op < kNumUnaryOps; ++op) {
    if (!d.unary_int[size_t(op)].empty()) want(i32 + " unary " + unary_op_name(UnaryOp(op)));
  }
  for (int op = 0; op < kNumBinaryOps; ++op) {
    if (!d.binary_int[size_t(op)].empty()) want(i32 + " binary " + binary_op_name(BinaryOp(op)));
  }
  for (int op = 0; op < kNumCompareOps; ++op) want(i32 + " compare " + std::to_string(op));
  want(i32 + " integer_pow");
  want(i32 + " integer_pow negative");
  want(i32 + " convert " + boolean);
  want(boolean + " convert " + i32);
  want("select " + i32);
  std::string seen_text;
  for (const std::string& s : seen) seen_text += s + "; ";
  EXPECT_TRUE(missing.empty()) << "not in any loop: " << ::testing::PrintToString(missing) << "\nseen: " << seen_text;
  // Views and splats were read.
  bool view = false, splat = false;
  for (const auto& p : set.programs) {
    for (const FusedSlot& s : p->slots) {
      view = view || s.kind == FusedSlot::Kind::view;
      splat = splat || s.kind == FusedSlot::Kind::splat;
    }
  }
  EXPECT_TRUE(view && splat);
  EXPECT_GT(set.sweeps, 0);

  const NvrtcStats before = nvrtc_stats();
  const int made = compile_all(set.sources, {80, 90});
  EXPECT_EQ(made, 2 * int(set.sources.size()));
  EXPECT_EQ(nvrtc_stats().compiled - before.compiled, made);
  std::printf("%d loops and %d row sweeps: %zu kernels, %d CUBINs (%.1f s in NVRTC)\n", set.loops, set.sweeps,
              set.sources.size(), made, nvrtc_stats().compile_seconds - before.compile_seconds);
}

// A small GPT: 2 pre-LN layers of width 64, tied embeddings, GELU-tanh MLP.
std::unique_ptr<nn::TransformerLm> small_gpt(DType fprop_dtype) {
  auto ln = nn::tpl<nn::LayerNorm>();
  ln->epsilon = 1e-5;
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
  stack->num_layers = 2;
  stack->num_heads = 2;
  stack->hidden_dims = 4 * 64;
  stack->transformer_layer_params_tpl = block;
  auto position = nn::tpl<nn::TrainablePositionalEmbedding>();
  position->max_seq_length = 32;
  auto softmax = nn::tpl<nn::SharedEmbeddingSoftmax>();
  softmax->has_bias = false;
  nn::TransformerLm::HParams hp;
  hp.model_dims = 64;
  hp.vocab_size = 256;
  hp.fprop_dtype = fprop_dtype;
  hp.position_emb_tpl = position;
  hp.stacked_transformer_tpl = stack;
  hp.final_ln_tpl = ln;
  hp.softmax_tpl = softmax;
  return nn::build<nn::TransformerLm>(hp);
}

TEST(CudaCodegen, EveryFusedGroupOfTheGptStepCompilesForSm80AndSm90) {
  ScopedCacheDir cache;
  for (DType compute : {DType::f32, DType::bf16}) {
    auto model = small_gpt(compute);
    const Tree params = nn::init(*model, random::key(0))["params"];
    const Array ids = random::randint(random::key(1), {2, 32}, 0, 256);
    const Array labels = random::randint(random::key(2), {2, 32}, 0, 256);
    const Array paddings = zeros({2, 32});
    auto loss = [&](const Tree& p, const Array& x, const Array& y) {
      Tree variables = Tree::dict({{"params", p}});
      Array logits =
          nn::apply_with(*model, variables, [&](const nn::TransformerLm& m) { return m.fprop(x, paddings); }).output;
      return mean(nn::softmax_cross_entropy_with_integer_labels(logits.astype(DType::f32), y));
    };
    const LoweredProgram lp = lower_for_cuda(make_jaxpr(value_and_grad(loss))(params, ids, labels));
    KernelSet set;
    set.add(lp, std::string("GPT step ") + dtype_name(compute));
    size_t groups = 0;
    for (const FusionGroup& g : lp.schedule.groups) groups += g.program != nullptr;
    ASSERT_GT(groups, 10u);
    // Every fused group got a kernel, and the step has sweeps (softmax,
    // layer norm, the cross entropy).
    EXPECT_EQ(size_t(set.loops), groups);
    EXPECT_GT(set.sweeps, 0);
    const int made = compile_all(set.sources, {80, 90});
    EXPECT_EQ(made, 2 * int(set.sources.size()));
    std::printf("GPT step (%s): %zu fused groups, %d row sweeps: %zu kernels, %d CUBINs\n", dtype_name(compute), groups,
                set.sweeps, set.sources.size(), made);
  }
}

std::string small_kernel_source() {
  const Array x = random_array({16, 64}, DType::f32, 1);
  const LoweredProgram lp = lower_for_cuda(make_jaxpr([](const Array& v) { return exp(v) * 2.0f + 1.0f; })(x));
  return cuda_loop_kernel(*lp.schedule.groups.at(0).program).source;
}

TEST(CudaCodegen, TheCubinCacheHitsMissesAnotherArchitectureAndRebuildsADamagedEntry) {
  ScopedCacheDir cache;
  const std::string source = small_kernel_source();
  const NvrtcStats s0 = nvrtc_stats();
  const CubinPtr first = compile_cubin(source, 80);
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(nvrtc_stats().compiled, s0.compiled + 1);
  EXPECT_TRUE(fs::exists(fs::path(cache.path()) / (first->key + ".cubin")));

  const CubinPtr again = compile_cubin(source, 80);  // the disk cache
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->bytes, first->bytes);
  EXPECT_EQ(nvrtc_stats().cache_hits, s0.cache_hits + 1);
  EXPECT_EQ(nvrtc_stats().compiled, s0.compiled + 1);

  const CubinPtr other = compile_cubin(source, 90);  // another architecture: a miss
  EXPECT_FALSE(other->from_cache);
  EXPECT_NE(other->key, first->key);
  EXPECT_EQ(nvrtc_stats().compiled, s0.compiled + 2);

  // A CUBIN cut short is found by its record, named, and rebuilt.
  fs::resize_file(fs::path(cache.path()) / (first->key + ".cubin"), first->bytes.size() / 2);
  const CubinPtr rebuilt = compile_cubin(source, 80);
  EXPECT_FALSE(rebuilt->from_cache);
  EXPECT_EQ(rebuilt->bytes.size(), first->bytes.size());
  EXPECT_EQ(nvrtc_stats().damaged, s0.damaged + 1);
  EXPECT_EQ(nvrtc_stats().compiled, s0.compiled + 3);
  EXPECT_TRUE(compile_cubin(source, 80)->from_cache);

  // Another NVRTC version keys other entries: the version is in the key text.
  EXPECT_NE(nvrtc_version(), "");
}

TEST(CudaCodegen, CompilesInFlightAtOnceAreOneAndFuturesDeliver) {
  ScopedCacheDir cache;
  testing::ScopedEnv async("PAX_COMPILE", "async");  // the compiler threads
  const std::string source = small_kernel_source();
  const NvrtcStats s0 = nvrtc_stats();
  std::vector<CubinFuture> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(compile_cubin_async(source, 86));
  for (const CubinFuture& f : futures) EXPECT_GT(f.get()->bytes.size(), 0u);
  for (const CubinFuture& f : futures) EXPECT_TRUE(f.ready());
  // Each request after the first waited on it or hit the cache.
  const NvrtcStats s1 = nvrtc_stats();
  EXPECT_EQ(s1.compiled - s0.compiled, 1);
  // An error reaches the future's reader.
  CubinFuture bad = compile_cubin_async("this is not CUDA", 80);
  EXPECT_THROW(bad.get(), Error);
}

TEST(CudaCodegen, AnNvrtcErrorIsAPaxErrorWithTheLogAndTheSource) {
  ScopedCacheDir cache;
  const std::string source =
      "// a kernel with an error\nextern \"C\" __global__ void k(float* y) { y[0] = undefined_name; }\n";
  try {
    compile_cubin(source, 80);
    FAIL() << "compiled";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sm_80"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_name"), std::string::npos) << m;             // NVRTC's log
    EXPECT_NE(m.find("pax_kernel.cu("), std::string::npos) << m;             // its location
    EXPECT_NE(m.find("// a kernel with an error"), std::string::npos) << m;  // the source
  }
  EXPECT_THROW(nvrtc_options(7), Error);
}

// A loop of f16 values, a product of loops over another dtype.
LoopProgram f16_loop() {
  LoopProgram p;
  p.size = 64;
  p.num_inputs = 1;
  p.num_outputs = 1;
  FusedSlot in;
  in.kind = FusedSlot::Kind::input;
  in.dtype = DType::f16;
  in.arg = 0;
  FusedSlot r;
  r.dtype = DType::f16;
  p.slots = {in, r};
  FusedInstr ins;
  ins.kind = FusedInstr::Kind::unary;
  ins.op = uint8_t(UnaryOp::exp);
  ins.dtype = ins.out_dtype = DType::f16;
  ins.args = {0};
  ins.result = 1;
  p.instrs = {ins};
  p.stores = {FusedStore{1, 0}};
  return p;
}

TEST(CudaCodegen, TheLoweringTargetAnswersWhatTheKernelsRender) {
  const LoweringTarget& t = cuda_lowering_target();
  const LoopProgram f16 = f16_loop();
  EXPECT_NE(cuda_loop_problem(f16).find("f16"), std::string::npos) << cuda_loop_problem(f16);
  EXPECT_FALSE(t.tileable_loop(f16));
  EXPECT_THROW(cuda_loop_kernel(f16), Error);
  LoopProgram f32 = f16;
  for (FusedSlot& s : f32.slots) s.dtype = DType::f32;
  f32.instrs[0].dtype = f32.instrs[0].out_dtype = DType::f32;
  EXPECT_TRUE(cuda_renders(f32));
  EXPECT_TRUE(t.tileable_loop(f32));
  for (DType d : {DType::f32, DType::bf16, DType::i32}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      EXPECT_TRUE(t.fusable_reduction(op, d, 10, 100, 1));
      EXPECT_TRUE(t.fusable_reduction(op, d, 1, 100, 70000));
      EXPECT_TRUE(t.row_reduction_in_sweep(op, d, d, 100000));
    }
  }
  EXPECT_TRUE(t.row_reduction_in_sweep(ReduceOp::sum, DType::bf16, DType::f32, 10));
  EXPECT_FALSE(t.row_reduction_in_sweep(ReduceOp::sum, DType::f32, DType::bf16, 10));
  EXPECT_FALSE(t.fusable_reduction(ReduceOp::prod, DType::f32, 10, 100, 1));
  EXPECT_FALSE(t.fusable_reduction(ReduceOp::sum, DType::f16, 10, 100, 1));
  EXPECT_FALSE(t.fusable_reduction(ReduceOp::sum, DType::f32, 10, 100, 3));  // middle axes
  EXPECT_FALSE(t.fusable_reduction(ReduceOp::max, DType::bool_, 10, 100, 1));
  // Products: bf16 ones run as typed on cuBLASLt; mixed dtypes are widened.
  const Array a = random_array({8, 16}, DType::bf16, 1), b = random_array({16, 4}, DType::bf16, 2);
  const JaxprPtr j = make_jaxpr([](const Array& x, const Array& y) { return matmul(x, y); })(a, b);
  ASSERT_EQ(j->eqns.size(), 1u);
  EXPECT_TRUE(t.supports_op(*j, j->eqns[0]));
}

// ---------------------------------------------------------------------------
// Without a device, the kernels run on the host: their CUDA C built as C++
// by the system compiler over a shim that runs each block's threads as
// threads of the process, with __syncthreads, __syncwarp and warp shuffles
// as barriers over them (blocks one after another). Their index arithmetic,
// vector and scalar paths, views, splats, bf16 rounding and every exact
// operation of the dialect then give eager execution's bits, the
// transcendentals (the C library's functions here) its values within a few
// ulp, and the reductions and row sweeps its values up to the order of
// their sums.

constexpr const char* kHostShim = R"(// CUDA C built for the host (cuda_codegen_test.cc)
#include <math.h>
#include <pthread.h>
#include <string.h>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
#define __shared__ static
struct pax_dim3 { unsigned x = 0, y = 1, z = 1; };
static __thread pax_dim3 threadIdx, blockIdx;
static pax_dim3 blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
struct pax_block {
  pthread_barrier_t all, warps[32];
  unsigned long long exchange[1024];
};
static pax_block pax_shared_block;
static inline void __syncthreads() { pthread_barrier_wait(&pax_shared_block.all); }
static inline void __syncwarp() { pthread_barrier_wait(&pax_shared_block.warps[threadIdx.x / 32]); }
template <class V>
V __shfl_xor_sync(unsigned, V v, int lane_mask) {
  memcpy(&pax_shared_block.exchange[threadIdx.x], &v, sizeof(V));
  __syncwarp();
  V other;
  memcpy(&other, &pax_shared_block.exchange[threadIdx.x ^ unsigned(lane_mask)], sizeof(V));
  __syncwarp();
  return other;
}
struct pax_thread_arg {
  void* const* p;
  long long size;
  unsigned block, thread;
};
)";

// The kernel built for the host, with pax_emulate(pointers, size, grid,
// block) running every block in turn: its threads one after another, or as
// threads of the process when the kernel synchronises them.
std::shared_ptr<cpu::NativeLibrary> host_build(const CudaKernelSource& k) {
  std::string call = k.name + "(";
  for (int i = 0; i + 1 < k.num_params; ++i) call += "a->p[" + std::to_string(i) + "], ";
  call += "a->size);";
  std::string d = "static void* pax_thread(void* arg) {\n  pax_thread_arg* a = static_cast<pax_thread_arg*>(arg);\n";
  d += "  blockIdx.x = a->block;\n  threadIdx.x = a->thread;\n  " + call + "\n  return nullptr;\n}\n";
  d += "extern \"C\" void pax_emulate(void* const* p, long long size, unsigned grid, unsigned block) {\n";
  d += "  gridDim.x = grid;\n  blockDim.x = block;\n";
  d += "  static pax_thread_arg args[1024];\n  static pthread_t threads[1024];\n";
  d += "  for (unsigned b = 0; b < grid; ++b) {\n";
  d += "    for (unsigned t = 0; t < block; ++t) args[t] = {p, size, b, t};\n";
  const bool threaded = k.source.find("__syncthreads") != std::string::npos ||
                        k.source.find("__syncwarp") != std::string::npos ||
                        k.source.find("pax_group_reduce<") != std::string::npos;
  if (threaded) {
    d += "    pthread_barrier_init(&pax_shared_block.all, nullptr, block);\n";
    d += "    for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_init(&pax_shared_block.warps[w], nullptr, "
         "32);\n";
    d += "    pthread_attr_t attr;\n    pthread_attr_init(&attr);\n    pthread_attr_setstacksize(&attr, 1 << 18);\n";
    d += "    for (unsigned t = 0; t < block; ++t) pthread_create(&threads[t], &attr, pax_thread, &args[t]);\n";
    d += "    for (unsigned t = 0; t < block; ++t) pthread_join(threads[t], nullptr);\n";
    d += "    pthread_attr_destroy(&attr);\n    pthread_barrier_destroy(&pax_shared_block.all);\n";
    d += "    for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_destroy(&pax_shared_block.warps[w]);\n";
  } else {
    d += "    for (unsigned t = 0; t < block; ++t) pax_thread(&args[t]);\n";
  }
  d += "  }\n}\n";
  return cpu::build_native(kHostShim + k.source + d, {"-fno-strict-aliasing", "-pthread", "-O0"});
}

// Runs a lowered program of fused loops, row sweeps and reshapes with every
// buffer placed `shift` bytes past a 64-byte boundary.
class HostRunner {
 public:
  HostRunner(const LoweredProgram& lp, size_t shift) : lp_(lp), shift_(shift) {}

  std::vector<Array> run(const std::vector<Array>& args) {
    const Jaxpr& j = lp_.jaxpr;
    auto upload = [&](Var v, const Array& a) { a.copy_to_host(a.dtype(), buffer(v)); };
    for (size_t i = 0; i < args.size(); ++i) upload(j.invars[i], args[i]);
    for (size_t i = 0; i < j.constvars.size(); ++i) upload(j.constvars[i], j.consts[i]);
    const std::vector<int> sweep_of = lp_.schedule.sweep_of_steps();
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (st.kind == Step::Kind::alias) {
        alias_[j.eqns[st.index].outputs[0]] = j.eqns[st.index].inputs[0];
      } else if (sweep_of[k] >= 0) {
        const RowSweep& sw = lp_.schedule.sweeps[size_t(sweep_of[k])];
        if (sw.first == k && !run_sweep(sw)) return {};
      } else if (st.kind == Step::Kind::fused) {
        const FusionGroup& g = lp_.schedule.groups[st.index];
        std::vector<void*> ptrs;
        for (Var v : g.inputs) ptrs.push_back(buffer(v));
        for (Var v : g.outputs) ptrs.push_back(buffer(v));
        if (!launch(cuda_loop_kernel(*g.program), ptrs)) return {};
      } else {
        ADD_FAILURE() << "the host runs no kernel for " << prim_name(j.eqns[st.index].prim);
        return {};
      }
    }
    std::vector<Array> out;
    for (Var v : j.outvars) out.push_back(from_host(buffer(v), j.aval(v).shape, j.aval(v).dtype));
    return out;
  }

 private:
  bool run_sweep(const RowSweep& sw) {
    const Jaxpr& j = lp_.jaxpr;
    std::vector<void*> ptrs;
    for (size_t k = sw.first; k <= sw.last; ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (st.kind == Step::Kind::alias) {
        alias_[j.eqns[st.index].outputs[0]] = j.eqns[st.index].inputs[0];
        continue;
      }
      for (Var v : lp_.schedule.inputs(j, st)) ptrs.push_back(buffer(v));
      for (Var v : lp_.schedule.outputs(j, st)) ptrs.push_back(buffer(v));
    }
    return launch(cuda_sweep_kernel(cuda_sweep_loops(j, lp_.schedule, sw), sw.rows, sw.row_len), ptrs);
  }

  bool launch(const CudaKernelSource& k, const std::vector<void*>& ptrs) {
    EXPECT_EQ(int(ptrs.size()) + 1, k.num_params);
    const std::shared_ptr<cpu::NativeLibrary> lib = host_build(k);
    if (!lib) {
      ADD_FAILURE() << "the kernel does not build for the host:\n" << k.source;
      return false;
    }
    using Emulate = void (*)(void* const*, long long, unsigned, unsigned);
    reinterpret_cast<Emulate>(lib->symbol("pax_emulate"))(ptrs.data(), k.size, unsigned(k.grid_blocks),
                                                          unsigned(k.block_threads));
    return true;
  }

  void* buffer(Var v) {
    if (auto it = alias_.find(v); it != alias_.end()) return buffer(it->second);
    auto [it, fresh] = owned_.try_emplace(v);
    if (fresh) {
      const AVal& a = lp_.jaxpr.aval(v);
      it->second.assign(size_t(a.shape.numel()) * itemsize(a.dtype) + 128, 0);
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(it->second.data());
    return it->second.data() + ((64 - at % 64) % 64 + shift_);
  }

  const LoweredProgram& lp_;
  size_t shift_;
  std::map<Var, std::vector<unsigned char>> owned_;
  std::map<Var, Var> alias_;
};

// Equal bits, a NaN matching any NaN; or, with ulps > 0, values within that
// many units of the dtype's last place (of the larger magnitude).
::testing::AssertionResult same_values(const Array& got, const Array& want, double ulps) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got.aval().str() << ", want " << want.aval().str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const double eps = want.dtype() == DType::bf16 ? 0x1p-8 : 0x1p-23;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::memcmp(&g[i], &w[i], sizeof(double)) == 0 || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    const double tol = ulps * eps * std::max({std::abs(g[i]), std::abs(w[i]), 1e-30});
    if (ulps > 0 && !std::isnan(g[i]) && !std::isnan(w[i]) && std::abs(g[i] - w[i]) <= tol) continue;
    return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << w[i];
  }
  return ::testing::AssertionSuccess();
}

// The exact operations of the dialect, one output each.
std::vector<Array> exact_terms(const Array& x, const Array& y, const Array& row, const Array& col,
                               const Array& scalar) {
  const DType t = x.dtype();
  const Shape& s = x.shape();
  const Array positive = lax::add(lax::abs(x), lax::broadcast_in_dim(scalar, s.dims(), {}));  // a splat
  std::vector<Array> out;
  for (auto f : {lax::neg, lax::abs, lax::sign, lax::floor, lax::ceil, lax::erf}) out.push_back(f(x));
  out.push_back(lax::sqrt(positive));
  out.push_back(lax::rsqrt(positive));
  out.push_back(lax::round(lax::mul(x, y), lax::RoundingMethod::away_from_zero));
  out.push_back(lax::round(lax::mul(x, y), lax::RoundingMethod::to_nearest_even));
  for (auto f : {lax::add, lax::sub, lax::mul, lax::div, lax::max, lax::min, lax::rem}) out.push_back(f(x, y));
  for (auto f : {lax::eq, lax::ne, lax::lt, lax::le, lax::gt, lax::ge}) out.push_back(lax::select_n(f(x, y), {x, y}));
  out.push_back(lax::select_n(lax::is_finite(lax::div(x, y)), {y, x}));
  out.push_back(lax::integer_pow(x, 3));
  out.push_back(lax::integer_pow(y, -2));
  out.push_back(lax::convert_element_type(lax::convert_element_type(lax::mul(x, y), DType::i32), t));
  out.push_back(lax::convert_element_type(lax::convert_element_type(lax::floor(x), DType::bool_), t));
  const DType other = t == DType::f32 ? DType::bf16 : DType::f32;
  out.push_back(
      lax::convert_element_type(lax::mul(lax::convert_element_type(x, other), lax::convert_element_type(y, other)), t));
  out.push_back(lax::mul(x, lax::broadcast_in_dim(row, s.dims(), {1})));  // views
  out.push_back(lax::sub(lax::broadcast_in_dim(col, s.dims(), {0}), y));
  return out;
}

std::vector<Array> transcendental_terms(const Array& x, const Array& y) {
  const Array positive = lax::add(lax::abs(x), lax::abs(y));
  std::vector<Array> out;
  for (auto f : {lax::exp, lax::expm1, lax::tanh, lax::logistic, lax::sin, lax::cos, lax::cbrt}) out.push_back(f(x));
  for (auto f : {lax::log, lax::log1p}) out.push_back(f(positive));
  out.push_back(lax::erf_inv(lax::mul(x, y)));
  out.push_back(lax::pow(positive, y));
  return out;
}

std::vector<Array> int_terms(const Array& a, const Array& b, const Array& x) {
  std::vector<Array> out;
  for (auto f : {lax::neg, lax::abs, lax::sign, lax::bitwise_not}) out.push_back(f(a));
  for (auto f :
       {lax::add, lax::sub, lax::mul, lax::div, lax::rem, lax::pow, lax::max, lax::min, lax::bitwise_and,
        lax::bitwise_or, lax::bitwise_xor, lax::shift_left, lax::shift_right_logical, lax::shift_right_arithmetic}) {
    out.push_back(f(a, b));
  }
  for (auto f : {lax::eq, lax::ne, lax::lt, lax::le, lax::gt, lax::ge}) out.push_back(lax::select_n(f(a, b), {a, b}));
  out.push_back(lax::integer_pow(a, 3));
  out.push_back(lax::integer_pow(b, -1));
  out.push_back(lax::convert_element_type(lax::convert_element_type(b, DType::bool_), DType::i32));
  out.push_back(lax::convert_element_type(x, DType::i32));
  out.push_back(lax::convert_element_type(lax::mul(a, b), DType::f32));
  return out;
}

// Runs `lp` on the host aligned and misaligned, and compares each output
// with eager execution.
void check_on_host(const JaxprPtr& j, const std::vector<Array>& args, double ulps) {
  const LoweredProgram lp = lower_for_cuda(j);
  const std::vector<Array> want = eval_jaxpr(*j, args);
  for (size_t shift : {size_t(0), size_t(4)}) {  // the vector path, then the scalar one
    const std::vector<Array> got = HostRunner(lp, shift).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(same_values(got[i], want[i], ulps)) << "output " << i << ", buffers shifted by " << shift;
    }
  }
}

TEST(CudaCodegenOnHost, ElementwiseKernelsGiveEagerBits) {
  if (!cpu::native_compiler_available()) GTEST_SKIP() << "no C++ compiler";
  ScopedCacheDir cache;
  for (DType t : {DType::f32, DType::bf16}) {
    // 23 x 41: not a multiple of any vector width, so the scalar tail runs too.
    const Array x = random_array({23, 41}, t, 1, -3, 3), y = random_array({23, 41}, t, 2, -3, 3);
    const Array row = random_array({41}, t, 3), col = random_array({23}, t, 4), s = random_array({}, t, 5, 0.5, 1);
    check_on_host(make_jaxpr(exact_terms)(x, y, row, col, s), {x, y, row, col, s}, 0);
    // A few ulp apart: the C library's functions here, CUDA's on a device.
    check_on_host(make_jaxpr(transcendental_terms)(x, y), {x, y}, t == DType::f32 ? 8 : 1);
  }
  const Array a = random_array({23, 41}, DType::i32, 6, -3000, 3000), b = random_array({23, 41}, DType::i32, 7, -3, 40);
  const Array x = random_array({23, 41}, DType::f32, 8, -3e9, 3e9);
  check_on_host(make_jaxpr(int_terms)(a, b, x), {a, b, x}, 0);
}

// Values within rel times the largest magnitude of `want` (NaN where it
// has NaN).
::testing::AssertionResult close_values(const Array& got, const Array& want, double rel) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got.aval().str() << ", want " << want.aval().str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::isfinite(v) ? std::max(scale, std::abs(v)) : scale;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) ? std::isnan(g[i]) : std::abs(g[i] - w[i]) <= rel * scale) continue;
    return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << w[i];
  }
  return ::testing::AssertionSuccess();
}

TEST(CudaCodegenOnHost, ReductionsAndRowSweepsGiveEagerValues) {
  if (!cpu::native_compiler_available()) GTEST_SKIP() << "no C++ compiler";
  ScopedCacheDir cache;
  auto check = [](const JaxprPtr& j, const std::vector<Array>& args, double rel, int min_sweeps) {
    const LoweredProgram lp = lower_for_cuda(j);
    EXPECT_GE(int(lp.schedule.sweeps.size()), min_sweeps) << lp.schedule.str(lp.jaxpr);
    const std::vector<Array> want = eval_jaxpr(*j, args), got = HostRunner(lp, 0).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(close_values(got[i], want[i], rel)) << "output " << i;
  };
  // Sums in another order: within f32's (bf16's) rounding of the largest
  // value; maxima and minima, and int32 sums, exact.
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    const double rel = t == DType::f32 ? 1e-5 : t == DType::bf16 ? 2e-2 : 0;
    // Rows for a warp, a block of 256 and of 1024 threads; columns.
    for (Shape shape : {Shape({13, 300}), Shape({3, 5000}), Shape({2, 17000}), Shape({300, 70})}) {
      const Array x = random_array(shape, t, 15, -20, 20);
      auto reductions = [](const Array& v) {
        const Array w = v * v;
        return std::make_tuple(sum(w, {-1}), max(w + v, {-1}), min(w - v, {-1}), sum(w * v, {0}), max(abs(v), {0}),
                               min(-v, {0}));
      };
      check(make_jaxpr(reductions)(x), {x}, rel, 0);
    }
  }
  // Softmax and its gradient, layer norm and the cross entropy's loss and
  // gradient: row sweeps.
  for (DType t : {DType::f32, DType::bf16}) {
    const double rel = t == DType::f32 ? 1e-5 : 3e-2;
    for (int64_t len : {100, 3000, 17000}) {
      const Array x = random_array({5, len}, t, 9, -4, 4), g = random_array({5, len}, t, 10);
      auto softmax_grad = [](const Array& l, const Array& w) {
        auto [p, back] = vjp([](const Array& v) { return nn::softmax(v, -1); }, l);
        return std::make_pair(p, back(w));
      };
      check(make_jaxpr(softmax_grad)(x, g), {x, g}, rel, 1);
      const Array gain = random_array({len}, t, 11), bias = random_array({len}, t, 12);
      check(
          make_jaxpr([](const Array& v, const Array& w, const Array& c) { return layer_norm(v, w, c); })(x, gain, bias),
          {x, gain, bias}, rel, 1);
    }
    const Array logits = random_array({2, 9, 700}, t, 13, -6, 6);
    auto loss = [](const Array& l) {
      const Array lp = nn::log_softmax(l.astype(DType::f32), -1);
      return -mean(lp, {-1});
    };
    check(make_jaxpr(loss)(logits), {logits}, rel, 1);
  }
}

// ---------------------------------------------------------------------------
// With a device: the kernels of a lowered program run, step by step, and
// give eager execution's values.

class DeviceRunner {
 public:
  explicit DeviceRunner(const LoweredProgram& lp) : lp_(lp) {}
  ~DeviceRunner() {
    for (auto& [v, p] : owned_) cudaFree(p);
  }

  std::vector<Array> run(const std::vector<Array>& args) {
    const Jaxpr& j = lp_.jaxpr;
    EXPECT_EQ(args.size(), j.invars.size());
    auto upload = [&](Var v, const Array& a) {
      std::vector<unsigned char> bytes(nbytes(v));
      a.copy_to_host(a.dtype(), bytes.data());
      PAX_CUDA_CHECK(cudaMemcpy(buffer(v), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    };
    for (size_t i = 0; i < args.size(); ++i) upload(j.invars[i], args[i]);
    for (size_t i = 0; i < j.constvars.size(); ++i) upload(j.constvars[i], j.consts[i]);
    const std::vector<int> sweep_of = lp_.schedule.sweep_of_steps();
    for (size_t k = 0; k < lp_.schedule.steps.size(); ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (sweep_of[k] >= 0) {
        const RowSweep& sw = lp_.schedule.sweeps[size_t(sweep_of[k])];
        if (sw.first == k) run_sweep(sw);
        else if (st.kind == Step::Kind::alias) alias(j.eqns[st.index]);
        continue;
      }
      switch (st.kind) {
        case Step::Kind::alias: alias(j.eqns[st.index]); break;
        case Step::Kind::fused: run_loop(lp_.schedule.groups[st.index]); break;
        default:
          ADD_FAILURE() << "a step the test runner does not run: " << prim_name(j.eqns[st.index].prim);
          return {};
      }
    }
    PAX_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<Array> out;
    for (Var v : j.outvars) {
      std::vector<unsigned char> bytes(nbytes(v));
      PAX_CUDA_CHECK(cudaMemcpy(bytes.data(), buffer(v), bytes.size(), cudaMemcpyDeviceToHost));
      out.push_back(from_host(bytes.data(), j.aval(v).shape, j.aval(v).dtype));
    }
    return out;
  }

 private:
  size_t nbytes(Var v) const { return size_t(lp_.jaxpr.aval(v).shape.numel()) * itemsize(lp_.jaxpr.aval(v).dtype); }
  void* buffer(Var v) {
    if (auto it = alias_.find(v); it != alias_.end()) return buffer(it->second);
    if (auto it = owned_.find(v); it != owned_.end()) return it->second;
    void* p = nullptr;
    PAX_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(nbytes(v), 16)));
    return owned_[v] = p;
  }
  void alias(const Eqn& e) { alias_[e.outputs[0]] = e.inputs[0]; }
  void launch(const CudaKernelSource& k, std::vector<void*> pointers) {
    const int arch = device_info(0).arch;
    libraries_.push_back(std::make_unique<CudaKernelLibrary>(*compile_cubin(k.source, arch)));
    launch_kernel(libraries_.back()->kernel(k.name), k, pointers, nullptr);
    PAX_CUDA_CHECK(cudaGetLastError());
  }
  void run_loop(const FusionGroup& g) {
    std::vector<void*> ptrs;
    for (Var v : g.inputs) ptrs.push_back(buffer(v));
    for (Var v : g.outputs) ptrs.push_back(buffer(v));
    launch(cuda_loop_kernel(*g.program), ptrs);
  }
  void run_sweep(const RowSweep& sw) {
    std::vector<void*> ptrs;
    for (size_t k = sw.first; k <= sw.last; ++k) {
      const Step& st = lp_.schedule.steps[k];
      if (st.kind == Step::Kind::alias) {
        alias(lp_.jaxpr.eqns[st.index]);
        continue;
      }
      for (Var v : lp_.schedule.inputs(lp_.jaxpr, st)) ptrs.push_back(buffer(v));
      for (Var v : lp_.schedule.outputs(lp_.jaxpr, st)) ptrs.push_back(buffer(v));
    }
    launch(cuda_sweep_kernel(cuda_sweep_loops(lp_.jaxpr, lp_.schedule, sw), sw.rows, sw.row_len), ptrs);
  }

  const LoweredProgram& lp_;
  std::map<Var, void*> owned_;
  std::map<Var, Var> alias_;
  std::vector<std::unique_ptr<CudaKernelLibrary>> libraries_;
};

void expect_close(const Array& got, const Array& want, double rtol) {
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], rtol * (std::abs(w[i]) + 1e-6)) << "element " << i;
  }
}

TEST(CudaCodegenDevice, LoopsReductionsAndSweepsGiveEagerValues) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ScopedCacheDir cache;
  for (DType t : {DType::f32, DType::bf16}) {
    const double rtol = t == DType::f32 ? 1e-5 : 2e-2;
    const Array x = random_array({37, 1000}, t, 1, -4, 4), y = random_array({37, 1000}, t, 2, -4, 4);
    const Array row = random_array({1000}, t, 3);
    auto f = [](const Array& a, const Array& b, const Array& r) {
      const Array e = nn::softmax(a, -1);
      return std::make_tuple(a * b + r, e, sum(exp(a), {0}), max(a - b, {-1}));
    };
    const JaxprPtr j = make_jaxpr(f)(x, y, row);
    const LoweredProgram lp = lower_for_cuda(j);
    const std::vector<Array> args = {x, y, row};
    const std::vector<Array> want = eval_jaxpr(*j, args);
    const std::vector<Array> got = DeviceRunner(lp).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], rtol);
  }
}

}  // namespace
}  // namespace pax::cuda

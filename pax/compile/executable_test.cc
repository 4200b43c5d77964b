// The compiled executable end to end: nested jit inlined, constant arguments
// folded, a program of ~2000 equations, the printed schedule, cost analysis,
// impl-rule steps, outputs that alias inputs or constants, concurrent calls
// and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "pax/api/transforms.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/trace.h"
#include "pax/ir/executable.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/prims/registry.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

bool uses(const Jaxpr& j, Prim p) {
  return std::any_of(j.eqns.begin(), j.eqns.end(), [p](const Eqn& e) { return e.prim == p; });
}

TEST(Executable, NestedJitIsInlined) {
  auto inner = jit([](const Array& x) { return tanh(x) * 2.0; });
  auto outer = [inner](const Array& x) { return sum(inner(x) + inner(x * 3.0)); };
  Array x = random_array({100}, DType::f32, 1);
  auto compiled = jit(outer).lower(x).compile();
  const Jaxpr& opt = compiled.executable().optimized_jaxpr();
  EXPECT_FALSE(uses(opt, Prim::jit_call));
  EXPECT_TRUE(uses(opt, Prim::tanh));
  EXPECT_TRUE(all_close(compiled(x), outer(x), 1e-6, 1e-6));
}

TEST(Executable, ConstantArgumentsAreFolded) {
  // As jit passes its closed-over constants: leading inputs with known values.
  Array ones3 = ones({3});
  Array w = array<float>({1, 2, 3});
  auto traced = make_jaxpr([ones3, w](const Array& x) { return x * ones3 + exp(w); })(zeros({3}));
  auto program = convert_constvars(*traced);
  CompileOptions options;
  options.constant_args = traced->consts;
  auto exe = compile(program, options);
  EXPECT_EQ(exe->optimized_jaxpr().eqns.size(), 1u) << exe->str();  // x + const
  std::vector<Array> args = traced->consts;
  Array x = random_array({3}, DType::f32, 2);
  args.push_back(x);
  EXPECT_TRUE(all_close(exe->run(args)[0], x * ones3 + exp(w), 0, 0));
  // Without them, the same program keeps its equations.
  auto plain = compile(program);
  EXPECT_GT(plain->optimized_jaxpr().eqns.size(), 1u);
  EXPECT_TRUE(all_close(plain->run(args)[0], x * ones3 + exp(w), 0, 0));
  options.constant_args = {zeros({4})};
  EXPECT_PAX_ERROR(compile(program, options), "constant argument 0");
}

TEST(Executable, FoldLimitOption) {
  Array w = random_array({50, 50}, DType::f32, 3);
  auto jaxpr = make_jaxpr([w](const Array& x) { return x + exp(w); })(zeros({50, 50}));
  CompileOptions small;
  small.fold_limit = 100;
  EXPECT_FALSE(uses(compile(jaxpr)->optimized_jaxpr(), Prim::exp));
  EXPECT_TRUE(uses(compile(jaxpr, small)->optimized_jaxpr(), Prim::exp));
}

// A deep stack of small dense layers, unrolled: 8 equations per layer.
Array mlp_stack(const Array& x, const Array& w, const Array& b) {
  Array h = x;
  for (int layer = 0; layer < 260; ++layer) {
    Array z = lax::add(lax::dot_general(h, w, {{1}, {0}, {}, {}}), lax::broadcast_in_dim(b, {4, 16}, {1}));
    h = lax::mul(lax::tanh(z), lax::logistic(lax::neg(z)));
    h = lax::add(h, lax::mul(z, lax::broadcast_in_dim(scalar(0.01f), {4, 16}, {})));
  }
  return h;
}

TEST(Executable, TwoThousandEquationsCompile) {
  Array x = random_array({4, 16}, DType::f32, 4);
  Array w = random_array({16, 16}, DType::f32, 5, -0.3, 0.3);
  Array b = random_array({16}, DType::f32, 6);
  auto jaxpr = make_jaxpr(mlp_stack)(x, w, b);
  EXPECT_GE(jaxpr->eqns.size(), 2000u);
  auto exe = compile(jaxpr);
  typecheck(exe->optimized_jaxpr());
  EXPECT_TRUE(all_close(exe->run({x, w, b})[0], mlp_stack(x, w, b), 0, 0));
}

// A layer's bias add joins its product (oneDNN's matmul bias): the compiled
// program has no separate add, and the values and gradients are eager's.
TEST(Executable, BiasAddsJoinTheirProducts) {
  auto layer = [](const Array& x, const Array& w, const Array& b) {
    return sum(square(maximum(einsum("BTD,DNH->BTNH", x, w) + b, 0.0)));
  };
  const Array x = random_array({4, 6, 16}, DType::f32, 1), w = random_array({16, 3, 8}, DType::f32, 2);
  const Array b = random_array({3, 8}, DType::f32, 3);
  auto exe = compile(make_jaxpr(layer)(x, w, b));
  const Jaxpr& j = exe->optimized_jaxpr();
  EXPECT_TRUE(std::any_of(j.eqns.begin(), j.eqns.end(), [](const Eqn& e) {
    return e.prim == Prim::dot_general && e.inputs.size() == 3 && e.params.has("has_bias");
  })) << j.str();
  EXPECT_TRUE(all_close(exe->run({x, w, b})[0], layer(x, w, b), 1e-5, 1e-5));
  auto grads = [&](const Array& x, const Array& w, const Array& b) { return grad<0, 1, 2>(layer)(x, w, b); };
  auto jitted = jit(grads);
  const auto want = grads(x, w, b), got = jitted(x, w, b);
  EXPECT_TRUE(all_close(std::get<1>(got), std::get<1>(want), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(std::get<2>(got), std::get<2>(want), 1e-4, 1e-4));
}

// A GELU MLP's backward multiplies the second product's gradient by the
// derivative the forward kept: that multiply joins the product (oneDNN's
// binary post-op), and the gradients are eager's.
TEST(Executable, GeluDerivativesJoinTheProductsOfTheBackward) {
  auto mlp = [](const Array& x, const Array& w1, const Array& w2) {
    return sum(square(matmul(nn::gelu(matmul(x, w1)), w2)));
  };
  const Array x = random_array({24, 16}, DType::f32, 1), w1 = random_array({16, 32}, DType::f32, 2);
  const Array w2 = random_array({32, 8}, DType::f32, 3);
  auto grads = [&](const Array& x, const Array& w1, const Array& w2) { return grad<0, 1, 2>(mlp)(x, w1, w2); };
  auto exe = compile(make_jaxpr(grads)(x, w1, w2));
  const Jaxpr& j = exe->optimized_jaxpr();
  EXPECT_TRUE(std::any_of(j.eqns.begin(), j.eqns.end(), [](const Eqn& e) {
    return e.prim == Prim::dot_general && e.params.has("has_multiplier");
  })) << j.str();
  const auto want = grads(x, w1, w2);
  const std::vector<Array> got = exe->run({x, w1, w2});
  EXPECT_TRUE(all_close(got[0], std::get<0>(want), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[1], std::get<1>(want), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[2], std::get<2>(want), 1e-5, 1e-5));
}

// A ReLU layer's product applies the ReLU (after its bias) in its kernel,
// through the reshape of its rows, and the backward's mask is taken of the
// ReLU's result: values and gradients as the eager program's.
TEST(Executable, ReLUsJoinTheirProducts) {
  auto mlp = [](const Array& x, const Array& w1, const Array& b1, const Array& w2) {
    const Array h = nn::relu(reshape(matmul(x, w1), {4, 6, 32}) + b1);
    return sum(square(matmul(h, w2)));
  };
  const Array x = random_array({24, 16}, DType::f32, 1), w1 = random_array({16, 32}, DType::f32, 2);
  const Array b1 = random_array({32}, DType::f32, 3), w2 = random_array({32, 8}, DType::f32, 4);
  auto grads = [&](const Array& x, const Array& w1, const Array& b1, const Array& w2) {
    return grad<0, 1, 2, 3>(mlp)(x, w1, b1, w2);
  };
  auto exe = compile(make_jaxpr(grads)(x, w1, b1, w2));
  const Jaxpr& j = exe->optimized_jaxpr();
  EXPECT_TRUE(std::any_of(j.eqns.begin(), j.eqns.end(), [](const Eqn& e) {
    return e.prim == Prim::dot_general && e.params.has("has_relu") && e.params.has("has_bias");
  })) << j.str();
  const auto want = grads(x, w1, b1, w2);
  const std::vector<Array> got = exe->run({x, w1, b1, w2});
  EXPECT_TRUE(all_close(got[0], std::get<0>(want), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[1], std::get<1>(want), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[2], std::get<2>(want), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(got[3], std::get<3>(want), 1e-5, 1e-5));
}

// While recording, every step is an event named by its operation and shapes,
// in its category (the trace-event JSON of pax/core/trace.h).
TEST(Executable, TracesEveryStepWithItsShapes) {
  auto f = [](const Array& x, const Array& w) { return maximum(matmul(exp(x) * 2.0, w) + 1.0, 0); };
  const Array x = random_array({4, 8}, DType::f32, 1), w = random_array({8, 2}, DType::f32, 2);
  auto exe = compile(make_jaxpr(f)(x, w));
  trace::start();
  // Read back, so that a device that runs programs on a stream of its own
  // (the sim device) has run it before the recording stops.
  (void)exe->run({x, w})[0].to_vector<float>();
  const std::string doc = trace::stop("test");
  EXPECT_NE(doc.find("\"cat\": \"gemm\", \"name\": \"dot_general["), std::string::npos) << doc;
  EXPECT_NE(doc.find("f32[4,8], f32[8,2] -> f32[4,2]"), std::string::npos) << doc;
  EXPECT_NE(doc.find("\"cat\": \"fusion\", \"name\": \"fusion{"), std::string::npos) << doc;
  (void)exe->run({x, w})[0].to_vector<float>();  // not recording
  EXPECT_EQ(trace::stop("test"), "");
}

TEST(Executable, PrintsFusedSchedule) {
  auto f = [](const Array& x, const Array& w) { return maximum(matmul(exp(x) * 2.0, w) + 1.0, 0); };
  auto exe = compile(make_jaxpr(f)(zeros({4, 8}), zeros({8, 2})));
  const std::string s = exe->str();
  EXPECT_NE(s.find("fusion[size=32]{"), std::string::npos) << s;        // exp, then a multiply
  EXPECT_NE(s.find("fusion[size=8, chain]{"), std::string::npos) << s;  // (z + 1) max 0 in registers
  EXPECT_NE(s.find("dot_general"), std::string::npos) << s;
  EXPECT_NE(s.find("memory: arena"), std::string::npos) << s;
}

// prims.def's families and cost classes: every elementwise primitive costs a
// flop or a transcendental per element, except the bit-for-bit reinterpretation.
TEST(Cost, ClassesComeFromPrimsDef) {
  for (int i = 0; i < kNumPrims; ++i) {
    const Prim p = Prim(i);
    if (!is_elementwise(p) || p == Prim::bitcast_convert_type) continue;
    EXPECT_TRUE(prim_cost(p) == PrimCost::elementwise || prim_cost(p) == PrimCost::transcendental) << p;
  }
  EXPECT_EQ(prim_family(Prim::erf_inv), PrimFamily::unary);
  EXPECT_EQ(prim_family(Prim::select_n), PrimFamily::binary);
  EXPECT_EQ(prim_family(Prim::scan), PrimFamily::control);
  EXPECT_EQ(prim_cost(Prim::tanh), PrimCost::transcendental);
  EXPECT_EQ(prim_cost(Prim::reduce_sum), PrimCost::per_input);
  EXPECT_EQ(prim_cost(Prim::reshape), PrimCost::none);
  EXPECT_FALSE(is_elementwise(Prim::dot_general));
}

// prims.def's kernel and recompute columns agree with what is registered:
// every primitive with a kernel operation is elementwise with a CPU kernel
// (backend/cpu/kernels_elementwise.cc) and a batching rule; every elementwise
// primitive batches; only elementwise primitives are recomputed by fused
// loops.
TEST(Prims, KernelColumnsComeFromPrimsDef) {
  int with_op = 0;
  for (int i = 0; i < kNumPrims; ++i) {
    const Prim p = Prim(i);
    const PrimDef& def = prim_def(p);
    const ElementwiseKernel k = prim_kernel(p);
    if (is_elementwise(p)) EXPECT_NE(def.batch, nullptr) << p;
    if (k.kind != ElementwiseKernel::Kind::none && k.kind != ElementwiseKernel::Kind::special) {
      EXPECT_NE(prim_accepts(p), std::nullopt) << p;
    }
    if (prim_recomputable(p)) EXPECT_TRUE(is_elementwise(p) && k.kind != ElementwiseKernel::Kind::none) << p;
    if (k.kind == ElementwiseKernel::Kind::none) continue;
    EXPECT_TRUE(is_elementwise(p)) << p;
    EXPECT_NE(cpu::cpu_kernel(p), nullptr) << p;
    with_op += k.kind != ElementwiseKernel::Kind::special;
  }
  // Every operation is some primitive's, except round_away / round_even
  // (round's kernel, with a parameter).
  EXPECT_EQ(with_op, (kNumUnaryOps - 2) + kNumBinaryOps + kNumCompareOps);
  EXPECT_EQ(prim_kernel(Prim::exp).kind, ElementwiseKernel::Kind::unary);
  EXPECT_EQ(prim_kernel(Prim::exp).op, uint8_t(UnaryOp::exp));
  EXPECT_EQ(prim_kernel(Prim::shift_left).op, uint8_t(BinaryOp::shift_left));
  EXPECT_EQ(prim_kernel(Prim::ge).kind, ElementwiseKernel::Kind::compare);
  EXPECT_EQ(prim_kernel(Prim::ge).op, uint8_t(CompareOp::ge));
  EXPECT_EQ(prim_kernel(Prim::select_n).kind, ElementwiseKernel::Kind::special);
  EXPECT_EQ(prim_kernel(Prim::bitcast_convert_type).kind, ElementwiseKernel::Kind::none);
  EXPECT_EQ(prim_accepts(Prim::shift_left), Accepts::integer);
  EXPECT_EQ(prim_accepts(Prim::dot_general), std::nullopt);
  EXPECT_PAX_ERROR(lax::exp(array<int32_t>({1, 2})), "floating");  // the accepts column, checked
  EXPECT_TRUE(prim_recomputable(Prim::mul));
  EXPECT_FALSE(prim_recomputable(Prim::exp));
  // A kernel computes what its operation computes: exp through UnaryOp::exp.
  const Array x = array<float>({0.0f, 1.0f, -2.0f});
  const std::vector<float> y = exp(x).to_vector<float>();
  EXPECT_FLOAT_EQ(y[1], std::exp(1.0f));
  EXPECT_FLOAT_EQ(y[2], std::exp(-2.0f));
}

TEST(Cost, FlopsTranscendentalsAndBytes) {
  auto dot = make_jaxpr([](const Array& a, const Array& b) { return matmul(a, b); })(zeros({4, 8}), zeros({8, 2}));
  EXPECT_EQ(cost_analysis(*dot).flops, 2.0 * 4 * 2 * 8);
  EXPECT_EQ(cost_analysis(*dot).bytes_accessed, 4.0 * (32 + 16 + 8));
  auto batched =
      make_jaxpr([](const Array& a, const Array& b) { return matmul(a, b); })(zeros({3, 4, 8}), zeros({3, 8, 5}));
  EXPECT_EQ(cost_analysis(*batched).flops, 2.0 * 3 * 4 * 5 * 8);
  auto conv = make_jaxpr([](const Array& x, const Array& k) {
    return lax::conv_general_dilated(x, k, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1},
                                     lax::conv_dimension_numbers("NCHW", "OIHW", "NCHW"));
  })(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}));
  EXPECT_EQ(cost_analysis(*conv).flops, 2.0 * (4 * 6 * 6) * (3 * 3) * 3);
  auto chain = make_jaxpr([](const Array& x) { return sum(exp(x) * 2.0); })(zeros({100}));
  const CostAnalysis before = cost_analysis(*chain);
  EXPECT_EQ(before.transcendentals, 100);
  EXPECT_EQ(before.flops, 100 + 100);  // the multiply and the sum
  // After fusion the loop reads x and writes the sum once.
  const CostAnalysis after = compile(chain)->cost();
  EXPECT_EQ(after.flops, before.flops);
  EXPECT_EQ(after.transcendentals, before.transcendentals);
  EXPECT_EQ(after.bytes_accessed, 4.0 * 100 + 4.0 * 1 + 4.0 /* the literal */);
  EXPECT_LT(after.bytes_accessed, before.bytes_accessed);
}

TEST(Executable, CustomVjpRunsThroughItsRule) {
  auto clip_grad = custom_vjp([](const Array& x) { return x * 2.0; },
                              [](const Array& x) { return std::make_pair(x * 2.0, x); },
                              [](const Array&, const Array& g) { return clip(g, -1.0, 1.0); });
  auto f = [clip_grad](const Array& x) { return sum(exp(clip_grad(x))); };
  Array x = random_array({10}, DType::f32, 6);
  EXPECT_TRUE(all_close(jit(f)(x), f(x), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(jit(grad(f))(x), grad(f)(x), 1e-6, 1e-6));
}

TEST(Executable, OutputsAliasingInputsAndConstants) {
  Array c = array<float>({7, 8});
  auto f = [c](const Array& x) { return std::make_tuple(x, reshape(x, {6}), c, stop_gradient(x)); };
  Array x = random_array({2, 3}, DType::f32, 7);
  auto out = jit(f)(x);
  // The CPU returns the argument's own buffer; a device whose results are
  // filled in on its stream copies it (aliasing is an optimisation).
  if (x.device().kind == DeviceKind::cpu) {
    EXPECT_EQ(testing::memory_address(std::get<0>(out)), testing::memory_address(x));
    EXPECT_EQ(testing::memory_address(std::get<1>(out)), testing::memory_address(x));
  }
  EXPECT_EQ(std::get<1>(out).shape(), Shape({6}));
  EXPECT_TRUE(all_close(std::get<2>(out), {7, 8}));
  EXPECT_TRUE(all_close(std::get<3>(out), x, 0, 0));
}

TEST(Executable, ConcurrentCalls) {
  auto f = [](const Array& x) { return sum(tanh(x) * 3.0 + 1.0, -1); };
  Array x = random_array({64, 500}, DType::f32, 8);
  auto exe = compile(make_jaxpr(f)(x));
  Array want = exe->run({x})[0];
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 20; ++i) all = all && bool(all_close(exe->run({x})[0], want, 0, 0));
      ok[size_t(t)] = all;
    });
  }
  for (auto& t : threads) t.join();
  for (int v : ok) EXPECT_TRUE(v);
}

TEST(Executable, ArgumentErrors) {
  auto exe = compile(make_jaxpr([](const Array& x) { return x * 2.0; })(zeros({3})));
  EXPECT_PAX_ERROR(exe->run({}), "takes 1 arguments, got 0");
  EXPECT_PAX_ERROR(exe->run({zeros({4})}), "argument 0 is f32[4] but the program expects f32[3]");
  EXPECT_PAX_ERROR(exe->run({zeros({3}, DType::i32)}), "expects f32[3]");
  EXPECT_PAX_ERROR(exe->run({Array()}), "argument 0 is undefined");
  EXPECT_PAX_ERROR(compile(nullptr), "no jaxpr");
}

}  // namespace
}  // namespace pax

namespace pax {
namespace {

// A transpose of a product's result that nothing else reads is folded into
// the product, which writes its result in the transpose's layout: the
// attention's (batch, heads, seq, dim) -> (batch, seq, heads, dim), in f32
// (oneDNN writes it strided) and f64 (the kernel transposes at the end); a
// permutation that moves the last axis, and a product read twice, are not
// folded.
TEST(Executable, TransposeOfAProductIsWrittenByTheProduct) {
  auto attention_out = [](const Array& p, const Array& v) {        // (B, N, T, S), (B, S, N, H)
    Array o = lax::dot_general(p, v, {{3}, {1}, {0, 1}, {0, 2}});  // (B, N, T, H)
    return lax::transpose(o, {0, 2, 1, 3});                        // (B, T, N, H)
  };
  for (DType dt : {DType::f32, DType::f64}) {
    Array p = testing::random_array({2, 3, 5, 7}, dt, 1), v = testing::random_array({2, 7, 3, 4}, dt, 2);
    auto jaxpr = make_jaxpr(attention_out)(p, v);
    auto exe = compile(jaxpr);
    EXPECT_NE(exe->str().find("products written transposed: 1"), std::string::npos) << exe->str();
    const std::vector<Array> args = {p, v};
    const Array want = eval_jaxpr(*jaxpr, args)[0];
    EXPECT_TRUE(testing::all_close(exe->run(args)[0], want, 1e-6, 1e-6)) << dtype_name(dt);
  }
  auto last_moves = [](const Array& a, const Array& b) { return lax::transpose(matmul(a, b), {1, 0}); };
  auto read_twice = [](const Array& a, const Array& b) {
    Array c = matmul(a, b);
    return std::make_pair(lax::transpose(c, {1, 0}), c * 2.0);
  };
  Array a = testing::random_array({6, 5}, DType::f32, 3), b = testing::random_array({5, 4}, DType::f32, 4);
  for (auto jaxpr : {make_jaxpr(last_moves)(a, b), make_jaxpr(read_twice)(a, b)}) {
    auto exe = compile(jaxpr);
    EXPECT_EQ(exe->str().find("products written transposed"), std::string::npos) << exe->str();
    const std::vector<Array> args = {a, b};
    const std::vector<Array> want = eval_jaxpr(*jaxpr, args), got = exe->run(args);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], 1e-6, 1e-6));
  }
}

}  // namespace
}  // namespace pax

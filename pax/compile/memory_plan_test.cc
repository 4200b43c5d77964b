// Memory planning: intermediates share one arena, fused loops write over
// dying inputs in place, and donated arguments receive outputs only when the
// caller gave up its only handle.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

TEST(MemoryPlan, IntermediatesReuseTheArena) {
  // Transposes materialise every step; each value dies two steps later.
  auto f = [](const Array& x) {
    Array y = x;
    for (int i = 0; i < 6; ++i) y = transpose(tanh(y) * 0.5 + 0.1);
    return y;
  };
  Array x = random_array({256, 256}, DType::f32, 1);
  auto exe = compile(make_jaxpr(f)(x));
  const MemoryStats& m = exe->memory();
  const size_t one = 256 * 256 * 4;
  EXPECT_EQ(m.intermediates, 11);  // 6 loops and 5 transposes (the last one is the output)
  EXPECT_EQ(m.intermediate_bytes, 11 * one);
  EXPECT_LE(m.arena_bytes, 2 * one) << exe->str();
  EXPECT_GE(m.in_place, 5);  // every loop but the first overwrites the transpose it reads
  EXPECT_TRUE(all_close(exe->run({x})[0], f(x), 0, 0));
}

TEST(MemoryPlan, InPlaceOnlyWhenTheInputDies) {
  auto f = [](const Array& x) {
    Array t = transpose(x);
    Array u = exp(t) + 1.0;  // t dies here: u takes its bytes
    Array v = u * 2.0 - t;   // ... no: t is read again, so u cannot
    return std::make_pair(transpose(v), u);
  };
  auto g = [](const Array& x) {
    Array t = transpose(x);
    return transpose(exp(t) + 1.0);
  };
  Array x = random_array({64, 32}, DType::f32, 2);
  auto exe_f = compile(make_jaxpr(f)(x));
  auto exe_g = compile(make_jaxpr(g)(x));
  EXPECT_EQ(exe_g->memory().in_place, 1) << exe_g->str();
  std::vector<Array> got = exe_f->run({x});
  auto [want0, want1] = f(x);
  EXPECT_TRUE(all_close(got[0], want0, 0, 0));
  EXPECT_TRUE(all_close(got[1], want1, 0, 0));
  EXPECT_TRUE(all_close(exe_g->run({x})[0], g(x), 0, 0));
}

TEST(MemoryPlan, ReductionLoopsDoNotRunInPlace) {
  auto f = [](const Array& x) {
    Array t = transpose(x);
    Array e = exp(t);
    return std::make_pair(sum(e, -1), transpose(e));
  };
  Array x = random_array({300, 200}, DType::f32, 3);
  auto exe = compile(make_jaxpr(f)(x));
  EXPECT_EQ(exe->memory().in_place, 0);
  std::vector<Array> got = exe->run({x});
  auto [s, e] = f(x);
  EXPECT_TRUE(all_close(got[0], s, 0, 0));
  EXPECT_TRUE(all_close(got[1], e, 0, 0));
}

TEST(Donation, MovedArgumentReceivesTheOutput) {
  auto update = [](const Array& p) { return p * 0.9 + 1.0; };
  auto step = jit(update, {.donate_argnums = {0}});
  for (int64_t n : {1000, 1 << 21}) {  // the larger one is written with non-temporal stores
    Array p = random_array({n}, DType::f32, 4);
    Array want = update(p);
    const void* old = testing::memory_address(p);
    Array out = step(std::move(p));
    EXPECT_EQ(testing::memory_address(out), old);
    EXPECT_TRUE(all_close(out, want, 0, 0));
    // The returned array can be donated again.
    const void* again = testing::memory_address(out);
    Array out2 = step(std::move(out));
    EXPECT_EQ(testing::memory_address(out2), again);
    EXPECT_TRUE(all_close(out2, update(want), 0, 0));
  }
}

TEST(Donation, NotWithoutDonateArgnums) {
  auto update = [](const Array& p) { return p * 0.9 + 1.0; };
  Array p = random_array({1000}, DType::f32, 5);
  const void* old = testing::memory_address(p);
  Array out = jit(update)(std::move(p));
  EXPECT_NE(testing::memory_address(out), old);
}

TEST(Donation, NotWhenTheCallerKeepsAHandle) {
  auto update = [](const Array& p) { return p * 0.9 + 1.0; };
  auto step = jit(update, {.donate_argnums = {0}});
  Array p = random_array({1000}, DType::f32, 6);
  const std::vector<float> before = p.to_vector<float>();
  Array keep = p;  // a second handle to the same value
  Array out = step(std::move(p));
  EXPECT_NE(testing::memory_address(out), testing::memory_address(keep));
  EXPECT_EQ(keep.to_vector<float>(), before);
  // Passed without std::move: the caller's array stays intact.
  Array out2 = step(keep);
  EXPECT_NE(testing::memory_address(out2), testing::memory_address(keep));
  EXPECT_EQ(keep.to_vector<float>(), before);
  // A reshape of the argument shares its buffer: no donation either.
  Array q = random_array({10, 100}, DType::f32, 7);
  Array view = reshape(q, {1000});
  const std::vector<float> q_before = q.to_vector<float>();
  Array out3 = step(std::move(view));
  EXPECT_EQ(q.to_vector<float>(), q_before);
  EXPECT_NE(testing::memory_address(out3), testing::memory_address(q));
}

TEST(Donation, OnlyWhenTheArgumentIsNoLongerRead) {
  Array p = random_array({64, 64}, DType::f32, 8);
  // The transpose reads p after the loop that writes the output: no donation.
  auto late = [](const Array& p) {
    Array a = p * 2.0;
    Array b = transpose(p);
    return std::make_pair(a, b);
  };
  auto compiled = jit(late, {.donate_argnums = {0}}).lower(p).compile();
  EXPECT_EQ(compiled.executable().memory().donations, 0) << compiled.executable().str();
  auto [a, b] = compiled(p);
  EXPECT_TRUE(all_close(a, p * 2.0, 0, 0));
  EXPECT_TRUE(all_close(b, transpose(p), 0, 0));
  // Another shape or dtype: no donation.
  auto other = [](const Array& p) { return sum(p, 0); };
  EXPECT_EQ(jit(other, {.donate_argnums = {0}}).lower(p).compile().executable().memory().donations, 0);
  // Written after the last read by a kernel: donated.
  auto after = [](const Array& p) { return transpose(exp(p)); };
  auto ok = jit(after, {.donate_argnums = {0}});
  EXPECT_EQ(ok.lower(p).compile().executable().memory().donations, 1);
  Array q = random_array({64, 64}, DType::f32, 9);
  Array want = after(q);
  const void* old = testing::memory_address(q);
  Array out = ok(std::move(q));
  EXPECT_EQ(testing::memory_address(out), old);
  EXPECT_TRUE(all_close(out, want, 0, 0));
}

TEST(Donation, TreeArguments) {
  // Optimizer-style update of a params tree with its gradients.
  auto update = [](const Tree& params, const Tree& grads) {
    return tree_map([](const Array& p, const Array& g) { return p - 0.1 * g; }, params, grads);
  };
  Tree params = Tree::dict({{"w", random_array({8, 4}, DType::f32, 10)}, {"b", random_array({4}, DType::f32, 11)}});
  Tree grads = Tree::dict({{"w", random_array({8, 4}, DType::f32, 12)}, {"b", random_array({4}, DType::f32, 13)}});
  Tree want = update(params, grads);
  const void* w_old = testing::memory_address(params["w"].leaf());
  const void* b_old = testing::memory_address(params["b"].leaf());
  auto step = jit(update, {.donate_argnums = {0}});
  Tree out = step(std::move(params), grads);
  EXPECT_EQ(testing::memory_address(out["w"].leaf()), w_old);
  EXPECT_EQ(testing::memory_address(out["b"].leaf()), b_old);
  EXPECT_TRUE(all_close(out["w"].leaf(), want["w"].leaf(), 0, 0));
  EXPECT_TRUE(all_close(out["b"].leaf(), want["b"].leaf(), 0, 0));
}

}  // namespace
}  // namespace pax

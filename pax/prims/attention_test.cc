// dot_product_attention against its composite (jax.nn.dot_product_attention's
// XLA formulation): the outputs, the row log-sum-exp and the gradients of
// the CPU kernels over grouped-query heads, causal masks, broadcast biases
// and masks, fully masked rows and padded lengths; eager, under jit and
// vmap; forward mode through the composite; finite differences; the
// backward's log-sum-exp cotangent; and the errors of bad operands.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pax/ops/lax.h"
#include "pax/prims/attention_params.h"
#include "pax/prims/registry.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;

struct Case {
  std::string name;
  int64_t B = 2, T = 5, S = 5, N = 2, K = 2, H = 8;
  bool causal = false;
  Ints bias_shape;  // empty: no bias
  Ints mask_shape;  // empty: no mask
  bool lengths = false;
  double cap = 0;  // logit_cap (0: none)
};

std::vector<Case> cases() {
  return {
      {"plain", 2, 5, 7, 2, 2, 8},
      {"gqa", 2, 6, 6, 4, 2, 5},
      {"multi_query_causal", 1, 9, 9, 4, 1, 8, true},
      {"causal_longer_keys", 2, 4, 7, 2, 2, 8, true},
      {"bias_per_head", 2, 5, 6, 2, 2, 8, false, {1, 2, 5, 6}},
      {"bias_per_key_and_mask", 2, 5, 6, 2, 1, 8, false, {2, 1, 1, 6}, {2, 2, 5, 6}},
      {"mask_broadcast_lengths", 3, 6, 5, 2, 2, 4, true, {}, {1, 1, 6, 5}, true},
      {"everything", 2, 7, 7, 4, 2, 6, true, {2, 4, 7, 7}, {2, 1, 7, 7}, true},
      {"logit_cap", 2, 5, 7, 4, 2, 8, false, {}, {}, false, 0.4},
      {"logit_cap_everything", 2, 7, 7, 4, 2, 6, true, {2, 4, 7, 7}, {2, 1, 7, 7}, true, 0.3},
  };
}

// The arguments of a case: q, k, v (f64 so that finite differences are
// meaningful; the kernels compute in f32), then the optional operands.
std::vector<Array> args_of(const Case& c, DType dtype = DType::f64) {
  std::vector<Array> a{testing::random_array(Shape{c.B, c.T, c.N, c.H}, dtype, 1),
                       testing::random_array(Shape{c.B, c.S, c.K, c.H}, dtype, 2),
                       testing::random_array(Shape{c.B, c.S, c.K, c.H}, dtype, 3)};
  if (!c.bias_shape.empty()) a.push_back(testing::random_array(Shape(c.bias_shape), dtype, 4));
  if (!c.mask_shape.empty()) {
    // Random, with the first query row of every mask fully masked.
    const Shape s(c.mask_shape);
    std::vector<uint8_t> m(size_t(s.numel()));
    for (size_t i = 0; i < m.size(); ++i) m[i] = (i * 7919 % 5) != 0;
    const int64_t row = s[3], rows_per_head = s[2];
    for (int64_t r = 0; r < s.numel() / row; r += rows_per_head)
      for (int64_t k = 0; k < row; ++k) m[size_t(r * row + k)] = 0;
    a.push_back(from_host(m.data(), s, DType::bool_));
  }
  if (c.lengths) {
    std::vector<int32_t> q(size_t(c.B)), kv(size_t(c.B));
    for (int64_t b = 0; b < c.B; ++b) {
      q[size_t(b)] = int32_t(std::max<int64_t>(1, c.T - b));
      kv[size_t(b)] = int32_t(b == 1 ? 0 : c.S - b);  // example 1 attends to no key
    }
    a.push_back(array(q, Shape{c.B}));
    a.push_back(array(kv, Shape{c.B}));
  }
  return a;
}

lax::AttentionOptions options_of(const Case& c, const std::vector<Array>& a) {
  lax::AttentionOptions o;
  size_t next = 3;
  if (!c.bias_shape.empty()) o.bias = a[next++];
  if (!c.mask_shape.empty()) o.mask = a[next++];
  if (c.lengths) {
    o.query_seq_lengths = a[next++];
    o.key_value_seq_lengths = a[next++];
  }
  o.is_causal = c.causal;
  o.logit_cap = c.cap;
  return o;
}

// The primitive (its kernels) and its composite, as functions of the case's
// arguments, returning the output (index 0) or the log-sum-exp (1).
ArrayFn by_kernel(const Case& c, int which = 0) {
  return [c, which](const std::vector<Array>& a) {
    auto [out, lse] = lax::dot_product_attention(a[0], a[1], a[2], options_of(c, a));
    return which == 0 ? out : lse;
  };
}

ArrayFn by_composite(const Case& c, int which = 0) {
  return [c, which](const std::vector<Array>& a) {
    // The primitive's parameters as lax::dot_product_attention makes them.
    const lax::AttentionOptions o = options_of(c, a);
    Params p{{"scale", 1.0 / std::sqrt(double(c.H))},
             {"is_causal", c.causal},
             {"has_bias", o.bias.defined()},
             {"has_mask", o.mask.defined()},
             {"has_q_lengths", o.query_seq_lengths.defined()},
             {"has_kv_lengths", o.key_value_seq_lengths.defined()}};
    if (c.cap > 0) p.set("logit_cap", c.cap);
    return prim_def(Prim::dot_product_attention).expand(a, p)[size_t(which)];
  };
}

Array as_f64(const Array& x) { return lax::convert_element_type(x, DType::f64); }

// f32 (the tiled kernels) and f64 (the f64 loops; the composite in f64).
constexpr std::pair<DType, double> kDtypes[] = {{DType::f32, 2e-5}, {DType::f64, 1e-12}};

TEST(DotProductAttention, KernelsEqualTheComposite) {
  for (const auto& [dtype, tol] : kDtypes) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dtype));
      const std::vector<Array> a = args_of(c, dtype);
      EXPECT_TRUE(testing::all_close(as_f64(by_kernel(c, 0)(a)), as_f64(by_composite(c, 0)(a)), tol, tol));
      // lse is f32 whatever the operands.
      EXPECT_TRUE(testing::all_close(by_kernel(c, 1)(a), by_composite(c, 1)(a), 2e-5, 2e-5));
    }
  }
}

TEST(DotProductAttention, GradientsEqualTheCompositesAndFiniteDifferences) {
  for (const auto& [dtype, tol] : kDtypes) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name + " " + dtype_name(dtype));
      const std::vector<Array> a = args_of(c, dtype);
      // The backward kernel (through the primitive's VJP) against the
      // composite differentiated primitive by primitive.
      const ArrayFn kernel_grads = testing::vjp_as_fn(by_kernel(c), a);
      const ArrayFn composite_grads = testing::vjp_as_fn(by_composite(c), a);
      EXPECT_TRUE(testing::all_close(kernel_grads(a), composite_grads(a), 2.5 * tol, 2.5 * tol));
      if (dtype == DType::f64) EXPECT_TRUE(testing::check_vjp(by_kernel(c), a));
    }
  }
}

// A loss that reads the log-sum-exp as well: its cotangent reaches the
// backward kernel, which must give the composite's gradients.
TEST(DotProductAttention, TheLogSumExpCarriesAGradientToo) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<Array> a = args_of(c, DType::f32);
    auto both = [&](const ArrayFn& out, const ArrayFn& lse) {
      return ArrayFn([out, lse](const std::vector<Array>& xs) {
        return lax::add(lax::reduce_sum(as_f64(out(xs)), {0, 1, 2, 3}),
                        lax::reduce_sum(lax::mul(as_f64(lse(xs)), as_f64(lse(xs))), {0, 1, 2}));
      });
    };
    const ArrayFn kernel = testing::vjp_as_fn(both(by_kernel(c, 0), by_kernel(c, 1)), a);
    const ArrayFn composite = testing::vjp_as_fn(both(by_composite(c, 0), by_composite(c, 1)), a);
    EXPECT_TRUE(testing::all_close(kernel(a), composite(a), 1e-4, 1e-4));
  }
}

TEST(DotProductAttention, ForwardModeThroughTheComposite) {
  for (const Case& c : {cases()[7], cases()[9]}) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(testing::check_jvp(by_kernel(c), args_of(c)));
  }
}

// The cap bends the logits: without it the results differ.
TEST(DotProductAttention, TheLogitCapChangesTheResult) {
  Case c = cases()[8];
  const std::vector<Array> a = args_of(c, DType::f32);
  const Array capped = by_kernel(c)(a);
  c.cap = 0;
  EXPECT_FALSE(testing::all_close(capped, by_kernel(c)(a), 1e-3, 1e-3));
}

TEST(DotProductAttention, JitAndVmap) {
  for (const Case& c : {cases()[1], cases()[7]}) {
    SCOPED_TRACE(c.name);
    const std::vector<Array> a = args_of(c, DType::f32);
    EXPECT_TRUE(testing::check_jit(by_kernel(c), a, 1e-6));
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(by_kernel(c), a), a, 1e-6));
    // Every operand mapped; then q alone (k, v and the rest shared).
    std::vector<std::optional<int64_t>> all(a.size(), 0), q_only(a.size(), std::nullopt);
    q_only[0] = 2;
    EXPECT_TRUE(testing::check_vmap(by_kernel(c), a, all, 3, 1e-6));
    EXPECT_TRUE(testing::check_vmap(by_kernel(c), a, q_only, 2, 1e-6));
    EXPECT_TRUE(testing::check_vmap(testing::vjp_as_fn(by_kernel(c), a), a, all, 2, 1e-5));
  }
}

TEST(DotProductAttention, Bf16OperandsComputeInF32AndRoundOnce) {
  const Case c = cases()[7];
  const std::vector<Array> a = args_of(c, DType::bf16);
  const Array got = by_kernel(c)(a);
  EXPECT_EQ(got.dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(as_f64(got), as_f64(by_composite(c)(a)), 8e-3, 8e-3));
}

TEST(DotProductAttention, BadOperandsAreNamed) {
  const Array q = testing::random_array(Shape{2, 4, 3, 8}, DType::f32, 1);
  const Array k = testing::random_array(Shape{2, 5, 2, 8}, DType::f32, 2);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { lax::dot_product_attention(q, k, k); }).find("multiple of the key's 2"), std::string::npos);
  const Array k3 = testing::random_array(Shape{2, 5, 3, 8}, DType::f32, 2);
  lax::AttentionOptions o;
  o.bias = testing::random_array(Shape{2, 3, 3, 5}, DType::f32, 3);
  EXPECT_NE(message([&] { lax::dot_product_attention(q, k3, k3, o); }).find("axis 2 has size 3; it must be 1 or 4"),
            std::string::npos);
  o = {};
  o.key_value_seq_lengths = testing::random_array(Shape{2}, DType::f32, 4);
  EXPECT_NE(message([&] { lax::dot_product_attention(q, k3, k3, o); }).find("must be int32[2]"), std::string::npos);
  o = {};
  o.logit_cap = -1;
  EXPECT_NE(message([&] { lax::dot_product_attention(q, k3, k3, o); }).find("logit_cap must be >= 0"),
            std::string::npos);
  EXPECT_NE(message([&] {
              lax::dot_product_attention(q, k3, lax::convert_element_type(k3, DType::bf16));
            }).find("share one float dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace pax

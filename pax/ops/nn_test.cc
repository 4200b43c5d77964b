// jax.nn-style functions against closed-form references.
#include "pax/ops/nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;

std::vector<double> map(const Array& x, double (*f)(double)) {
  std::vector<double> out;
  for (double v : x.to_vector<double>()) out.push_back(f(v));
  return out;
}

TEST(NN, Activations) {
  Array x = linspace(-6, 6, 49);
  EXPECT_TRUE(all_close(nn::relu(x), map(x, [](double v) { return std::max(v, 0.0); })));
  EXPECT_TRUE(all_close(nn::relu6(x), map(x, [](double v) { return std::min(std::max(v, 0.0), 6.0); })));
  EXPECT_TRUE(all_close(nn::sigmoid(x), map(x, [](double v) { return 1 / (1 + std::exp(-v)); }), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(nn::silu(x), map(x, [](double v) { return v / (1 + std::exp(-v)); }), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(nn::gelu(x, false),
                        map(x, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(
      nn::gelu(x),
      map(x, [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }),
      1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::softplus(x), map(x, [](double v) { return std::log1p(std::exp(v)); }), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(nn::softplus(array<float>({100, -100})), {100, 0}, 1e-6, 1e-30));
  EXPECT_TRUE(all_close(nn::log_sigmoid(x), map(x, [](double v) { return -std::log1p(std::exp(-v)); }), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::leaky_relu(array<float>({-1, 2})), {-0.01, 2}));
  EXPECT_TRUE(all_close(nn::elu(array<float>({-1, 2})), {std::expm1(-1.0), 2}, 1e-6));
  EXPECT_PAX_ERROR(nn::gelu(arange(3)), "needs a floating input");
}

// Derivatives at the kinks, as jax.nn gives them (and PyTorch): relu'(0) = 0,
// relu6'(0) = relu6'(6) = 0, leaky_relu'(0) = 1, elu'(0) = alpha; reverse and
// forward mode, eager and jitted; next to each kink the slopes of the pieces.
TEST(NN, DerivativesAtTheKinks) {
  using Fn = Array (*)(const Array&);
  struct Case {
    const char* name;
    Fn f;
    std::vector<float> at;
    std::vector<double> slope;
  };
  const std::vector<Case> cases = {
      {"relu", [](const Array& v) { return nn::relu(v); }, {-1, 0, 1e-3f, 2}, {0, 0, 1, 1}},
      {"relu6", [](const Array& v) { return nn::relu6(v); }, {-1, 0, 3, 6, 6.5f}, {0, 0, 1, 0, 0}},
      {"leaky_relu", [](const Array& v) { return nn::leaky_relu(v, 0.1); }, {-1, 0, 2}, {0.1, 1, 1}},
      {"elu", [](const Array& v) { return nn::elu(v, 0.5); }, {-1, 0, 2}, {0.5 * std::exp(-1.0), 0.5, 1}},
  };
  for (const Case& c : cases) {
    const Array x = array<float>(c.at);
    auto loss = [&](const Array& v) { return sum(c.f(v)); };
    EXPECT_TRUE(all_close(grad(loss)(x), c.slope, 1e-6, 1e-7)) << c.name << " grad: " << grad(loss)(x);
    EXPECT_TRUE(all_close(jit(grad(loss))(x), c.slope, 1e-6, 1e-7)) << c.name << " jit(grad)";
    auto [y, dy] = jvp([&](const Array& v) { return c.f(v); }, x, ones_like(x));
    EXPECT_TRUE(all_close(dy, c.slope, 1e-6, 1e-7)) << c.name << " jvp: " << dy;
  }
  // Smooth ones at 0 (sigmoid, silu, softplus, log_sigmoid): the analytic slopes.
  const Array zero = array<float>({0});
  EXPECT_TRUE(all_close(grad([](const Array& v) { return sum(nn::sigmoid(v)); })(zero), {0.25}));
  EXPECT_TRUE(all_close(grad([](const Array& v) { return sum(nn::silu(v)); })(zero), {0.5}));
  EXPECT_TRUE(all_close(grad([](const Array& v) { return sum(nn::softplus(v)); })(zero), {0.5}));
  EXPECT_TRUE(all_close(grad([](const Array& v) { return sum(nn::log_sigmoid(v)); })(zero), {0.5}));
}

// The selects keep what maximum gave: a NaN passes through, and negative
// inputs give +0, not -0.
TEST(NN, PiecewiseActivationsPassNaNThrough) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Array x = array<float>({nan, -2, 0, 7});
  for (const Array& y : {nn::relu(x), nn::relu6(x), nn::leaky_relu(x), nn::elu(x)})
    EXPECT_TRUE(std::isnan(y.to_vector<float>()[0])) << y;
  EXPECT_FALSE(std::signbit(nn::relu(x).to_vector<float>()[1]));
  EXPECT_FALSE(std::signbit(nn::relu6(x).to_vector<float>()[1]));
  EXPECT_EQ(nn::relu6(x).to_vector<float>()[3], 6.0f);
  EXPECT_EQ(nn::relu(arange(-2, 3)).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 1, 2}));
}

// The hand-written derivative of both GELU forms against central finite
// differences in f64; forward mode goes through the function itself.
TEST(NN, GeluGradient) {
  Array x = linspace(-6, 6, 49, true, DType::f64);
  for (bool approximate : {true, false}) {
    auto f = [approximate](const Array& v) { return sum(nn::gelu(v, approximate)); };
    const double h = 1e-6;
    Array fd = (nn::gelu(x + h, approximate) - nn::gelu(x - h, approximate)) / (2 * h);
    EXPECT_TRUE(all_close(grad(f)(x), fd, 1e-7, 1e-8)) << "approximate=" << approximate;
    EXPECT_TRUE(all_close(jit(grad(f))(x), fd, 1e-7, 1e-8)) << "approximate=" << approximate;
    auto [y, dy] = jvp([approximate](const Array& v) { return nn::gelu(v, approximate); }, x, ones_like(x));
    EXPECT_TRUE(all_close(y, nn::gelu(x, approximate), 0, 0));
    EXPECT_TRUE(all_close(dy, fd, 1e-7, 1e-8)) << "approximate=" << approximate;
  }
}

// The second derivative goes through the derivative the forward keeps:
// against finite differences of the first in f64, and in f32 compiled (where
// the backward's multiply joins a product when there is one) against f64.
TEST(NN, GeluSecondDerivative) {
  Array x = linspace(-6, 6, 49, true, DType::f64);
  for (bool approximate : {true, false}) {
    auto f = [approximate](const Array& v) { return sum(nn::gelu(v, approximate)); };
    auto df = [&](const Array& v) { return sum(grad(f)(v)); };
    const double h = 1e-5;
    Array fd = (grad(f)(x + h) - grad(f)(x - h)) / (2 * h);
    const Array second = grad(df)(x);
    EXPECT_TRUE(all_close(second, fd, 1e-6, 1e-7)) << "approximate=" << approximate;
    EXPECT_TRUE(all_close(jit(grad(df))(x.astype(DType::f32)), second, 1e-5, 1e-5)) << "approximate=" << approximate;
  }
}

// bf16 is computed in f32 and rounded once, forward and backward, eager and
// compiled; a compiled program without grad runs the function's body fused.
TEST(NN, GeluBf16ComputesInF32) {
  Array x = linspace(-6, 6, 301);
  Array xb = x.astype(DType::bf16);
  Array want = nn::gelu(xb.astype(DType::f32)).astype(DType::bf16);
  EXPECT_TRUE(all_close(nn::gelu(xb), want, 0, 0));
  EXPECT_TRUE(all_close(jit([](const Array& v) { return nn::gelu(v); })(xb), want, 0, 0));
  auto exe = compile(make_jaxpr([](const Array& v) { return nn::gelu(v); })(xb));
  EXPECT_EQ(exe->str().find("custom_vjp"), std::string::npos) << exe->str();
  auto loss = [](const Array& v) { return sum(nn::gelu(v).astype(DType::f32)); };
  Array g = grad(loss)(xb);
  EXPECT_EQ(g.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(g, grad(loss)(xb.astype(DType::f32)).astype(DType::bf16), 0, 0));
  EXPECT_TRUE(all_close(jit(grad(loss))(xb), g, 0, 0));
}

TEST(NN, SoftmaxFamilyIsStable) {
  Array logits = array<float>({1, 2, 3, 1000, 1001, 1002}, {2, 3});
  double e1 = std::exp(-2.0), e2 = std::exp(-1.0), z = e1 + e2 + 1;
  std::vector<double> want = {e1 / z, e2 / z, 1 / z, e1 / z, e2 / z, 1 / z};
  EXPECT_TRUE(all_close(nn::softmax(logits), want, 1e-6, 1e-7));
  std::vector<double> logwant;
  for (double w : want) logwant.push_back(std::log(w));
  EXPECT_TRUE(all_close(nn::log_softmax(logits), logwant, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::logsumexp(logits, 1), {3 + std::log(z), 1002 + std::log(z)}, 1e-6));
  EXPECT_TRUE(all_close(nn::softmax(logits, 0), {0, 0, 0, 1, 1, 1}, 0, 1e-30));
  Array neg_inf = full({2}, -INFINITY);
  EXPECT_TRUE(all_close(nn::logsumexp(neg_inf), {-INFINITY}));
  EXPECT_EQ(nn::logsumexp(logits, 1, true).shape(), (Shape{2, 1}));
  // A row of -inf except one finite value.
  EXPECT_TRUE(all_close(nn::softmax(array<float>({-INFINITY, 0})), {0, 1}));
}

TEST(NN, OneHot) {
  Array h = nn::one_hot(array<int32_t>({0, 2, 5, -1}), 3);
  EXPECT_EQ(h.shape(), (Shape{4, 3}));
  EXPECT_TRUE(all_close(h, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(nn::one_hot(array<int32_t>({1}), 2, DType::bf16).dtype(), DType::bf16);
  EXPECT_PAX_ERROR(nn::one_hot(array<float>({1}), 2), "integer dtype");
}

TEST(NN, Standardize) {
  Array x = array<float>({1, 2, 3, 4});
  double m = 2.5, v = 1.25;
  std::vector<double> want;
  for (double e : {1, 2, 3, 4}) want.push_back((e - m) / std::sqrt(v + 1e-5));
  EXPECT_TRUE(all_close(nn::standardize(x), want, 1e-5));
}

// jax.nn.dot_product_attention without a batch axis is the batched form
// with a batch of one; a causal mask makes the first query attend to the
// first key alone.
TEST(Nn, DotProductAttentionWithAndWithoutBatch) {
  const Array q = testing::random_array(Shape{5, 4, 8}, DType::f32, 1);
  const Array k = testing::random_array(Shape{6, 2, 8}, DType::f32, 2);
  const Array v = testing::random_array(Shape{6, 2, 8}, DType::f32, 3);
  lax::AttentionOptions o;
  o.is_causal = true;
  o.bias = testing::random_array(Shape{4, 5, 6}, DType::f32, 4);
  const Array unbatched = nn::dot_product_attention(q, k, v, o);
  lax::AttentionOptions ob = o;
  ob.bias = expand_dims(o.bias, {0});
  const Array batched = nn::dot_product_attention(expand_dims(q, {0}), expand_dims(k, {0}), expand_dims(v, {0}), ob);
  EXPECT_EQ(unbatched.shape(), Shape({5, 4, 8}));
  EXPECT_TRUE(all_close(unbatched, squeeze(batched, 0), 0, 0));
  // Query 0 sees key 0 only: head n (of kv head n / 2) returns v[0, n / 2].
  const Array first_query_head3 = lax::slice(unbatched, {0, 3, 0}, {1, 4, 8});
  const Array first_value_head1 = lax::slice(v, {0, 1, 0}, {1, 2, 8});
  EXPECT_TRUE(all_close(first_query_head3, first_value_head1, 1e-6, 1e-6));
  EXPECT_THROW(nn::dot_product_attention(q, expand_dims(k, {0}), v), Error);
}

}  // namespace
}  // namespace pax

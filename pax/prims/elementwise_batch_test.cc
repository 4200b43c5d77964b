// Batching rules of the elementwise primitives against a loop over the batch
// (batch axis first, in the middle, last, disagreeing, and mixed with
// unbatched operands; 0-d examples; bf16 and integers), nested vmap,
// per-example gradients, and the errors of the public vmap API.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;
using testing::check_vmap;
using Axes1 = std::optional<int64_t>;

struct Case {
  const char* name;
  ArrayFn f;
  int arity;
  double tol = 1e-6;  // loop and batch may take different vector / tail paths
};

// Values derived inside the function, so that every example (check_vmap
// draws floats in [-1, 1)) lands in the primitive's domain.
Array positive(const Array& x) { return lax::exp(x); }
Array as_int(const Array& x, double scale, DType t = DType::i32) { return floor(x * scale).astype(t); }

ArrayFn un(Array (*op)(const Array&), Array (*domain)(const Array&) = nullptr) {
  return [op, domain](const std::vector<Array>& a) { return op(domain ? domain(a[0]) : a[0]); };
}
ArrayFn bin(Array (*op)(const Array&, const Array&)) {
  return [op](const std::vector<Array>& a) { return op(a[0], a[1]); };
}
// Integer operands: values in [-50, 50) (unsigned: [0, 50)); divisors nonzero.
ArrayFn int_bin(Array (*op)(const Array&, const Array&), DType t) {
  return [op, t](const std::vector<Array>& a) {
    const bool u = t == DType::u8 || t == DType::u32;
    return op(as_int(u ? abs(a[0]) : a[0], 50, t), as_int(u ? abs(a[1]) : a[1], 50, t));
  };
}
ArrayFn int_div(Array (*op)(const Array&, const Array&), DType t) {
  return [op, t](const std::vector<Array>& a) { return op(as_int(a[0], 50, t), as_int(positive(a[1]), 5, t) + 1); };
}
ArrayFn shift(Array (*op)(const Array&, const Array&)) {
  return [op](const std::vector<Array>& a) { return op(as_int(a[0], 1e6), as_int(abs(a[1]), 31.99)); };
}
ArrayFn bool_bin(Array (*op)(const Array&, const Array&)) {
  return [op](const std::vector<Array>& a) {
    return op(lax::gt(a[0], zeros_like(a[0])), lax::lt(a[1], zeros_like(a[1])));
  };
}

std::vector<Case> unary_cases() {
  return {
      {"neg", un(lax::neg), 1},
      {"abs", un(lax::abs), 1},
      {"sign", un(lax::sign), 1},
      {"exp", un(lax::exp), 1},
      {"expm1", un(lax::expm1), 1},
      {"log", un(lax::log, positive), 1},
      {"log1p", un(lax::log1p, positive), 1},
      {"sqrt", un(lax::sqrt, positive), 1},
      {"rsqrt", un(lax::rsqrt, positive), 1},
      {"tanh", un(lax::tanh), 1},
      {"logistic", un(lax::logistic), 1},
      {"erf", un(lax::erf), 1},
      {"erf_inv", un(lax::erf_inv), 1},
      {"sin", un(lax::sin), 1},
      {"cos", un(lax::cos), 1},
      {"floor", un(lax::floor), 1},
      {"ceil", un(lax::ceil), 1},
      {"round",
       [](const std::vector<Array>& a) { return lax::round(a[0] * 4.0, lax::RoundingMethod::to_nearest_even); }, 1},
      {"is_finite", [](const std::vector<Array>& a) { return lax::is_finite(lax::log(a[0])); }, 1},
      {"not", [](const std::vector<Array>& a) { return lax::bitwise_not(as_int(a[0], 100)); }, 1},
      {"not_bool", [](const std::vector<Array>& a) { return lax::bitwise_not(lax::gt(a[0], zeros_like(a[0]))); }, 1},
      {"integer_pow", [](const std::vector<Array>& a) { return lax::integer_pow(a[0], 3); }, 1},
      {"integer_pow_int", [](const std::vector<Array>& a) { return lax::integer_pow(as_int(a[0], 20), 2); }, 1},
      {"convert", [](const std::vector<Array>& a) { return lax::convert_element_type(a[0] * 100.0, DType::i32); }, 1},
      {"bitcast", [](const std::vector<Array>& a) { return lax::bitcast_convert_type(a[0], DType::i32); }, 1},
  };
}

std::vector<Case> binary_cases() {
  return {
      {"add", bin(lax::add), 2},
      {"sub", bin(lax::sub), 2},
      {"mul", bin(lax::mul), 2},
      {"div", bin(lax::div), 2},
      {"rem", bin(lax::rem), 2},
      {"pow", [](const std::vector<Array>& a) { return lax::pow(positive(a[0]), a[1]); }, 2},
      {"max", bin(lax::max), 2},
      {"min", bin(lax::min), 2},
      {"div_int", int_div(lax::div, DType::i32), 2},
      {"rem_i64", int_div(lax::rem, DType::i64), 2},
      {"and", int_bin(lax::bitwise_and, DType::i32), 2},
      {"or", int_bin(lax::bitwise_or, DType::i64), 2},
      {"xor", int_bin(lax::bitwise_xor, DType::u8), 2},
      {"and_bool", bool_bin(lax::bitwise_and), 2},
      {"xor_bool", bool_bin(lax::bitwise_xor), 2},
      {"eq", [](const std::vector<Array>& a) { return lax::eq(round(a[0] * 2.0), round(a[1] * 2.0)); }, 2},
      {"ne", [](const std::vector<Array>& a) { return lax::ne(round(a[0] * 2.0), round(a[1] * 2.0)); }, 2},
      {"lt", bin(lax::lt), 2},
      {"le", bin(lax::le), 2},
      {"gt", bin(lax::gt), 2},
      {"ge", bin(lax::ge), 2},
      {"shift_left", shift(lax::shift_left), 2},
      {"shift_right_logical", shift(lax::shift_right_logical), 2},
      {"shift_right_arithmetic", shift(lax::shift_right_arithmetic), 2},
      {"select_n_bool",
       [](const std::vector<Array>& a) {
         return lax::select_n(lax::gt(a[0], a[1]), {a[0], a[1]});
       },
       2},
      {"select_n_int",
       [](const std::vector<Array>& a) {
         Array which = clip(as_int(a[0], 3.0), 0, 2);  // 0, 1 or 2
         return lax::select_n(which, {a[0], a[1], a[0] * a[1]});
       },
       2},
  };
}

std::vector<Array> args_of(int arity, const Shape& s, DType t = DType::f32) {
  std::vector<Array> out;
  for (int i = 0; i < arity; ++i) out.push_back(testing::random_array(s, t, 100 + uint32_t(i)));
  return out;
}

TEST(ElementwiseBatch, UnaryAtEveryAxis) {
  for (const Case& c : unary_cases()) {
    for (int64_t axis : {0, 1, 2}) {
      EXPECT_TRUE(check_vmap(c.f, args_of(1, {2, 3}), {axis}, 3, c.tol)) << c.name << " axis " << axis;
    }
    EXPECT_TRUE(check_vmap(c.f, args_of(1, {}), {0}, 4, c.tol)) << c.name << " 0-d";
    EXPECT_TRUE(check_vmap(c.f, args_of(1, {0, 3}), {1}, 2, c.tol)) << c.name << " empty";
  }
}

TEST(ElementwiseBatch, BinaryAxesAgreeDisagreeAndMix) {
  const std::vector<std::vector<Axes1>> axes = {
      {0, 0}, {1, 1}, {2, 2}, {0, 2}, {2, 1}, {0, std::nullopt}, {std::nullopt, 2}, {std::nullopt, 1}};
  for (const Case& c : binary_cases()) {
    for (const auto& in_axes : axes) {
      EXPECT_TRUE(check_vmap(c.f, args_of(2, {2, 3}), in_axes, 3, c.tol))
          << c.name << " in_axes " << (in_axes[0] ? *in_axes[0] : -1) << ", " << (in_axes[1] ? *in_axes[1] : -1);
    }
    EXPECT_TRUE(check_vmap(c.f, args_of(2, {}), {0, 0}, 4, c.tol)) << c.name << " 0-d";
    EXPECT_TRUE(check_vmap(c.f, args_of(2, {}), {std::nullopt, 0}, 4, c.tol)) << c.name << " 0-d mixed";
  }
}

TEST(ElementwiseBatch, Bf16) {
  const std::vector<Case> ops = {
      {"add", bin(lax::add), 2, 0},
      {"mul", bin(lax::mul), 2, 0},
      {"max", bin(lax::max), 2, 0},
      {"lt", bin(lax::lt), 2, 0},
      {"exp", un(lax::exp), 2, 8e-3},  // one bf16 ulp where the f32 result sits near a rounding boundary
      {"select_n",
       [](const std::vector<Array>& a) {
         return lax::select_n(lax::gt(a[0], a[1]), {a[1], a[0]});
       },
       2, 0},
      {"to_f32", [](const std::vector<Array>& a) { return lax::convert_element_type(a[0], DType::f32); }, 2, 0},
      {"to_i32", [](const std::vector<Array>& a) { return lax::convert_element_type(a[0] * 50.0, DType::i32); }, 2, 0},
  };
  const std::vector<std::vector<Axes1>> axes = {{1, 1}, {std::nullopt, 2}, {0, 2}};
  for (const Case& c : ops) {
    for (const auto& in_axes : axes)
      EXPECT_TRUE(check_vmap(c.f, args_of(2, {2, 5}, DType::bf16), in_axes, 3, c.tol)) << c.name;
  }
}

// select_n's selector may be a scalar while the cases are not.
TEST(ElementwiseBatch, ScalarSelector) {
  auto f = [](const std::vector<Array>& a) { return lax::select_n(lax::gt(a[0], zeros_like(a[0])), {a[1], a[2]}); };
  const std::vector<Array> args{testing::random_array({}, DType::f32, 1), testing::random_array({4}, DType::f32, 2),
                                testing::random_array({4}, DType::f32, 3)};
  const Axes1 none;
  EXPECT_TRUE(check_vmap(f, args, {0, 0, 0}, 5));        // a batched scalar selector
  EXPECT_TRUE(check_vmap(f, args, {0, none, none}, 5));  // only the selector
  EXPECT_TRUE(check_vmap(f, args, {0, 1, none}, 5));
  EXPECT_TRUE(check_vmap(f, args, {none, 1, 0}, 5));  // a shared scalar selector
  EXPECT_TRUE(check_vmap(f, args, {none, 1, 1}, 5));
}

// Operands that share a batch axis keep it: no transpose in the program.
TEST(ElementwiseBatch, SharedAxisIsKept) {
  auto f = vmap([](const Array& a, const Array& b) { return lax::exp(lax::add(a, b)); },
                {.in_axes = {1, 1}, .out_axes = {1}});
  auto jaxpr = make_jaxpr(f)(zeros({2, 5, 3}), zeros({2, 5, 3}));
  EXPECT_EQ(jaxpr->str().find("transpose"), std::string::npos) << jaxpr->str();
  EXPECT_EQ(jaxpr->out_avals()[0].shape, Shape({2, 5, 3}));
  // Disagreeing axes meet at 0.
  auto g = vmap([](const Array& a, const Array& b) { return lax::add(a, b); }, {.in_axes = {0, 1}});
  Array x = testing::random_array({4, 3}, DType::f32, 7), y = testing::random_array({3, 4}, DType::f32, 8);
  EXPECT_TRUE(testing::all_close(g(x, y), x + transpose(y), 0, 0));
}

TEST(ElementwiseBatch, NestedVmap) {
  // The outer map checks the inner vmap against a loop of it.
  auto inner = [](std::vector<std::optional<int64_t>> in_axes, Array (*op)(const Array&, const Array&)) {
    return [in_axes, op](const std::vector<Array>& a) {
      FlatFn flat = [op](std::span<const Array> xs) { return std::vector<Array>{lax::tanh(op(xs[0], xs[1]))}; };
      std::vector<int64_t> out_axes{1};
      return vmap_flat(flat, a, in_axes, out_axes, "")[0];
    };
  };
  const std::vector<Array> args = args_of(2, {3, 3});
  EXPECT_TRUE(check_vmap(inner({0, 1}, lax::mul), args, {1, 2}));
  EXPECT_TRUE(check_vmap(inner({1, 0}, lax::sub), args, {0, std::nullopt}));
  EXPECT_TRUE(check_vmap(inner({0, 0}, lax::max), args, {std::nullopt, 2}));
  // Both levels over the same pair of operands, in one call.
  auto vv = vmap(vmap(
                     [](const Array& a, const Array& b) {
                       return lax::select_n(lax::lt(a, b), {a, b});
                     },
                     {.in_axes = {0, 1}}),
                 {.in_axes = {1, 0}});
  Array a = testing::random_array({3, 2, 4}, DType::f32, 11), b = testing::random_array({2, 4, 3}, DType::f32, 12);
  Array got = vv(a, b);  // (2, 3, 4): outer over a's axis 1 / b's axis 0; inner over a's 0 / b's 1
  ASSERT_EQ(got.shape(), Shape({2, 3, 4}));
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>(), vg = got.to_vector<float>();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        const float x = va[size_t((j * 2 + i) * 4 + k)], y = vb[size_t((i * 4 + k) * 3 + j)];
        EXPECT_EQ(vg[size_t((i * 3 + j) * 4 + k)], x < y ? y : x);
      }
    }
  }
}

// vmap(grad(f)): per-example gradients equal a loop of grad.
TEST(ElementwiseBatch, PerExampleGradients) {
  auto loss = [](const Array& w, const Array& x) {
    Array h = tanh(x * w);
    return sum(h * h) + sum(exp(w * 0.5) * x);
  };
  Array w = testing::random_array({4}, DType::f64, 21);
  Array xs = testing::random_array({5, 4}, DType::f64, 22);
  Array per_example = vmap(grad(loss), {.in_axes = {std::nullopt, 0}})(w, xs);
  ASSERT_EQ(per_example.shape(), Shape({5, 4}));
  for (int64_t b = 0; b < 5; ++b) {
    Array want = grad(loss)(w, reshape(slice_along(xs, 0, b, b + 1), {4}));
    EXPECT_TRUE(testing::all_close(reshape(slice_along(per_example, 0, b, b + 1), {4}), want, 1e-12, 1e-12)) << b;
    // Hand derivative: d/dw = 2 h (1 - h^2) x + 0.5 exp(w / 2) x.
    std::vector<double> vw = w.to_vector<double>(), vx = xs.to_vector<double>(), got = want.to_vector<double>();
    for (size_t i = 0; i < 4; ++i) {
      const double x = vx[size_t(b) * 4 + i], h = std::tanh(x * vw[i]);
      EXPECT_NEAR(got[i], 2 * h * (1 - h * h) * x + 0.5 * std::exp(vw[i] * 0.5) * x, 1e-12);
    }
  }
  // Both arguments batched (the parameters on their last axis), both gradients.
  Array ws = testing::random_array({4, 5}, DType::f64, 23);
  auto [gw, gx] = vmap(grad<0, 1>(loss), {.in_axes = {1, 0}, .out_axes = {1}})(ws, xs);
  ASSERT_EQ(gw.shape(), Shape({4, 5}));
  ASSERT_EQ(gx.shape(), Shape({4, 5}));
  for (int64_t b = 0; b < 5; ++b) {
    auto [want_w, want_x] =
        grad<0, 1>(loss)(reshape(slice_along(ws, 1, b, b + 1), {4}), reshape(slice_along(xs, 0, b, b + 1), {4}));
    EXPECT_TRUE(testing::all_close(reshape(slice_along(gw, 1, b, b + 1), {4}), want_w, 1e-12, 1e-12)) << b;
    EXPECT_TRUE(testing::all_close(reshape(slice_along(gx, 1, b, b + 1), {4}), want_x, 1e-12, 1e-12)) << b;
  }
}

TEST(ElementwiseBatch, ApiErrors) {
  auto add = [](const Array& a, const Array& b) { return lax::add(a, b); };
  EXPECT_PAX_ERROR(vmap(add)(zeros({3, 2}), zeros({4, 2})), "inconsistent sizes for the mapped axis");
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {0, 2}})(zeros({3, 2}), zeros({2, 3})), "vmap in_axes");
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {-3, 0}})(zeros({3, 2}), zeros({3, 2})), "vmap in_axes");
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {0, 0}})(zeros({3, 2}), scalar(1.0f)), "scalars cannot be mapped");
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {0, 0, 0}})(zeros({3, 2}), zeros({3, 2})), "in_axes has 3 entries");
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {std::nullopt, std::nullopt}})(zeros({3, 2}), zeros({3, 2})),
                   "no argument is mapped");
  // Per-example operand errors name the shapes one example sees.
  EXPECT_PAX_ERROR(vmap(add, {.in_axes = {0, std::nullopt}})(zeros({5, 3}), zeros({4})),
                   "operand shapes must be equal, got f32[3] and f32[4]");
  EXPECT_PAX_ERROR(vmap(add)(zeros({5, 3}), zeros({5, 3}, DType::i32)), "operand dtypes must be equal");
  auto sel = [](const Array& w, const Array& a) { return lax::select_n(w, {a, a}); };
  EXPECT_PAX_ERROR(vmap(sel)(zeros({2, 3}, DType::bool_), zeros({2, 4})), "select_n: selector shape bool[3]");
}

}  // namespace
}  // namespace pax

// cuBLASLt behind dlopen: the library and every function it needs load on
// any machine; products of several layouts and dtypes against a host
// reference run where a CUDA device is present.
#include "pax/backend/cuda/cublaslt_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_backend.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/core/array.h"
#include "pax/core/device_put.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

using Ints64 = std::vector<int64_t>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CublasLt, LoadsTheLibraryWithEveryFunction) {
  const CublasLtLibrary& lib = cublaslt_library();
  EXPECT_NE(lib.path.find("libcublasLt.so.13"), std::string::npos) << lib.path;
  EXPECT_EQ(lib.version / 10000, 13u) << lib.version;
  for (const char* name : {"cublasLtCreate", "cublasLtMatmul", "cublasLtMatmulDescCreate", "cublasLtMatrixLayoutCreate",
                           "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmulPreferenceSetAttribute"}) {
    EXPECT_NE(std::find(lib.symbols.begin(), lib.symbols.end(), name), lib.symbols.end()) << name;
  }
  EXPECT_EQ(&cublaslt_library(), &lib);  // loaded once
}

TEST(CublasLt, MissingSymbolNamesTheLibraryAndTheSymbol) {
  const std::string err = error_of([] {
    load_symbols("libcublasLt.so.13", {"cublasLtCreate", "cublasLtNoSuchFunction"});
  });
  EXPECT_NE(err.find("libcublasLt.so.13"), std::string::npos) << err;
  EXPECT_NE(err.find("no symbol cublasLtNoSuchFunction"), std::string::npos) << err;
}

TEST(CublasLt, MissingLibraryIsNamed) {
  const std::string err = error_of([] { load_symbols("libpax_no_such_library.so.1", {"f"}); });
  EXPECT_NE(err.find("cannot load libpax_no_such_library.so.1"), std::string::npos) << err;
}

std::shared_ptr<Buffer> host_scratch(size_t nbytes, int) { return Buffer::allocate(nbytes); }

TEST(CublasLt, ContextWorkspaceHoldsItsScratch) {
  const KernelContext ctx{Device{DeviceKind::cpu, 0}, nullptr, nullptr, host_scratch};
  std::vector<std::shared_ptr<Buffer>> keep;
  const GemmWorkspace ws = context_workspace(ctx, keep);
  void* p = ws(4096);
  ASSERT_EQ(keep.size(), 1u);
  EXPECT_EQ(p, keep[0]->data());
  EXPECT_EQ(keep[0]->nbytes(), 4096u);
  EXPECT_THROW(ws(kGemmWorkspaceBytes + 1), Error);
}

TEST(CublasLt, PlansWithoutAProductNeedNoDevice) {
  const GemmWorkspace none = [](size_t) -> void* { return nullptr; };
  const GemmPlan empty = plan_gemm({{1}, {0}, {}, {}}, Shape{0, 3}, Shape{3, 4}, DType::f32, DType::f32, DType::f32);
  ASSERT_EQ(empty.kind, GemmPlan::Kind::empty);
  run_gemm_plan(empty, 0, nullptr, nullptr, nullptr, nullptr, none);  // nothing to do
  const GemmPlan ints = plan_gemm({{1}, {0}, {}, {}}, Shape{2, 3}, Shape{3, 4}, DType::i32, DType::i32, DType::i32);
  const std::string err = error_of([&] { run_gemm_plan(ints, 0, nullptr, nullptr, nullptr, nullptr, none); });
  EXPECT_NE(err.find("unsupported"), std::string::npos) << err;
  EXPECT_NE(err.find("i32 x i32 -> i32"), std::string::npos) << err;
}

// ---- On a device ----

int64_t product(const Ints64& v) { return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>()); }

void for_each_index(const Ints64& shape, const std::function<void(const Ints64&)>& f) {
  if (product(shape) == 0) return;
  Ints64 idx(shape.size(), 0);
  while (true) {
    f(idx);
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

int64_t offset(const Ints64& idx, const Ints64& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

float round_to(DType dtype, float v) {
  if (dtype == DType::bf16) return float(bf16(v));
  if (dtype == DType::f16) return float(f16(v));
  return v;
}

std::vector<char> encode(DType dtype, const std::vector<float>& v) {
  std::vector<char> out(v.size() * itemsize(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::bf16) {
      const bf16 x(v[i]);
      std::memcpy(out.data() + 2 * i, &x.bits, 2);
    } else if (dtype == DType::f16) {
      const f16 x(v[i]);
      std::memcpy(out.data() + 2 * i, &x.bits, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    }
  }
  return out;
}

std::vector<float> materialise(const Ints64& shape, const std::vector<float>& x, const Ints64& perm) {
  if (perm.empty()) return x;
  std::vector<float> out(x.size());
  const Ints64 src = Shape(shape).strides(), dst = permuted_strides(shape, perm);
  for_each_index(shape, [&](const Ints64& i) { out[size_t(offset(i, dst))] = x[size_t(offset(i, src))]; });
  return out;
}

const Device kCuda{DeviceKind::cuda, 0};

// `values` in `dtype` on cuda:0.
Array on_device(DType dtype, const std::vector<float>& values) {
  const std::vector<char> bytes = encode(dtype, values);
  return from_host(bytes.data(), Shape{int64_t(values.size())}, dtype, kCuda);
}

void* device_data(const Array& x) { return x.buffer()->data(); }

struct Layout {
  const char* name;
  DotDims dims;
  Ints64 ls, rs;
  std::optional<std::pair<Ints64, Ints64>> out_layout;  // (shape, perm) the output is written transposed by
};

struct Types {
  DType in, out;
  F32Matmul f32;
};

// Runs one product on device 0 and compares it with the host reference;
// returns the plan it ran.
GemmPlan check_on_device(const Layout& l, const Types& t, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> lhs(size_t(product(l.ls))), rhs(size_t(product(l.rs)));
  for (float& v : lhs) v = round_to(t.in, uni(rng));
  for (float& v : rhs) v = round_to(t.in, uni(rng));
  std::optional<Ints64> out_strides;
  if (l.out_layout) out_strides = permuted_strides(l.out_layout->first, l.out_layout->second);
  GemmPlanOptions options;
  options.f32 = t.f32;
  const GemmPlan plan =
      plan_gemm(l.dims, Shape(l.ls), Shape(l.rs), t.in, t.in, t.out, out_strides ? &*out_strides : nullptr, options);
  EXPECT_EQ(plan.kind, GemmPlan::Kind::gemm) << plan.str();
  if (plan.kind != GemmPlan::Kind::gemm) return plan;

  const Array a = on_device(t.in, materialise(plan.lhs_shape, lhs, plan.lhs_perm));
  const Array b = on_device(t.in, materialise(plan.rhs_shape, rhs, plan.rhs_perm));
  const int64_t d_elems = plan.out_perm.empty() ? plan.out_extent : product(plan.out_shape);
  const Array d = on_device(t.out, std::vector<float>(size_t(d_elems), NAN));  // NaN where nothing is written
  // On the backend's stream, after the uploads, with its scratch.
  DeviceState& state = device_state(0);
  std::vector<std::shared_ptr<Buffer>> keep;
  const GemmWorkspace scratch = context_workspace(state.kernel_context, keep);
  size_t asked = 0;
  run_gemm_plan(plan, 0, state.stream, device_data(a), device_data(b), device_data(d), [&](size_t n) {
    asked = n;
    return scratch(n);
  });
  EXPECT_LE(asked, kGemmWorkspaceBytes);
  const std::vector<float> got = device_get(d).to_vector<float>();
  cuda_backend().synchronize(0);

  // The reference in double from the dimension numbers, with the bound
  // sum |lhs * rhs| that scales the tolerance.
  const Ints64 lfree = free_axes(int64_t(l.ls.size()), l.dims.lhs_contracting, l.dims.lhs_batch);
  const Ints64 rfree = free_axes(int64_t(l.rs.size()), l.dims.rhs_contracting, l.dims.rhs_batch);
  Ints64 kshape;
  for (int64_t ax : l.dims.lhs_contracting) kshape.push_back(l.ls[size_t(ax)]);
  const Ints64 lst = Shape(l.ls).strides(), rst = Shape(l.rs).strides();
  const Ints64 src = plan.out_perm.empty() ? plan.out_strides : permuted_strides(plan.out_shape, plan.out_perm);
  const double acc_eps = t.f32 == F32Matmul::tf32 && t.in == DType::f32 ? 2e-3 : 1e-5;
  const double out_eps = t.out == DType::bf16 ? 4e-3 : t.out == DType::f16 ? 1e-3 : 0;
  int bad = 0;
  for_each_index(plan.out_shape, [&](const Ints64& o) {
    Ints64 li(l.ls.size()), ri(l.rs.size());
    size_t p = 0;
    for (size_t i = 0; i < l.dims.lhs_batch.size(); ++i, ++p) {
      li[size_t(l.dims.lhs_batch[i])] = o[p];
      ri[size_t(l.dims.rhs_batch[i])] = o[p];
    }
    for (int64_t ax : lfree) li[size_t(ax)] = o[p++];
    for (int64_t ax : rfree) ri[size_t(ax)] = o[p++];
    double ref = 0, bound = 0;
    for_each_index(kshape, [&](const Ints64& k) {
      for (size_t i = 0; i < k.size(); ++i) {
        li[size_t(l.dims.lhs_contracting[i])] = k[i];
        ri[size_t(l.dims.rhs_contracting[i])] = k[i];
      }
      const double x = double(lhs[size_t(offset(li, lst))]) * double(rhs[size_t(offset(ri, rst))]);
      ref += x;
      bound += std::fabs(x);
    });
    const double v = got[size_t(offset(o, src))];
    const double tol = acc_eps * bound + out_eps * std::fabs(ref) + 1e-6;
    if (!(std::fabs(v - ref) <= tol) && bad++ < 5) {
      ADD_FAILURE() << l.name << " " << dtype_short_name(t.in) << " -> " << dtype_short_name(t.out) << " at "
                    << ints_str(o) << ": " << v << " vs " << ref << " (tolerance " << tol << "); " << plan.str();
    }
  });
  return plan;
}

TEST(CublasLt, ProductsOfSeveralLayoutsOnDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 2, T = 17, S = 19, N = 4, H = 32;
  const std::vector<Layout> layouts = {
      {"x @ W", {{2}, {0}, {}, {}}, {4, 33, 64}, {64, 48}, std::nullopt},
      {"x @ W^T", {{2}, {1}, {}, {}}, {4, 33, 64}, {48, 64}, std::nullopt},
      {"x^T dy", {{0, 1}, {0, 1}, {}, {}}, {4, 33, 64}, {4, 33, 48}, std::nullopt},
      {"q k^T", {{3}, {3}, {0, 2}, {0, 2}}, {B, T, N, H}, {B, S, N, H}, std::nullopt},
      {"p v into (B, T, N, H)",
       {{3}, {1}, {0, 1}, {0, 2}},
       {B, N, T, S},
       {B, S, N, H},
       std::pair{Ints64{B, N, T, H}, Ints64{0, 2, 1, 3}}},
      {"batched, result transposed",
       {{2}, {1}, {0}, {0}},
       {3, 20, 24},
       {3, 24, 36},
       std::pair{Ints64{3, 20, 36}, Ints64{0, 2, 1}}},
      {"free axes split (a copy)", {{1}, {0}, {}, {}}, {8, 16, 24}, {16, 40}, std::nullopt},
  };
  const std::vector<Types> types = {
      {DType::f32, DType::f32, F32Matmul::f32},  {DType::f32, DType::f32, F32Matmul::tf32},
      {DType::bf16, DType::f32, F32Matmul::f32}, {DType::bf16, DType::bf16, F32Matmul::f32},
      {DType::f16, DType::f16, F32Matmul::f32},  {DType::f16, DType::f32, F32Matmul::f32},
  };
  std::mt19937 rng(3);
  for (const Layout& l : layouts) {
    for (const Types& t : types) check_on_device(l, t, rng);
  }
  // The same layouts again: every algorithm comes from the cache.
  const size_t cached = gemm_algorithms_cached();
  EXPECT_GT(cached, 0u);
  check_on_device(layouts[3], types[3], rng);
  EXPECT_EQ(gemm_algorithms_cached(), cached);
}

TEST(CublasLt, EmptyContractionWritesZerosOnDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const GemmPlan plan = plan_gemm({{1}, {0}, {}, {}}, Shape{5, 0}, Shape{0, 7}, DType::bf16, DType::bf16, DType::f32);
  ASSERT_EQ(plan.kind, GemmPlan::Kind::zeros);
  const Array out = on_device(DType::f32, std::vector<float>(35, NAN));
  run_gemm_plan(plan, 0, device_state(0).stream, nullptr, nullptr, device_data(out),
                [](size_t) -> void* { return nullptr; });
  const std::vector<float> host = device_get(out).to_vector<float>();
  for (float v : host) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace pax::cuda

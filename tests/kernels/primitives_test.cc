// The SIMD primitives of every instruction set this CPU has, against
// float64 references on random inputs.
#include "simd/primitives.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft::kernels::simd {
namespace {

class PrimitivesTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Primitives& P() { return *PrimitivesFor(GetParam().c_str()); }
  std::mt19937 rng_{42};
  std::vector<float> Random(size_t n) {
    std::normal_distribution<float> dist;
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng_);
    return x;
  }
};

std::vector<std::string> Isas() {
  int n = 0;
  const char* const* names = AvailableIsas(&n);
  return std::vector<std::string>(names, names + n);
}

INSTANTIATE_TEST_SUITE_P(Isa, PrimitivesTest, ::testing::ValuesIn(Isas()),
                         [](const auto& info) { return info.param; });

TEST_P(PrimitivesTest, GemmMatchesReferenceForAllRowTailsAndStrides) {
  for (int64_t M : {1, 2, 3, 5, 6, 7, 8, 13, 64}) {
    for (int64_t N : {16, 32, 80}) {
      for (int64_t K : {1, 7, 64, 129}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = K + 3, ldb = N + 16, ldc = N + 32;
          auto A = Random(M * lda), B = Random(K * ldb), C = Random(M * ldc);
          std::vector<double> ref(M * N);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = accumulate ? C[i * ldc + j] : 0.0;
              for (int64_t k = 0; k < K; ++k) s += double(A[i * lda + k]) * B[k * ldb + j];
              ref[i * N + j] = s;
            }
          auto C_before = C;
          P().gemm(M, N, K, A.data(), lda, B.data(), ldb, kPadN, C.data(), ldc, accumulate);
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j)
              ASSERT_NEAR(C[i * ldc + j], ref[i * N + j], 1e-5 * (K + 1) * 4)
                  << "M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
            // Columns past N are left alone.
            for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C_before[i * ldc + j]);
          }
        }
      }
    }
  }
}

TEST_P(PrimitivesTest, GemmReadsChunkedB) {
  const int64_t M = 9, N = 48, K = 33;
  auto A = Random(M * K), B = Random(K * N);
  // Chunked layout: [N / kPadN][K][kPadN].
  std::vector<float> chunked(K * N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) chunked[(n / kPadN) * K * kPadN + k * kPadN + n % kPadN] = B[k * N + n];
  std::vector<float> C1(M * N), C2(M * N);
  P().gemm(M, N, K, A.data(), K, B.data(), N, kPadN, C1.data(), N, false);
  P().gemm(M, N, K, A.data(), K, chunked.data(), kPadN, K * kPadN, C2.data(), N, false);
  EXPECT_EQ(C1, C2);
}

TEST_P(PrimitivesTest, ExpShiftSumIsAccurateAndMapsMinusInfinityToZero) {
  std::uniform_real_distribution<float> dist(-100.0f, 20.0f);
  for (int64_t n : {1, 5, 16, 37, 256}) {
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng_);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
    const float shift = 1.5f;
    auto y = x;
    float sum = P().exp_shift_sum(y.data(), n, shift);
    double ref_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      double e = std::exp(double(x[i] - shift));  // the argument rounds to float first
      ref_sum += e;
      if (std::isinf(x[i])) {
        EXPECT_EQ(y[i], 0.0f);
      } else if (e > 1e-30) {
        EXPECT_NEAR(y[i] / e, 1.0, 3e-7) << "x=" << x[i];
      } else {
        EXPECT_LE(y[i], 1e-30);
      }
    }
    EXPECT_NEAR(sum / ref_sum, 1.0, 1e-6);
  }
}

TEST_P(PrimitivesTest, RowMaxDotScaleSoftmaxGrad) {
  for (int64_t n : {1, 3, 16, 45}) {
    auto x = Random(n), y = Random(n);
    float m = -INFINITY;
    double dot = 0;
    for (int64_t i = 0; i < n; ++i) {
      m = std::max(m, x[i]);
      dot += double(x[i]) * y[i];
    }
    EXPECT_EQ(P().row_max(x.data(), n), m);
    EXPECT_NEAR(P().dot(x.data(), y.data(), n), dot, 1e-5 * n);
    auto z = x;
    P().scale(z.data(), n, 0.25f);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], x[i] * 0.25f);
    std::vector<float> ds(n);
    P().softmax_grad(x.data(), y.data(), 0.3f, 0.5f, ds.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(ds[i], double(x[i]) * (double(y[i]) - 0.3) * 0.5, 1e-6);
  }
  EXPECT_EQ(P().row_max(nullptr, 0), -INFINITY);
  // NaN propagates, wherever it is (vector body or tail).
  for (int64_t n : {3, 16, 21}) {
    for (int64_t at : {int64_t{0}, n - 1}) {
      std::vector<float> x(n, -INFINITY);
      x[at] = NAN;
      EXPECT_TRUE(std::isnan(P().row_max(x.data(), n))) << n << " " << at;
    }
  }
}

TEST(Primitives, ScopedIsaIsNestSafeAndRejectsUnknownNames) {
  const char* outer = GetPrimitives().isa;
  {
    ScopedIsa a("portable");
    EXPECT_STREQ(GetPrimitives().isa, "portable");
    {
      ScopedIsa b(Isas().front().c_str());
      EXPECT_STREQ(GetPrimitives().isa, Isas().front().c_str());
    }
    EXPECT_STREQ(GetPrimitives().isa, "portable");
  }
  EXPECT_STREQ(GetPrimitives().isa, outer);
  EXPECT_THROW(ScopedIsa("sse9"), Error);
}

}  // namespace
}  // namespace weft::kernels::simd

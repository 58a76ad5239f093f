// cholesky and triangular-solve in the executor against float64 references
// written here: factors multiplied back to their matrices, and solutions of
// systems built from known ones, for every variant (lower and upper,
// left and right side, transposed, unit diagonal), with the triangle that
// must not be read filled with large values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "error_of.h"
#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using weft::testing::ErrorOf;
using weft::testing::Mentions;

// [batch, n, n] positive definite matrices m m^T + n I, row-major.
std::vector<double> PositiveDefinite(int64_t batch, int64_t n, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> out(batch * n * n);
  for (int64_t k = 0; k < batch; ++k) {
    std::vector<double> m(n * n);
    for (double& v : m) v = normal(rng);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? static_cast<double>(n) : 0.0;
        for (int64_t p = 0; p < n; ++p) s += m[i * n + p] * m[j * n + p];
        out[(k * n + i) * n + j] = s;
      }
    }
  }
  return out;
}

TEST(EvalLinalgTest, CholeskyFactorsMultiplyBackToTheMatrix) {
  std::mt19937 rng(3);
  const int64_t batch = 3, n = 7;
  for (const char* type : {"f64", "f32"}) {
    for (bool lower : {true, false}) {
      SCOPED_TRACE(std::string(type) + (lower ? " lower" : " upper"));
      const std::string shape = std::string(type) + "[3,7,7]";
      const std::vector<double> a = PositiveDefinite(batch, n, rng);
      const std::string text = "HloModule m\nENTRY e {\n  a = " + shape +
                               " parameter(0)\n  ROOT c = " + shape +
                               " cholesky(a), lower=" + (lower ? "true" : "false") + "\n}\n";
      const std::vector<HostTensor> out =
          testing::RunText(text, {HostTensor::FromDoubles(ParseShape(shape), a)});
      const std::vector<double> f = out.at(0).ToDoubles();
      const double tol = std::string(type) == "f64" ? 1e-12 : 2e-5;
      for (int64_t k = 0; k < batch; ++k) {
        auto at = [&](int64_t i, int64_t j) { return f[(k * n + i) * n + j]; };
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            // The other triangle is zero.
            if (lower ? j > i : j < i) {
              EXPECT_EQ(at(i, j), 0.0) << i << "," << j;
            }
            // l l^T (lower) or u^T u (upper) gives a back.
            double s = 0;
            for (int64_t p = 0; p < n; ++p) s += lower ? at(i, p) * at(j, p) : at(p, i) * at(p, j);
            const double want = a[(k * n + i) * n + j];
            EXPECT_NEAR(s, want, tol * (1 + std::abs(want))) << k << ": " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(EvalLinalgTest, CholeskyReadsOneTriangleAndGivesNaNWhereNotPositiveDefinite) {
  std::mt19937 rng(5);
  const int64_t n = 4;
  std::vector<double> a = PositiveDefinite(2, n, rng);
  // Matrix 0: garbage above the diagonal (lower=true must not read it).
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 1e6;
  }
  // Matrix 1: a negative pivot in column 2.
  a[(n + 2) * n + 2] = -50;
  const std::string text = R"(HloModule m
ENTRY e {
  a = f64[2,4,4] parameter(0)
  ROOT c = f64[2,4,4] cholesky(a), lower=true
})";
  const std::vector<double> f =
      testing::RunText(text, {HostTensor::FromDoubles(ParseShape("f64[2,4,4]"), a)})
          .at(0)
          .ToDoubles();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t p = 0; p < n; ++p) s += f[i * n + p] * f[j * n + p];
      EXPECT_NEAR(s, a[i * n + j], 1e-9 * (1 + std::abs(a[i * n + j])));
    }
  }
  // Columns 0 and 1 of the second factor are finite; from the bad pivot on, NaN.
  EXPECT_TRUE(std::isfinite(f[n * n + 1 * n + 1]));
  EXPECT_TRUE(std::isnan(f[n * n + 2 * n + 2]));
  EXPECT_TRUE(std::isnan(f[n * n + 3 * n + 3]));
}

TEST(EvalLinalgTest, TriangularSolveRecoversKnownSolutionsInEveryVariant) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> diag(1.0, 2.0);
  const int64_t batch = 2, m = 5, n = 3;
  for (bool left : {true, false}) {
    for (bool lower : {true, false}) {
      for (const char* transpose : {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"}) {
        for (bool unit : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "left_side=" << left << " lower=" << lower
                                            << " transpose_a=" << transpose << " unit=" << unit);
          const bool t = std::string(transpose) != "NO_TRANSPOSE";
          // a: the stored triangle random (diagonal away from 0), the other
          // triangle large garbage that must not be read.
          std::vector<double> a(batch * m * m);
          for (int64_t k = 0; k < batch; ++k) {
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < m; ++j) {
                const bool stored = lower ? j <= i : j >= i;
                a[(k * m + i) * m + j] = !stored ? 1e6 : i == j ? diag(rng) : 0.5 * normal(rng);
              }
            }
          }
          // op(a) as used: the stored triangle, a unit diagonal if asked, transposed.
          auto op = [&](int64_t k, int64_t i, int64_t j) {
            const int64_t r = t ? j : i, c = t ? i : j;
            if (r == c) return unit ? 1.0 : a[(k * m + r) * m + c];
            const bool stored = lower ? c < r : c > r;
            return stored ? a[(k * m + r) * m + c] : 0.0;
          };
          const int64_t rows = left ? m : n, cols = left ? n : m;
          std::vector<double> x(batch * rows * cols), b(batch * rows * cols, 0.0);
          for (double& v : x) v = normal(rng);
          for (int64_t k = 0; k < batch; ++k) {
            for (int64_t i = 0; i < rows; ++i) {
              for (int64_t j = 0; j < cols; ++j) {
                double s = 0;
                for (int64_t p = 0; p < m; ++p) {
                  s += left ? op(k, i, p) * x[(k * rows + p) * cols + j]
                            : x[(k * rows + i) * cols + p] * op(k, p, j);
                }
                b[(k * rows + i) * cols + j] = s;
              }
            }
          }
          const std::string a_shape = "f64[2,5,5]";
          const std::string b_shape = left ? "f64[2,5,3]" : "f64[2,3,5]";
          const std::string text =
              "HloModule m\nENTRY e {\n  a = " + a_shape + " parameter(0)\n  b = " + b_shape +
              " parameter(1)\n  ROOT x = " + b_shape +
              " triangular-solve(a, b), left_side=" + (left ? "true" : "false") +
              ", lower=" + (lower ? "true" : "false") +
              ", unit_diagonal=" + (unit ? "true" : "false") + ", transpose_a=" + transpose +
              "\n}\n";
          const std::vector<double> got =
              testing::RunText(text, {HostTensor::FromDoubles(ParseShape(a_shape), a),
                                      HostTensor::FromDoubles(ParseShape(b_shape), b)})
                  .at(0)
                  .ToDoubles();
          ASSERT_EQ(got.size(), x.size());
          for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], x[i], 1e-9) << i;
        }
      }
    }
  }
}

TEST(EvalLinalgTest, IntegersAreRefusedByName) {
  const std::string error = ErrorOf([] {
    testing::RunText(R"(HloModule m
ENTRY e {
  a = s32[3,3] parameter(0)
  ROOT c = s32[3,3] cholesky(a), lower=true
})",
                     {HostTensor(Shape(PrimitiveType::kS32, {3, 3}))});
  });
  EXPECT_TRUE(Mentions(error, "cholesky")) << error;
}

}  // namespace
}  // namespace weft::runtime

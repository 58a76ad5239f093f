// The SIMD primitives of every instruction set this CPU has, and the AMX
// GEMM on the software model of the tile instructions, against float64
// references on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "weft/base/bfloat16.h"
#include "weft/base/cpu.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"

namespace weft::kernels::simd {
namespace {

class PrimitivesTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Primitives& P() {
    return GetParam() == "amx-emulated" ? EmulatedAmxPrimitives()
                                        : *PrimitivesFor(GetParam().c_str());
  }
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

std::vector<std::string> IsasAndEmulatedAmx() {
  auto isas = Isas();
  isas.push_back("amx-emulated");
  return isas;
}

INSTANTIATE_TEST_SUITE_P(Isa, PrimitivesTest, ::testing::ValuesIn(IsasAndEmulatedAmx()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST_P(PrimitivesTest, GemmMatchesReferenceForAllRowTailsAndStrides) {
  for (int64_t M : {1, 2, 3, 5, 6, 7, 8, 13, 64}) {
    for (int64_t N : {16, 32, 80}) {
      for (int64_t K : {1, 7, 64, 129, 300}) {
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
    for (int64_t n = 0; n < N; ++n)
      chunked[(n / kPadN) * K * kPadN + k * kPadN + n % kPadN] = B[k * N + n];
  std::vector<float> C1(M * N), C2(M * N);
  P().gemm(M, N, K, A.data(), K, B.data(), N, kPadN, C1.data(), N, false);
  P().gemm(M, N, K, A.data(), K, chunked.data(), kPadN, K * kPadN, C2.data(), N, false);
  EXPECT_EQ(C1, C2);
}

// Each C element is one chain of multiply-adds over k in order, whatever
// register block (rows x chunks) computes it: the full product equals one
// call per row and per kPadN-column chunk, bit for bit.
TEST_P(PrimitivesTest, GemmResultsDoNotDependOnTheRegisterBlock) {
  for (int64_t M : {1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 64}) {
    for (int64_t N : {16, 32, 48, 80, 128}) {
      for (int64_t K : {1, 37, 128}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = K + 1, ldb = kPadN, cs = K * kPadN + 16, ldc = N + 8;
          auto A = Random(M * lda), B = Random((N / kPadN) * cs), C = Random(M * ldc);
          auto whole = C, pieces = C;
          P().gemm(M, N, K, A.data(), lda, B.data(), ldb, cs, whole.data(), ldc, accumulate);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t c = 0; c < N / kPadN; ++c)
              P().gemm(1, kPadN, K, A.data() + i * lda, lda, B.data() + c * cs, ldb, cs,
                       pieces.data() + i * ldc + c * kPadN, ldc, accumulate);
          ASSERT_EQ(0, std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)))
              << "M=" << M << " N=" << N << " K=" << K << " accumulate=" << accumulate;
        }
      }
    }
  }
}

// gemm_transposed_a reads A stored [K x M] (lda apart): it matches a
// float64 reference, and bit for bit gemm on the row-major transpose (the
// same multiply-adds over k in order), across register-block tails and K
// beyond one pass of B's rows (256).
TEST_P(PrimitivesTest, GemmTransposedAMatchesReferenceAndGemmOnTheTranspose) {
  for (int64_t M : {1, 5, 8, 9, 64, 130}) {
    for (int64_t N : {16, 48, 96}) {
      for (int64_t K : {1, 33, 256, 600}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = M + 5, ldb = N + 16, ldc = N + 8;
          auto At = Random(K * lda), B = Random(K * ldb), C = Random(M * ldc);
          std::vector<float> A(M * K);  // row-major copy
          for (int64_t k = 0; k < K; ++k)
            for (int64_t i = 0; i < M; ++i) A[i * K + k] = At[k * lda + i];
          auto got = C, want = C;
          P().gemm_transposed_a(M, N, K, At.data(), lda, B.data(), ldb, kPadN, got.data(), ldc,
                                accumulate);
          P().gemm(M, N, K, A.data(), K, B.data(), ldb, kPadN, want.data(), ldc, accumulate);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << "M=" << M << " N=" << N << " K=" << K << " accumulate=" << accumulate;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double s = accumulate ? C[i * ldc + j] : 0.0;
              for (int64_t k = 0; k < K; ++k) s += double(At[k * lda + i]) * B[k * ldb + j];
              ASSERT_NEAR(got[i * ldc + j], s, 1e-5 * (K + 1) * 4)
                  << "M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
            }
            for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], C[i * ldc + j]);
          }
        }
      }
    }
  }
}

// Random bf16 bits (normal values: vdpbf16ps treats subnormals as zero).
std::vector<uint16_t> RandomBf16(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> dist;
  std::vector<uint16_t> x(n);
  for (auto& v : x) v = bf16(dist(rng)).bits;
  return x;
}

TEST_P(PrimitivesTest, GemmBf16MatchesFloat64ReferenceForOddSizes) {
  const uint16_t kNanBits = 0x7fc1;
  // AMX tiles are 16 rows and 32 k: M and K around those (16, 31, 32, 33)
  // exercise its in-place blocks, its row tails and its k tail.
  for (int64_t M : {1, 3, 7, 8, 9, 13, 16, 17, 31, 33, 64}) {
    for (int64_t N : {16, 32, 48, 80}) {
      for (int64_t K : {0, 1, 2, 7, 31, 32, 33, 64, 129}) {
        for (bool accumulate : {false, true}) {
          // A's row padding holds NaN: a kernel that read past K would show it.
          const int64_t lda = K + 3, ldc = N + 16;
          auto A = RandomBf16(rng_, M * lda);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t k = K; k < lda; ++k) A[i * lda + k] = kNanBits;
          const auto Bk = RandomBf16(rng_, K * N);  // row-major [K x N]
          // Pair-packed, with a chunk stride larger than one chunk.
          const int64_t stride = PairChunkSize(K) + kPairRow;
          std::vector<uint16_t> B((N / kPadN) * stride, kNanBits);
          for (int64_t c = 0; c < N / kPadN; ++c)
            for (int64_t k = 0; k < (K + 1) / 2 * 2; ++k)
              for (int64_t j = 0; j < kPadN; ++j)
                B[c * stride + (k / 2) * kPairRow + j * 2 + k % 2] =
                    k < K ? Bk[k * N + c * kPadN + j] : 0;
          auto C = Random(M * ldc);
          std::vector<double> ref(M * N);
          double bound = 0;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = accumulate ? C[i * ldc + j] : 0.0, mag = std::abs(s);
              for (int64_t k = 0; k < K; ++k) {
                const double prod =
                    double(bf16::ToFloat(A[i * lda + k])) * bf16::ToFloat(Bk[k * N + j]);
                s += prod;
                mag += std::abs(prod);
              }
              ref[i * N + j] = s;
              bound = std::max(bound, mag);
            }
          auto C_before = C;
          P().gemm_bf16(M, N, K, A.data(), lda, B.data(), stride, C.data(), ldc, accumulate);
          // Exact products, float32 accumulation: error <= K ulp of the magnitude.
          const double tol = (K + 1) * 6e-8 * bound + 1e-30;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j)
              ASSERT_NEAR(C[i * ldc + j], ref[i * N + j], tol)
                  << "M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
            for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C_before[i * ldc + j]);
          }
        }
      }
    }
  }
}

// oneDNN's AMX matmuls run on the same threads as weft's AMX GEMM and
// release the tiles when they finish (TILERELEASE), after which every tile
// instruction but ldtilecfg faults: the GEMM must configure its tiles on
// each call, not once per thread. Found on a Xeon with AMX, where bf16
// training died with SIGILL.
TEST_P(PrimitivesTest, AmxGemmRunsAfterAnotherTileUserReleasedTheTiles) {
  if (GetParam() != "amx" && GetParam() != "amx-emulated") {
    GTEST_SKIP() << "no tiles";
  }
  ScopedIsa isa(P());
  ASSERT_STREQ(GetBf16Primitives().isa, GetParam().c_str());
  constexpr int64_t M = 33, N = 32, K = 40;
  const auto A = RandomBf16(rng_, M * K);
  const auto B = RandomBf16(rng_, (N / kPadN) * PairChunkSize(K));
  std::vector<float> first(M * N), second(M * N, 7.0f);
  P().gemm_bf16(M, N, K, A.data(), K, B.data(), PairChunkSize(K), first.data(), N, false);
  ReleaseAmxTiles();  // another library's kernel, finishing
  P().gemm_bf16(M, N, K, A.data(), K, B.data(), PairChunkSize(K), second.data(), N, false);
  ReleaseAmxTiles();
  float sink = 0;
  if (P().bf16_dot_peak_loop != nullptr) {  // the peak loop also configures its tiles
    EXPECT_GT(P().bf16_dot_peak_loop(3, &sink), 0);
  }
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(second[i], first[i]) << i;
  double largest = 0;
  for (float v : first) largest = std::max(largest, double(std::abs(v)));
  EXPECT_GT(largest, 0.0);  // random inputs: the product is not all zeros
}

// Inside an AmxTileScope (attention's task loops) the GEMMs share one tile
// configuration: the same results, the tiles released when the outermost
// scope ends; only a foreign release inside the scope breaks it, which the
// model reports as the fault the hardware would raise.
TEST_P(PrimitivesTest, AmxTileScopeSharesOneConfigurationAndReleasesAtItsEnd) {
  if (GetParam() != "amx" && GetParam() != "amx-emulated") {
    GTEST_SKIP() << "no tiles";
  }
  ScopedIsa isa(P());
  constexpr int64_t M = 40, N = 48, K = 70;
  const auto A = RandomBf16(rng_, M * K);
  const auto B = RandomBf16(rng_, (N / kPadN) * PairChunkSize(K));
  auto gemm = [&](std::vector<float>& c) {
    P().gemm_bf16(M, N, K, A.data(), K, B.data(), PairChunkSize(K), c.data(), N, false);
  };
  std::vector<float> unscoped(M * N), scoped(M * N), nested(M * N), after(M * N);
  gemm(unscoped);
  {
    const AmxTileScope outer(P());
    gemm(scoped);
    {
      const AmxTileScope inner(P());
      gemm(nested);
    }
    gemm(scoped);  // the inner scope's end kept the tiles
  }
  ReleaseAmxTiles();  // another library, after the scope
  gemm(after);
  EXPECT_EQ(scoped, unscoped);
  EXPECT_EQ(nested, unscoped);
  EXPECT_EQ(after, unscoped);
  if (GetParam() == "amx-emulated") {
    const AmxTileScope scope(P());
    gemm(scoped);
    ReleaseAmxTiles();  // breaks the scope's contract
    EXPECT_THROW(gemm(scoped), Error);
  }
  // A scope for other primitives does nothing.
  const AmxTileScope none(*PrimitivesFor("portable"));
  gemm(after);
  EXPECT_EQ(after, unscoped);
}

TEST_P(PrimitivesTest, Bf16DotPeakLoopOnlyWhereTheInstructionExists) {
  const bool has = GetParam() == "avx512bf16" || GetParam() == "amx";
  ASSERT_EQ(P().bf16_dot_peak_loop != nullptr, has);
  if (has) {
    float sink = 0;
    // vdpbf16ps: 16 accumulators x 16 lanes x 2 pairs x 2 flops; TDPBF16PS:
    // 4 tiles x 16 x 16 outputs x 32 products x 2 flops.
    const int64_t per_round = GetParam() == "amx" ? 4 * 16 * 16 * 32 * 2 : 16 * 16 * 4;
    EXPECT_EQ(P().bf16_dot_peak_loop(100, &sink), 100 * per_round);
    EXPECT_TRUE(std::isfinite(sink));
    EXPECT_GT(sink, 0.0f);
  }
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

TEST_P(PrimitivesTest, F32ToBf16TransposedRoundsLikeBf16AndWritesOnlyItsBlock) {
  // Values whose rounding is easy to get wrong: NaNs (a signalling one, whose
  // plain rounding would give infinity, and a negative one), infinities,
  // signed zeros, ties to even (down and up), overflow to infinity on
  // rounding, subnormals.
  std::vector<float> special;
  for (uint32_t u :
       {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7f800000u, 0xff800000u, 0u, 0x80000000u,
        0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u, 0x807fffffu}) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    special.push_back(x);
  }
  std::uniform_int_distribution<size_t> pick(0, 3 * special.size());
  const uint16_t kSentinel = 0xabcd;
  for (int64_t rows : {1, 3, 15, 16, 17, 33, 64, 100}) {
    for (int64_t cols : {1, 3, 15, 16, 17, 33, 64, 100}) {
      const int64_t ld_src = cols + 5, ld_dst = rows + 3;
      auto src = Random(rows * ld_src);
      // About a quarter of the values special, spread over whole blocks and edges.
      for (auto& v : src) {
        const size_t k = pick(rng_);
        if (k < special.size()) v = special[k];
      }
      // dst has a row more than needed: nothing past [cols x rows] may change.
      std::vector<uint16_t> dst((cols + 1) * ld_dst, kSentinel);
      P().f32_to_bf16_transposed(src.data(), rows, cols, ld_src, dst.data(), ld_dst);
      for (int64_t c = 0; c <= cols; ++c)
        for (int64_t r = 0; r < ld_dst; ++r) {
          const uint16_t want = c < cols && r < rows ? bf16(src[r * ld_src + c]).bits : kSentinel;
          ASSERT_EQ(dst[c * ld_dst + r], want)
              << "rows=" << rows << " cols=" << cols << " at dst row " << c << ", column " << r;
        }
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
  {
    ScopedIsa emulated(EmulatedAmxPrimitives());
    EXPECT_STREQ(GetBf16Primitives().isa, "amx-emulated");
  }
  EXPECT_STREQ(GetPrimitives().isa, outer);
}

TEST(Primitives, AmxIsListedOnlyWhereItCanRunAndExplainedWhenNot) {
  const bool listed = PrimitivesFor("amx") != nullptr;
  if (listed) {
    EXPECT_TRUE(GetAmxStatus().usable);
    EXPECT_STREQ(GetBf16Primitives().isa, "amx");
    EXPECT_STREQ(GetPrimitives().isa, "avx512");  // float32 never runs the bf16 copies
    return;
  }
  try {
    ScopedIsa forced("amx");
    ADD_FAILURE() << "no error for amx on a machine that cannot run it";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("AMX cannot run here"), std::string::npos) << what;
    // The reason: the CPU, the OS or Linux (GetAmxStatus), or, where those
    // allow AMX, the palette or the start-up comparison with the model.
    if (!GetAmxStatus().usable) {
      EXPECT_NE(what.find(GetAmxStatus().why_not), std::string::npos) << what;
    } else {
      EXPECT_TRUE(what.find("palette") != std::string::npos ||
                  what.find("software model") != std::string::npos)
          << what;
    }
  }
}

TEST(Primitives, Bf16CallsUseTheBf16IsaWhereTheCpuHasIt) {
  // float32 kernels never run the avx512bf16 copy by default (their code is
  // avx512's); bfloat16 kernels take it when present.
  EXPECT_STRNE(GetPrimitives().isa, "avx512bf16");
  EXPECT_STRNE(GetPrimitives().isa, "amx");
  EXPECT_STREQ(GetBf16Primitives().isa, Isas().front().c_str());
  ScopedIsa forced("portable");
  EXPECT_STREQ(GetBf16Primitives().isa, "portable");
}

// Bf16InstructionsAllowed: true unless the forced instruction set has no
// bf16 dot instruction (portable, avx2, avx512, the AMX model); the tests
// run without WEFT_ISA, and with it the forced set decides.
TEST(Primitives, Bf16InstructionsAreAllowedUnlessAnIsaWithoutThemIsForced) {
  if (!GetEnv("WEFT_ISA")) {
    EXPECT_TRUE(Bf16InstructionsAllowed());
  }
  for (const std::string& isa : Isas()) {
    ScopedIsa forced(isa.c_str());
    EXPECT_EQ(Bf16InstructionsAllowed(), isa == "amx" || isa == "avx512bf16") << isa;
    {
      ScopedIsa emulated(EmulatedAmxPrimitives());
      EXPECT_FALSE(Bf16InstructionsAllowed());
    }
    EXPECT_EQ(Bf16InstructionsAllowed(), isa == "amx" || isa == "avx512bf16") << isa;
  }
}

}  // namespace
}  // namespace weft::kernels::simd

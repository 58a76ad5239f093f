#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "executor_test_util.h"
#include "weft/base/algorithm.h"
#include "weft/base/cpu.h"
#include "weft/base/thread_pool.h"
#include "weft/kernels/simd.h"

namespace weft::runtime {
namespace {

using testing::ExpectNear;
using testing::Random;
using testing::Ravel;
using testing::RunNamed;
using testing::Unravel;

// XLA's dot in float64: result dims are batch, lhs free, rhs free.
std::vector<double> ReferenceDot(const HostTensor& lhs, const HostTensor& rhs,
                                 const DotDimensionNumbers& dn) {
  std::vector<int64_t> lf, rf;
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d)) lf.push_back(d);
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d)) rf.push_back(d);
  }
  std::vector<int64_t> out_dims, contract_dims;
  for (int64_t d : dn.lhs_batch_dims) out_dims.push_back(lhs.dimensions()[d]);
  for (int64_t d : lf) out_dims.push_back(lhs.dimensions()[d]);
  for (int64_t d : rf) out_dims.push_back(rhs.dimensions()[d]);
  for (int64_t d : dn.lhs_contracting_dims) contract_dims.push_back(lhs.dimensions()[d]);
  int64_t out_n = 1, k_n = 1;
  for (int64_t d : out_dims) out_n *= d;
  for (int64_t d : contract_dims) k_n *= d;
  std::vector<double> out;
  for (int64_t o = 0; o < out_n; ++o) {
    const std::vector<int64_t> oi = Unravel(o, out_dims);
    double acc = 0;
    for (int64_t k = 0; k < k_n; ++k) {
      const std::vector<int64_t> ki = Unravel(k, contract_dims);
      std::vector<int64_t> li(lhs.rank()), ri(rhs.rank());
      size_t at = 0;
      for (size_t b = 0; b < dn.lhs_batch_dims.size(); ++b, ++at) {
        li[dn.lhs_batch_dims[b]] = oi[at];
        ri[dn.rhs_batch_dims[b]] = oi[at];
      }
      for (int64_t d : lf) li[d] = oi[at++];
      for (int64_t d : rf) ri[d] = oi[at++];
      for (size_t c = 0; c < ki.size(); ++c) {
        li[dn.lhs_contracting_dims[c]] = ki[c];
        ri[dn.rhs_contracting_dims[c]] = ki[c];
      }
      acc +=
          lhs.GetDouble(Ravel(li, lhs.dimensions())) * rhs.GetDouble(Ravel(ri, rhs.dimensions()));
    }
    out.push_back(acc);
  }
  return out;
}

struct DotCase {
  std::string lhs, rhs, out;
  DotDimensionNumbers dn;
};

std::string DimsText(const std::vector<int64_t>& v) {
  return fmt::format("{{{}}}", fmt::join(v, ","));
}

std::string DotModuleText(const DotCase& c) {
  std::string text = "HloModule m\nENTRY e {\n  a = " + c.lhs + " parameter(0)\n  b = " + c.rhs +
                     " parameter(1)\n  ROOT d = " + c.out + " dot(a, b)";
  if (!c.dn.lhs_batch_dims.empty()) {
    text += ", lhs_batch_dims=" + DimsText(c.dn.lhs_batch_dims) +
            ", rhs_batch_dims=" + DimsText(c.dn.rhs_batch_dims);
  }
  return text + ", lhs_contracting_dims=" + DimsText(c.dn.lhs_contracting_dims) +
         ", rhs_contracting_dims=" + DimsText(c.dn.rhs_contracting_dims) + "\n}\n";
}

void CheckDot(const DotCase& c, std::mt19937& rng, double tol) {
  const std::string text = DotModuleText(c);
  const bool integer = c.lhs[0] == 's';
  HostTensor a = Random(c.lhs, rng, integer ? -9 : -1, integer ? 9 : 1);
  HostTensor b = Random(c.rhs, rng, integer ? -9 : -1, integer ? 9 : 1);
  const std::vector<double> want = ReferenceDot(a, b, c.dn);
  const double k = static_cast<double>(a.element_count()) / 1;  // scale the tolerance with size
  // One executor runs it twice: the second run uses the cached primitive.
  std::unique_ptr<HloModule> module = testing::Parse(text);
  Executor executor(*module);
  for (int run = 0; run < 2; ++run) {
    std::vector<HostTensor> out = executor.Run({a, b});
    ExpectNear(out.at(0), want, tol, tol * std::sqrt(k) * 0.1, text);
  }
}

std::string ShapeText(const std::string& type, const std::vector<int64_t>& dims) {
  return type + fmt::format("[{}]", fmt::join(dims, ","));
}

// A random dot: batch, free and contracting dims of random sizes (1 among
// them), placed in a random order in each operand; contracting dims paired
// in a random order. Covers operands read in place (row-major, transposed,
// permuted batch dims, any batch stride) and those that need the packed
// copy (groups that do not merge, no unit stride).
DotCase RandomDot(std::mt19937& rng, const std::string& type, const std::string& out_type) {
  auto count = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto size = [&] { return std::vector<int64_t>{1, 2, 3, 5, 8, 13}[count(0, 5)]; };
  std::vector<int64_t> bs(count(0, 2)), ms(count(0, 2)), ks(count(1, 2)), ns(count(0, 2));
  for (auto* v : {&bs, &ms, &ks, &ns}) {
    for (int64_t& x : *v) x = size();
  }
  // Places batch (role 0), free (1) and contracting (2) dims in a random
  // order; records where each batch and contracting dim went.
  auto place = [&](const std::vector<int64_t>& free, std::vector<int64_t>& dims,
                   std::vector<int64_t>& batch_at, std::vector<int64_t>& contract_at) {
    std::vector<std::pair<int, size_t>> roles;
    for (size_t i = 0; i < bs.size(); ++i) roles.push_back({0, i});
    for (size_t i = 0; i < free.size(); ++i) roles.push_back({1, i});
    for (size_t i = 0; i < ks.size(); ++i) roles.push_back({2, i});
    std::shuffle(roles.begin(), roles.end(), rng);
    batch_at.assign(bs.size(), 0);
    contract_at.assign(ks.size(), 0);
    for (size_t d = 0; d < roles.size(); ++d) {
      auto [role, i] = roles[d];
      dims.push_back(role == 0 ? bs[i] : role == 1 ? free[i] : ks[i]);
      if (role == 0) batch_at[i] = static_cast<int64_t>(d);
      if (role == 2) contract_at[i] = static_cast<int64_t>(d);
    }
  };
  DotCase c;
  std::vector<int64_t> ld, rd, lb, lc, rb, rc;
  place(ms, ld, lb, lc);
  place(ns, rd, rb, rc);
  // The result: batch dims, then each operand's free dims in its order.
  std::vector<int64_t> out_dims = bs;
  for (int64_t d = 0; d < static_cast<int64_t>(ld.size()); ++d) {
    if (!Contains(lb, d) && !Contains(lc, d)) out_dims.push_back(ld[d]);
  }
  for (int64_t d = 0; d < static_cast<int64_t>(rd.size()); ++d) {
    if (!Contains(rb, d) && !Contains(rc, d)) out_dims.push_back(rd[d]);
  }
  std::vector<size_t> korder(ks.size());
  std::iota(korder.begin(), korder.end(), 0);
  std::shuffle(korder.begin(), korder.end(), rng);
  for (size_t i : korder) {
    c.dn.lhs_contracting_dims.push_back(lc[i]);
    c.dn.rhs_contracting_dims.push_back(rc[i]);
  }
  c.dn.lhs_batch_dims = lb;
  c.dn.rhs_batch_dims = rb;
  c.lhs = ShapeText(type, ld);
  c.rhs = ShapeText(type, rd);
  c.out = ShapeText(out_type, out_dims);
  return c;
}

TEST(EvalDotTest, MatrixProductsInEveryOperandOrientation) {
  std::mt19937 rng(1);
  CheckDot({"f32[7,9]", "f32[9,5]", "f32[7,5]", {{}, {1}, {}, {0}}}, rng, 1e-5);
  CheckDot({"f32[9,7]", "f32[9,5]", "f32[7,5]", {{}, {0}, {}, {0}}}, rng, 1e-5);  // lhs transposed
  CheckDot({"f32[7,9]", "f32[5,9]", "f32[7,5]", {{}, {1}, {}, {1}}}, rng, 1e-5);  // rhs transposed
  CheckDot({"f32[9,7]", "f32[5,9]", "f32[7,5]", {{}, {0}, {}, {1}}}, rng, 1e-5);  // both
  CheckDot({"f32[33]", "f32[33]", "f32[]", {{}, {0}, {}, {0}}}, rng, 1e-5);       // inner product
  CheckDot({"f32[64,96]", "f32[96,48]", "f32[64,48]", {{}, {1}, {}, {0}}}, rng, 1e-5);
}

TEST(EvalDotTest, BatchAndContractingDimsAnywhere) {
  std::mt19937 rng(2);
  // Attention scores: [B,H,S,D] x [B,H,T,D] -> [B,H,S,T].
  CheckDot({"f32[2,3,8,16]", "f32[2,3,10,16]", "f32[2,3,8,10]", {{0, 1}, {3}, {0, 1}, {3}}}, rng,
           1e-5);
  // Batch dim in the middle of both operands: [S,B,D] x [D,B,T] -> [B,S,T].
  CheckDot({"f32[6,4,5]", "f32[5,4,7]", "f32[4,6,7]", {{1}, {2}, {1}, {0}}}, rng, 1e-5);
  // Two contracting dims in swapped order: [A,C1,C2] x [C2,N,C1] -> [A,N].
  CheckDot({"f32[3,4,5]", "f32[5,6,4]", "f32[3,6]", {{}, {1, 2}, {}, {2, 0}}}, rng, 1e-5);
  // Free dims on both sides of a contracting dim: [M1,K,M2] x [K,N] -> [M1,M2,N].
  CheckDot({"f32[3,8,4]", "f32[8,5]", "f32[3,4,5]", {{}, {1}, {}, {0}}}, rng, 1e-5);
  // Batch dims out of order: lhs batch {2,0}, rhs batch {0,1}.
  CheckDot({"f32[3,6,2,5]", "f32[2,3,5,4]", "f32[2,3,6,4]", {{2, 0}, {3}, {0, 1}, {2}}}, rng, 1e-5);
}

TEST(EvalDotTest, MixedPrecisionAndIntegers) {
  std::mt19937 rng(3);
  CheckDot({"bf16[16,32]", "bf16[32,8]", "f32[16,8]", {{}, {1}, {}, {0}}}, rng, 1e-5);
  CheckDot({"bf16[4,16,32]", "bf16[4,8,32]", "bf16[4,16,8]", {{0}, {2}, {0}, {2}}}, rng, 8e-3);
  CheckDot({"s32[5,7]", "s32[7,3]", "s32[5,3]", {{}, {1}, {}, {0}}}, rng, 0);
  CheckDot({"s64[2,5,7]", "s64[2,3,7]", "s64[2,5,3]", {{0}, {2}, {0}, {2}}}, rng, 0);
}

TEST(EvalDotTest, RandomDimensionNumbersAndOperandOrders) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) CheckDot(RandomDot(rng, "f32", "f32"), rng, 1e-5);
}

TEST(EvalDotTest, RandomBf16Operands) {
  std::mt19937 rng(8);
  // bf16 inputs are exact in f32; an f32 result is rounded once.
  for (int i = 0; i < 60; ++i) CheckDot(RandomDot(rng, "bf16", "f32"), rng, 1e-5);
  for (int i = 0; i < 30; ++i) CheckDot(RandomDot(rng, "bf16", "bf16"), rng, 8e-3);
}

// bf16 dots against float64 dots of the same bf16 values. bf16 inputs are
// exact in f32 and their products too, so only the f32 accumulation rounds:
// an f32 result is within 1e-5 * sum_k |a_k b_k| of the float64 one (above
// the worst case K * 2^-24 for the K <= 64 here); a bf16 result is that
// rounded once more, within half a bf16 ulp, 2^-8 * |want|, beyond it.
struct Bf16Check {
  DotCase c;
  std::string name;
};

std::vector<Bf16Check> Bf16Layouts(const std::string& out) {
  auto t = [&](std::string dims) { return "bf16" + dims; };
  auto o = [&](std::string dims) { return out + dims; };
  return {
      {{t("[24,40]"), t("[40,32]"), o("[24,32]"), {{}, {1}, {}, {0}}}, "row-major"},
      {{t("[40,24]"), t("[40,32]"), o("[24,32]"), {{}, {0}, {}, {0}}}, "lhs transposed"},
      {{t("[24,40]"), t("[32,40]"), o("[24,32]"), {{}, {1}, {}, {1}}}, "rhs transposed"},
      {{t("[40,24]"), t("[32,40]"), o("[24,32]"), {{}, {0}, {}, {1}}}, "both transposed"},
      {{t("[2,3,24,16]"), t("[2,3,20,16]"), o("[2,3,24,20]"), {{0, 1}, {3}, {0, 1}, {3}}},
       "batched scores"},
      {{t("[24,4,16]"), t("[4,16,20]"), o("[4,24,20]"), {{1}, {2}, {0}, {1}}},
       "strided batch (not dense)"},
      {{t("[2,24,3,16]"), t("[2,20,3,16]"), o("[2,3,24,20]"), {{0, 2}, {3}, {0, 2}, {3}}},
       "batch dims that do not merge (packed)"},
      {{t("[3,4,5]"), t("[5,6,4]"), o("[3,6]"), {{}, {1, 2}, {}, {2, 0}}},
       "contracting dims swapped (packed)"},
  };
}

HostTensor Abs(const HostTensor& x) {
  std::vector<double> v = x.ToDoubles();
  for (double& e : v) e = std::fabs(e);
  return HostTensor::FromDoubles(x.shape(), v);
}

// Runs c on `executor`'s module and checks it against float64; returns
// the run's stats.
ExecutorStats CheckBf16Dot(const DotCase& c, Executor& executor, const HostTensor& a,
                           const HostTensor& b, const std::string& what) {
  const std::vector<double> want = ReferenceDot(a, b, c.dn);
  const std::vector<double> magnitude = ReferenceDot(Abs(a), Abs(b), c.dn);  // sum |a_k b_k|
  const HostTensor got = executor.Run({a, b}).at(0);
  const bool bf16_result = got.element_type() == PrimitiveType::kBF16;
  int64_t misses = 0;
  for (int64_t i = 0; i < got.element_count(); ++i) {
    const double bound =
        1e-5 * magnitude[i] + (bf16_result ? std::ldexp(std::fabs(want[i]), -8) : 0.0);
    if (!(std::fabs(got.GetDouble(i) - want[i]) <= bound) && misses++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": got " << got.GetDouble(i) << ", want "
                    << want[i] << " (bound " << bound << ")";
    }
  }
  EXPECT_EQ(misses, 0) << what;
  return executor.stats();
}

// The path a bf16 dot took, seen in its scratch: the native one reads the
// bf16 operands in place (packed copies at 2 bytes, reserved by the
// compiler), so nothing outside the plan; the widening one makes f32 copies
// the compiler did not reserve. Native where bf16 instructions are allowed
// (no WEFT_ISA or ScopedIsa without them) on a CPU oneDNN has bf16 kernels
// for (avx512_core); widened wherever they are not allowed.
void ExpectPath(const ExecutorStats& stats, const std::string& what) {
  if (!kernels::simd::Bf16InstructionsAllowed()) {
    EXPECT_GT(stats.unplanned_bytes, 0) << what << ": expected the widening path";
  } else if (GetCpuInfo().HasAvx512()) {
    EXPECT_EQ(stats.unplanned_bytes, 0) << what << ": expected oneDNN's bf16 matmul";
  }
}

TEST(EvalDotTest, Bf16DotsMatchFloat64NativeAndWidened) {
  std::mt19937 rng(21);
  for (const std::string out : {"bf16", "f32"}) {
    for (const Bf16Check& check : Bf16Layouts(out)) {
      const DotCase& c = check.c;
      const std::string what = check.name + " to " + out;
      std::unique_ptr<HloModule> module = testing::Parse(DotModuleText(c));
      const HostTensor a = Random(c.lhs, rng), b = Random(c.rhs, rng);
      Executor executor(*module);
      ExpectPath(CheckBf16Dot(c, executor, a, b, what + " (default)"), what + " (default)");
      {
        // The same executor makes a new plan when the forcing changes.
        kernels::simd::ScopedIsa widen("portable");
        ExpectPath(CheckBf16Dot(c, executor, a, b, what + " (widened)"), what + " (widened)");
      }
      const ExecutorStats stats = CheckBf16Dot(c, executor, a, b, what + " (default again)");
      ExpectPath(stats, what + " (default again)");
      EXPECT_EQ(stats.misplaced_results, 0) << what;
    }
  }
}

TEST(EvalDotTest, Bf16DotOfEmptyContractionGivesZeros) {
  for (const char* out : {"bf16", "f32"}) {
    const std::string text = fmt::format(R"(HloModule m
ENTRY e {{
  a = bf16[3,0] parameter(0)
  b = bf16[0,2] parameter(1)
  ROOT d = {}[3,2] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}})",
                                         out);
    ExecutorStats stats;
    auto module = testing::Parse(text);
    const HostTensor result = testing::Run(
        *module, {HostTensor(ParseShape("bf16[3,0]")), HostTensor(ParseShape("bf16[0,2]"))},
        &stats)[0];
    testing::ExpectEqual(result, std::vector<double>(6, 0.0), out);
    EXPECT_EQ(stats.unplanned_bytes, 0) << out;
  }
}

TEST(EvalDotTest, StridedViewsOfLargerOperands) {
  std::mt19937 rng(9);
  // [B,S,H,D] x [B,T,H,D] -> [B,H,S,T]: batch dims {0,2} do not merge (packed).
  CheckDot({"f32[2,24,3,16]", "f32[2,20,3,16]", "f32[2,3,24,20]", {{0, 2}, {3}, {0, 2}, {3}}}, rng,
           1e-5);
  // [B,H,S,D] x [B,H,D,T]: merged batch dims, read in place.
  CheckDot({"f32[2,3,24,16]", "f32[2,3,16,20]", "f32[2,3,24,20]", {{0, 1}, {3}, {0, 1}, {2}}}, rng,
           1e-5);
  // [S,B,D] x [B,D,T]: a batch stride of D, rows strided by B*D.
  CheckDot({"f32[24,4,16]", "f32[4,16,20]", "f32[4,24,20]", {{1}, {2}, {0}, {1}}}, rng, 1e-5);
  // [B,S,D] x [D,B,T]: rhs rows strided by B*T, batch stride T.
  CheckDot({"f32[4,24,16]", "f32[16,4,20]", "f32[4,24,20]", {{0}, {2}, {1}, {0}}}, rng, 1e-5);
  // Transposed weights, either side.
  CheckDot({"f32[40,64]", "f32[96,64]", "f32[40,96]", {{}, {1}, {}, {1}}}, rng, 1e-5);
  CheckDot({"f32[64,40]", "f32[64,96]", "f32[40,96]", {{}, {0}, {}, {0}}}, rng, 1e-5);
}

// Weight gradients, x^T dy: both operands have the contracted tokens
// outermost (weft's own GEMM, gemm_transposed_a, reads the lhs in place).
// Against float64, and the same bits on a team of one thread and on the
// whole pool (tiles of 64 x 64), with K over one pass of 256 rows.
TEST(EvalDotTest, WeightGradientsMatchFloat64AndDoNotDependOnTheTeam) {
  std::mt19937 rng(10);
  const std::vector<DotCase> cases = {
      {"f32[3,100,72]", "f32[3,100,48]", "f32[72,48]", {{}, {0, 1}, {}, {0, 1}}},
      {"f32[300,130]", "f32[300,64]", "f32[130,64]", {{}, {0}, {}, {0}}},
      // Batched over heads, the batch dim between tokens and features.
      {"f32[90,2,20]", "f32[90,2,32]", "f32[2,20,32]", {{1}, {0}, {1}, {0}}},
      // N not a multiple of 16: oneDNN's matmul.
      {"f32[70,24]", "f32[70,40]", "f32[24,40]", {{}, {0}, {}, {0}}},
  };
  for (const DotCase& c : cases) {
    const std::string text = DotModuleText(c);
    HostTensor a = Random(c.lhs, rng, -1, 1);
    HostTensor b = Random(c.rhs, rng, -1, 1);
    const std::vector<double> want = ReferenceDot(a, b, c.dn);
    std::unique_ptr<HloModule> module = testing::Parse(text);
    Executor executor(*module);
    ThreadPool::SetThreadsForThisThread(1);
    const HostTensor one = executor.Run({a, b}).at(0);
    ThreadPool::SetThreadsForThisThread(0);
    const HostTensor pool = executor.Run({a, b}).at(0);
    ExpectNear(pool, want, 1e-5, 1e-4, text);
    if (c.out != "f32[24,40]") {
      EXPECT_EQ(0, std::memcmp(one.raw_data(), pool.raw_data(), one.byte_size())) << text;
    }
  }
}

TEST(EvalDotTest, EmptyContractionGivesZeros) {
  const char* text = R"(HloModule m
ENTRY e {
  a = f32[3,0] parameter(0)
  b = f32[0,2] parameter(1)
  ROOT d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  auto out = RunNamed(
      text, {HostTensor(ParseShape("f32[3,0]")), HostTensor(ParseShape("f32[0,2]"))}, {"d"});
  testing::ExpectEqual(out["d"], std::vector<double>(6, 0.0));
}

TEST(EvalDotTest, PredDotIsRejected) {
  const char* text = R"(HloModule m
ENTRY e {
  a = pred[3,4] parameter(0)
  b = pred[4,2] parameter(1)
  ROOT d = pred[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  HloParseOptions options;
  options.verify = false;
  auto module = ParseHloModule(text, options);
  testing::ExpectErrorContaining([&] { Executor executor(*module); },
                                 {"'d' (dot)", "dot of pred is not supported"});
}

}  // namespace
}  // namespace weft::runtime

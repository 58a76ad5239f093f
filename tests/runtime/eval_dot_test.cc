#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectNear;
using testing::Random;
using testing::Ravel;
using testing::RunNamed;
using testing::Unravel;

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// XLA's dot in float64: result dims are batch, lhs free, rhs free.
std::vector<double> ReferenceDot(const HostTensor& lhs, const HostTensor& rhs,
                                 const DotDimensionNumbers& dn) {
  std::vector<int64_t> lf, rf;
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!Has(dn.lhs_batch_dims, d) && !Has(dn.lhs_contracting_dims, d)) lf.push_back(d);
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!Has(dn.rhs_batch_dims, d) && !Has(dn.rhs_contracting_dims, d)) rf.push_back(d);
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
      acc += lhs.GetDouble(Ravel(li, lhs.dimensions())) * rhs.GetDouble(Ravel(ri, rhs.dimensions()));
    }
    out.push_back(acc);
  }
  return out;
}

struct DotCase {
  std::string lhs, rhs, out;
  DotDimensionNumbers dn;
};

std::string DimsText(const std::vector<int64_t>& v) { return fmt::format("{{{}}}", fmt::join(v, ",")); }

void CheckDot(const DotCase& c, std::mt19937& rng, double tol) {
  std::string text = "HloModule m\nENTRY e {\n  a = " + c.lhs + " parameter(0)\n  b = " + c.rhs +
                     " parameter(1)\n  ROOT d = " + c.out + " dot(a, b)";
  if (!c.dn.lhs_batch_dims.empty()) {
    text += ", lhs_batch_dims=" + DimsText(c.dn.lhs_batch_dims) +
            ", rhs_batch_dims=" + DimsText(c.dn.rhs_batch_dims);
  }
  text += ", lhs_contracting_dims=" + DimsText(c.dn.lhs_contracting_dims) +
          ", rhs_contracting_dims=" + DimsText(c.dn.rhs_contracting_dims) + "\n}\n";
  const bool integer = c.lhs[0] == 's';
  HostTensor a = Random(c.lhs, rng, integer ? -9 : -1, integer ? 9 : 1);
  HostTensor b = Random(c.rhs, rng, integer ? -9 : -1, integer ? 9 : 1);
  auto out = RunNamed(text, {a, b}, {"d"});
  const double k = static_cast<double>(a.element_count()) / 1;  // scale the tolerance with size
  ExpectNear(out["d"], ReferenceDot(a, b, c.dn), tol, tol * std::sqrt(k) * 0.1, text);
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
  CheckDot({"f32[3,6,2,5]", "f32[2,3,5,4]", "f32[2,3,6,4]", {{2, 0}, {3}, {0, 1}, {2}}}, rng,
           1e-5);
}

TEST(EvalDotTest, MixedPrecisionAndIntegers) {
  std::mt19937 rng(3);
  CheckDot({"bf16[16,32]", "bf16[32,8]", "f32[16,8]", {{}, {1}, {}, {0}}}, rng, 1e-5);
  CheckDot({"bf16[4,16,32]", "bf16[4,8,32]", "bf16[4,16,8]", {{0}, {2}, {0}, {2}}}, rng, 8e-3);
  CheckDot({"s32[5,7]", "s32[7,3]", "s32[5,3]", {{}, {1}, {}, {0}}}, rng, 0);
  CheckDot({"s64[2,5,7]", "s64[2,3,7]", "s64[2,5,3]", {{0}, {2}, {0}, {2}}}, rng, 0);
}

TEST(EvalDotTest, EmptyContractionGivesZeros) {
  const char* text = R"(HloModule m
ENTRY e {
  a = f32[3,0] parameter(0)
  b = f32[0,2] parameter(1)
  ROOT d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  auto out = RunNamed(text, {HostTensor(ParseShape("f32[3,0]")), HostTensor(ParseShape("f32[0,2]"))},
                      {"d"});
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

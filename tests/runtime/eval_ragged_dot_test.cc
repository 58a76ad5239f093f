// ragged-dot in the executor against a float64 reference written here the
// other way round: each group's stretch of rows (or of the contraction) is
// multiplied as a plain matrix product, group by group. The three modes,
// group sizes per batch row and shared, empty groups, rows past the groups'
// total (zero), sizes whose sum overruns the rows, and bf16 operands.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "error_of.h"
#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using weft::testing::ErrorOf;
using weft::testing::Mentions;

std::vector<double> Normal(int64_t n, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}

// The stretches [start, end) of `sizes` (a row of group sizes) within `rows`.
std::vector<std::pair<int64_t, int64_t>> Stretches(const std::vector<double>& sizes, int64_t first,
                                                   int64_t groups, int64_t rows) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t start = 0;
  for (int64_t j = 0; j < groups; ++j) {
    const int64_t end = std::min(rows, start + static_cast<int64_t>(sizes[first + j]));
    out.emplace_back(std::min(start, rows), end);
    start += static_cast<int64_t>(sizes[first + j]);
  }
  return out;
}

TEST(EvalRaggedDotTest, NonContractingRowsMeetTheirGroupsWeights) {
  // [b,m,k] x [g,b,k,n], sizes [b,g] -> [b,m,n]; batch row 1's groups end
  // before m (rows past them are 0), batch row 0 overruns m.
  std::mt19937 rng(5);
  const int64_t b = 2, m = 7, k = 5, g = 3, n = 4;
  const std::vector<double> lhs = Normal(b * m * k, rng), rhs = Normal(g * b * k * n, rng);
  const std::vector<double> sizes = {2, 0, 9, 1, 3, 2};
  const std::string text = R"(
HloModule m
ENTRY e {
  a = f32[2,7,5] parameter(0)
  w = f32[3,2,5,4] parameter(1)
  s = s32[2,3] parameter(2)
  ROOT d = f32[2,7,4] ragged-dot(a, w, s), lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={0}
}
)";
  const std::vector<double> got =
      testing::RunText(text, {HostTensor::FromDoubles(ParseShape("f32[2,7,5]"), lhs),
                              HostTensor::FromDoubles(ParseShape("f32[3,2,5,4]"), rhs),
                              HostTensor::FromDoubles(ParseShape("s32[2,3]"), sizes)})
          .at(0)
          .ToDoubles();
  std::vector<double> want(b * m * n, 0.0);
  for (int64_t bi = 0; bi < b; ++bi) {
    const auto stretches = Stretches(sizes, bi * g, g, m);
    for (int64_t j = 0; j < g; ++j) {
      for (int64_t r = stretches[j].first; r < stretches[j].second; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            s += lhs[(bi * m + r) * k + p] * rhs[((j * b + bi) * k + p) * n + c];
          }
          want[(bi * m + r) * n + c] = s;
        }
      }
    }
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  // Batch row 1 has 6 rows in groups: its row 6 is zero.
  for (int64_t c = 0; c < n; ++c) EXPECT_EQ(got[(1 * m + 6) * n + c], 0.0);
}

TEST(EvalRaggedDotTest, ContractingGivesOneProductPerGroup) {
  // [m,k] x [k,n], sizes [g] -> [g,m,n]: a MoE layer's weight gradient; one
  // group is empty, the last stops short of k.
  std::mt19937 rng(6);
  const int64_t m = 3, k = 9, n = 2, g = 4;
  const std::vector<double> lhs = Normal(m * k, rng), rhs = Normal(k * n, rng);
  const std::vector<double> sizes = {3, 0, 4, 1};
  const std::vector<double> got =
      testing::RunText(R"(
HloModule m
ENTRY e {
  a = f32[3,9] parameter(0)
  w = f32[9,2] parameter(1)
  s = u32[4] parameter(2)
  ROOT d = f32[4,3,2] ragged-dot(a, w, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}, lhs_ragged_dims={1}
}
)",
                       {HostTensor::FromDoubles(ParseShape("f32[3,9]"), lhs),
                        HostTensor::FromDoubles(ParseShape("f32[9,2]"), rhs),
                        HostTensor::FromDoubles(ParseShape("u32[4]"), sizes)})
          .at(0)
          .ToDoubles();
  const auto stretches = Stretches(sizes, 0, g, k);
  for (int64_t j = 0; j < g; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t p = stretches[j].first; p < stretches[j].second; ++p) {
          s += lhs[i * k + p] * rhs[p * n + c];
        }
        EXPECT_NEAR(got[(j * m + i) * n + c], s, 1e-5) << j << "," << i << "," << c;
      }
    }
  }
}

TEST(EvalRaggedDotTest, BatchModeIsThePlainDotInBf16) {
  std::mt19937 rng(7);
  const std::vector<double> lhs = Normal(2 * 3 * 4, rng), rhs = Normal(2 * 4 * 5, rng);
  const std::vector<HostTensor> in = {
      HostTensor::FromDoubles(ParseShape("bf16[2,3,4]"), lhs),
      HostTensor::FromDoubles(ParseShape("bf16[2,4,5]"), rhs),
      HostTensor::FromDoubles(ParseShape("s32[3]"), std::vector<double>{1, 0, 0})};
  const std::vector<double> a = in[0].ToDoubles(), w = in[1].ToDoubles();  // as rounded
  const std::vector<double> got = testing::RunText(R"(
HloModule m
ENTRY e {
  a = bf16[2,3,4] parameter(0)
  w = bf16[2,4,5] parameter(1)
  s = s32[3] parameter(2)
  ROOT d = f32[2,3,5] ragged-dot(a, w, s), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={0}
}
)",
                                                   in)
                                      .at(0)
                                      .ToDoubles();
  for (int64_t bi = 0; bi < 2; ++bi) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t c = 0; c < 5; ++c) {
        double s = 0;
        for (int64_t p = 0; p < 4; ++p) s += a[(bi * 3 + i) * 4 + p] * w[(bi * 4 + p) * 5 + c];
        EXPECT_NEAR(got[(bi * 3 + i) * 5 + c], s, 1e-5);
      }
    }
  }
}

TEST(EvalRaggedDotTest, AHugeU64GroupTakesEveryRowLeft) {
  // Group 0 takes 1 row, group 1 (2^64 - 1 rows) all the others.
  HostTensor sizes = HostTensor::Uninitialized(ParseShape("u64[2]"));
  sizes.mutable_data<uint64_t>()[0] = 1;
  sizes.mutable_data<uint64_t>()[1] = ~uint64_t{0};
  const std::vector<HostTensor> in = {
      HostTensor::FromDoubles(ParseShape("f32[3,1]"), std::vector<double>{1, 2, 3}),
      HostTensor::FromDoubles(ParseShape("f32[2,1,1]"), std::vector<double>{10, 100}), sizes};
  const std::vector<double> got = testing::RunText(R"(
HloModule m
ENTRY e {
  a = f32[3,1] parameter(0)
  w = f32[2,1,1] parameter(1)
  s = u64[2] parameter(2)
  ROOT d = f32[3,1] ragged-dot(a, w, s), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
}
)",
                                                   in)
                                      .at(0)
                                      .ToDoubles();
  EXPECT_EQ(got, (std::vector<double>{10, 200, 300}));
}

TEST(EvalRaggedDotTest, IntegerOperandsAreRefusedByName) {
  const std::string error = ErrorOf([] {
    testing::RunText(R"(
HloModule m
ENTRY e {
  a = s32[4,3] parameter(0)
  w = s32[2,3,5] parameter(1)
  s = s32[2] parameter(2)
  ROOT d = s32[4,5] ragged-dot(a, w, s), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
}
)",
                     {HostTensor::FromDoubles(ParseShape("s32[4,3]"), std::vector<double>(12, 1)),
                      HostTensor::FromDoubles(ParseShape("s32[2,3,5]"), std::vector<double>(30, 1)),
                      HostTensor::FromDoubles(ParseShape("s32[2]"), std::vector<double>{2, 2})});
  });
  EXPECT_TRUE(Mentions(error, "ragged-dot of s32 x s32 -> s32 is not supported")) << error;
}

}  // namespace
}  // namespace weft::runtime

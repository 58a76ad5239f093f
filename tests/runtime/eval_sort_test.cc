// sort and topk in the executor against orderings computed here on the
// inputs' float64 values: rows along every dim, several operands with ties
// (stability), total order with NaN and signed zeros, f32 / f64 / u16 / s32
// keys, topk's largest and smallest, and XLA's TopK custom call.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "executor_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectErrorContaining;
using testing::Random;
using testing::RunText;
using testing::Unravel;

// The rows of `dims` along `dim`: the flat indices of each row's elements.
std::vector<std::vector<int64_t>> RowsAlong(const std::vector<int64_t>& dims, int64_t dim) {
  std::vector<std::vector<int64_t>> rows;
  std::map<std::vector<int64_t>, size_t> row_of;
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  for (int64_t e = 0; e < count; ++e) {
    std::vector<int64_t> key = Unravel(e, dims);
    key[dim] = 0;
    auto [it, fresh] = row_of.emplace(key, rows.size());
    if (fresh) rows.emplace_back();
    rows[it->second].push_back(e);  // in increasing index along dim
  }
  return rows;
}

// Each tensor of `values` permuted within every row along `dim` by a stable
// sort on `less` over row positions.
std::vector<std::vector<double>> SortRows(const std::vector<std::vector<double>>& values,
                                          const std::vector<int64_t>& dims, int64_t dim,
                                          const std::function<bool(int64_t, int64_t)>& less) {
  std::vector<std::vector<double>> out = values;
  for (const std::vector<int64_t>& row : RowsAlong(dims, dim)) {
    std::vector<int64_t> order = row;
    std::stable_sort(order.begin(), order.end(), less);
    for (size_t t = 0; t < values.size(); ++t) {
      for (size_t k = 0; k < row.size(); ++k) out[t][row[k]] = values[t][order[k]];
    }
  }
  return out;
}

std::string SortModule(const std::string& type, const std::string& dims, int64_t dim,
                       const std::string& direction) {
  return "HloModule s\nless {\n  a = " + type + "[] parameter(0)\n  b = " + type +
         "[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=" + direction +
         "\n}\nENTRY e {\n  x = " + type + "[" + dims + "] parameter(0)\n  ROOT s = " + type + "[" +
         dims + "] sort(x), dimensions={" + std::to_string(dim) + "}, to_apply=less\n}\n";
}

TEST(EvalSortTest, SortsEveryRowAlongEachDimension) {
  std::mt19937 rng(11);
  const std::vector<int64_t> dims = {5, 7, 3};
  for (const char* type : {"f32", "f64", "u16", "s32"}) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      for (const char* dir : {"LT", "GT"}) {
        SCOPED_TRACE(std::string(type) + " dim " + std::to_string(dim) + " " + dir);
        const std::string text = SortModule(type, "5,7,3", dim, dir);
        const double hi = std::string(type) == "u16" ? 65535 : 1000;
        const double lo = std::string(type) == "u16" ? 0 : -1000;
        const HostTensor x = Random(std::string(type) + "[5,7,3]", rng, lo, hi);
        const std::vector<double> v = x.ToDoubles();
        const bool ascending = std::string(dir) == "LT";
        const auto want = SortRows({v}, dims, dim, [&](int64_t a, int64_t b) {
          return ascending ? v[a] < v[b] : v[a] > v[b];
        });
        ExpectEqual(RunText(text, {x}).at(0), want[0]);
      }
    }
  }
}

TEST(EvalSortTest, SeveralOperandsSortStablyByTheComparatorsKeys) {
  // Keys 0..3 repeat; the comparator reads only operand 0, so equal keys
  // keep their order, which the s32 positions (iota) show.
  const std::string text = R"(HloModule s
by_key {
  k0 = s32[] parameter(0)
  k1 = s32[] parameter(1)
  v0 = f32[] parameter(2)
  v1 = f32[] parameter(3)
  p0 = s32[] parameter(4)
  p1 = s32[] parameter(5)
  ROOT lt = pred[] compare(k0, k1), direction=LT
}
ENTRY e {
  keys = s32[6,40] parameter(0)
  vals = f32[6,40] parameter(1)
  pos = s32[6,40] iota(), iota_dimension=1
  ROOT s = (s32[6,40], f32[6,40], s32[6,40]) sort(keys, vals, pos), dimensions={1}, is_stable=true, to_apply=by_key
}
)";
  std::mt19937 rng(3);
  const HostTensor keys = Random("s32[6,40]", rng, 0, 3);
  const HostTensor vals = Random("f32[6,40]", rng);
  const std::vector<double> k = keys.ToDoubles(), v = vals.ToDoubles();
  std::vector<double> pos(k.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<double>(i % 40);
  const auto want =
      SortRows({k, v, pos}, {6, 40}, 1, [&](int64_t a, int64_t b) { return k[a] < k[b]; });
  const std::vector<HostTensor> out = RunText(text, {keys, vals});
  ASSERT_EQ(out.size(), 3u);
  for (size_t t = 0; t < 3; ++t) ExpectEqual(out[t], want[t], "operand " + std::to_string(t));
}

// XLA's lexicographic comparator: select(compare(c, c', EQ), tie, c) with c
// a strict comparison of one key of both sides and c' the swapped one; here
// descending by value negated and ascending by a second key on ties. The
// same module with LE (not a strict order of keys) keeps to the per-
// comparison interpreter and gives the order LE's stable sort gives.
TEST(EvalSortTest, LexicographicComparatorsOrderByEachKeyInTurn) {
  const std::string text = R"(HloModule s
lex {
  a0 = f32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = s32[] parameter(2)
  b1 = s32[] parameter(3)
  n0 = f32[] negate(a0)
  n1 = f32[] negate(a1)
  c = pred[] compare(n0, n1), direction=LT
  c2 = pred[] compare(n1, n0), direction=LT
  eq = pred[] compare(c, c2), direction=EQ
  tie = pred[] compare(b0, b1), direction=GT
  ROOT r = pred[] select(eq, tie, c)
}
ENTRY e {
  vals = f32[5,64] parameter(0)
  second = s32[5,64] parameter(1)
  ROOT s = (f32[5,64], s32[5,64]) sort(vals, second), dimensions={1}, is_stable=true, to_apply=lex
}
)";
  std::mt19937 rng(std::random_device{}());
  // Few distinct values: many ties for the second key to break.
  const HostTensor vals = Random("s32[5,64]", rng, 0, 4);
  HostTensor fvals = HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {5, 64}), vals.ToDoubles());
  // Distinct within a row, so LE below is a strict order there too.
  std::vector<int32_t> perm;
  for (int r = 0; r < 5; ++r) {
    std::vector<int32_t> row(64);
    std::iota(row.begin(), row.end(), 0);
    std::shuffle(row.begin(), row.end(), rng);
    perm.insert(perm.end(), row.begin(), row.end());
  }
  const HostTensor second = HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {5, 64}, perm);
  const std::vector<double> v = fvals.ToDoubles(), k = second.ToDoubles();
  const auto want = SortRows({v, k}, {5, 64}, 1, [&](int64_t a, int64_t b) {
    if (v[a] != v[b]) return -v[a] < -v[b];
    return k[a] > k[b];
  });
  const std::vector<HostTensor> out = RunText(text, {fvals, second});
  ASSERT_EQ(out.size(), 2u);
  ExpectEqual(out[0], want[0], "values");
  ExpectEqual(out[1], want[1], "second key");

  std::string le = text;
  le.replace(le.find("direction=GT"), 12, "direction=LE");
  const auto want_le = SortRows({v, k}, {5, 64}, 1, [&](int64_t a, int64_t b) {
    if (v[a] != v[b]) return -v[a] < -v[b];
    return k[a] <= k[b];
  });
  const std::vector<HostTensor> out_le = RunText(le, {fvals, second});
  ExpectEqual(out_le[0], want_le[0], "values (LE)");
  ExpectEqual(out_le[1], want_le[1], "second key (LE)");
}

TEST(EvalSortTest, TotalOrderPlacesNaNAndSignedZeros) {
  // type=TOTALORDER: -NaN < -inf < -1 < -0 < +0 < 1 < inf < NaN.
  const std::string text = R"(HloModule s
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GT, type=TOTALORDER
}
ENTRY e {
  x = f32[8] parameter(0)
  ROOT s = f32[8] sort(x), dimensions={0}, to_apply=gt
}
)";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {0.0f, -nan, 1.0f, -0.0f, INFINITY, nan, -1.0f, -INFINITY};
  const HostTensor x = HostTensor::FromVector<float>(PrimitiveType::kF32, {8}, in);
  const HostTensor out = RunText(text, {x}).at(0);
  const std::vector<float> want = {nan, INFINITY, 1.0f, 0.0f, -0.0f, -1.0f, -INFINITY, -nan};
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(out.data<float>()[i]), std::bit_cast<uint32_t>(want[i]))
        << "position " << i << ": " << out.data<float>()[i];
  }
}

// topk's reference: per row of the last dim, positions ordered by value
// (descending when largest), ties to the lower position; the first k.
void ExpectTopK(const std::vector<HostTensor>& out, const HostTensor& x, int64_t k, bool largest) {
  const int64_t len = x.dimensions().back(), rows = x.element_count() / len;
  const std::vector<double> v = x.ToDoubles();
  std::vector<double> values, indices;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(len);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return largest ? v[r * len + a] > v[r * len + b] : v[r * len + a] < v[r * len + b];
    });
    for (int64_t i = 0; i < k; ++i) {
      values.push_back(v[r * len + order[i]]);
      indices.push_back(static_cast<double>(order[i]));
    }
  }
  ASSERT_EQ(out.size(), 2u);
  ExpectEqual(out[0], values, "values");
  ExpectEqual(out[1], indices, "indices");
}

TEST(EvalSortTest, TopKTakesTheLargestOrSmallestWithTheirIndices) {
  std::mt19937 rng(5);
  for (const char* type : {"f32", "bf16", "f64", "s32"}) {
    for (bool largest : {true, false}) {
      SCOPED_TRACE(std::string(type) + (largest ? " largest" : " smallest"));
      const std::string t = type;
      const std::string text =
          "HloModule t\nENTRY e {\n  x = " + t + "[3,4,17] parameter(0)\n  ROOT k = (" + t +
          "[3,4,5], s32[3,4,5]) topk(x), k=5, largest=" + (largest ? "true" : "false") + "\n}\n";
      // s32 values from a small range: ties, which go to the lower index.
      const HostTensor x = Random(t + "[3,4,17]", rng, t == "s32" ? 0 : -1, t == "s32" ? 6 : 1);
      ExpectTopK(RunText(text, {x}), x, 5, largest);
    }
  }
}

TEST(EvalSortTest, TopKCustomCallTakesTheLargest) {
  const std::string text = R"(HloModule t
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GT
}
ENTRY e {
  x = f32[6,33] parameter(0)
  ROOT k = (f32[6,4], s32[6,4]) custom-call(x), custom_call_target="TopK", called_computations={gt}
}
)";
  std::mt19937 rng(9);
  const HostTensor x = Random("f32[6,33]", rng);
  ExpectTopK(RunText(text, {x}), x, 4, true);
}

TEST(EvalSortTest, TopKCustomCallWithAWrongResultIsRefusedByName) {
  const std::string text = R"(HloModule t
ENTRY e {
  x = f32[6,33] parameter(0)
  ROOT k = (f32[6,4], s32[6,3]) custom-call(x), custom_call_target="TopK"
}
)";
  ExpectErrorContaining([&] { Executor executor(*testing::Parse(text)); },
                        {"'k'", "top-k of f32[6,33]", "s32[..., k]"});
}

}  // namespace
}  // namespace weft::runtime

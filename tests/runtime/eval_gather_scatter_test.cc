#include <gtest/gtest.h>

#include <algorithm>

#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectNear;
using testing::Random;
using testing::RunNamed;

constexpr int64_t kVocab = 50, kHidden = 16, kBatch = 3, kSeq = 7;

HostTensor TokenIds(std::mt19937& rng, PrimitiveType type = PrimitiveType::kS32) {
  // Few distinct ids, so the gradient has to add duplicates.
  std::vector<double> ids;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) ids.push_back(static_cast<double>(rng() % 10));
  return HostTensor::FromDoubles(Shape(type, {kBatch, kSeq}), ids);
}

TEST(EvalGatherScatterTest, EmbeddingLookupAndItsGradient) {
  const char* text = R"(HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  table = f32[50,16] parameter(0)
  ids = s32[3,7] parameter(1)
  rows = f32[3,7,16] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
  grad = f32[3,7,16] parameter(2)
  zero = f32[] constant(0)
  zeros = f32[50,16] broadcast(zero), dimensions={}
  ROOT dtable = f32[50,16] scatter(zeros, ids, grad), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add
})";
  std::mt19937 rng(1);
  HostTensor table = Random("f32[50,16]", rng);
  HostTensor ids = TokenIds(rng);
  HostTensor grad = Random("f32[3,7,16]", rng);
  auto out = RunNamed(text, {table, ids, grad}, {"rows", "dtable"});
  std::vector<double> rows, dtable(kVocab * kHidden, 0.0);
  for (int64_t t = 0; t < kBatch * kSeq; ++t) {
    const int64_t id = static_cast<int64_t>(ids.GetDouble(t));
    for (int64_t h = 0; h < kHidden; ++h) {
      rows.push_back(table.GetDouble(id * kHidden + h));
      dtable[id * kHidden + h] += grad.GetDouble(t * kHidden + h);
    }
  }
  ExpectEqual(out["rows"], rows);
  ExpectNear(out["dtable"], dtable, 1e-6, 1e-6);
}

TEST(EvalGatherScatterTest, ExplicitIndexVectorDimAndS64Indices) {
  const char* text = R"(HloModule m
ENTRY e {
  table = bf16[50,16] parameter(0)
  ids = s64[3,7,1] parameter(1)
  ROOT rows = bf16[3,16,7] gather(table, ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
})";
  std::mt19937 rng(2);
  HostTensor table = Random("bf16[50,16]", rng);
  HostTensor flat = TokenIds(rng, PrimitiveType::kS64);
  HostTensor ids = flat.Reshaped(ParseShape("s64[3,7,1]"));
  auto out = RunNamed(text, {table, ids}, {"rows"});
  std::vector<double> want(kBatch * kHidden * kSeq);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t s = 0; s < kSeq; ++s) {
      const int64_t id = static_cast<int64_t>(ids.GetDouble(b * kSeq + s));
      for (int64_t h = 0; h < kHidden; ++h) {
        want[(b * kHidden + h) * kSeq + s] = table.GetDouble(id * kHidden + h);
      }
    }
  }
  ExpectEqual(out["rows"], want);
}

TEST(EvalGatherScatterTest, TwoDimensionalWindowsClampIntoTheOperand) {
  // Windows of 2x3 at (row, col) starts; starts past the edge are clamped.
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[6,8] parameter(0)
  starts = s32[4,2] parameter(1)
  ROOT w = f32[4,2,3] gather(x, starts), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}
})";
  std::mt19937 rng(3);
  HostTensor x = Random("f32[6,8]", rng);
  HostTensor starts =
      HostTensor::FromDoubles(ParseShape("s32[4,2]"), std::vector<double>{0, 0, 2, 5, 5, 7, -3, 4});
  auto out = RunNamed(text, {x, starts}, {"w"});
  std::vector<double> want;
  for (int64_t k = 0; k < 4; ++k) {
    const int64_t r = std::clamp<int64_t>(static_cast<int64_t>(starts.GetDouble(2 * k)), 0, 4);
    const int64_t c = std::clamp<int64_t>(static_cast<int64_t>(starts.GetDouble(2 * k + 1)), 0, 5);
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) want.push_back(x.GetDouble((r + i) * 8 + c + j));
    }
  }
  ExpectEqual(out["w"], want);
}

TEST(EvalGatherScatterTest, BatchingDimsTakeAlongAnAxis) {
  // out[b, k] = x[b, idx[b, k]] with b a batching dim of both.
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[4,9] parameter(0)
  idx = s32[4,5] parameter(1)
  ROOT y = f32[4,5] gather(x, idx), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
})";
  std::mt19937 rng(4);
  HostTensor x = Random("f32[4,9]", rng);
  HostTensor idx = Random("s32[4,5]", rng, 0, 8);
  auto out = RunNamed(text, {x, idx}, {"y"});
  std::vector<double> want;
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t k = 0; k < 5; ++k) {
      want.push_back(x.GetDouble(b * 9 + static_cast<int64_t>(idx.GetDouble(b * 5 + k))));
    }
  }
  ExpectEqual(out["y"], want);
}

TEST(EvalGatherScatterTest, ScatterReplaceMaxAndOutOfBoundsSkip) {
  const char* text = R"(HloModule m
replace {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[10,4] parameter(0)
  idx = s32[5] parameter(1)
  up = f32[5,4] parameter(2)
  set = f32[10,4] scatter(x, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=replace
  ROOT mx = f32[10,4] scatter(x, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=max
})";
  std::mt19937 rng(5);
  HostTensor x = Random("f32[10,4]", rng);
  // Row 12 and -1 are out of bounds: skipped. Row 3 appears twice.
  HostTensor idx =
      HostTensor::FromDoubles(ParseShape("s32[5]"), std::vector<double>{3, 12, 7, -1, 3});
  HostTensor up = Random("f32[5,4]", rng);
  auto out = RunNamed(text, {x, idx, up}, {"set", "mx"});
  std::vector<double> set = x.ToDoubles(), mx = x.ToDoubles();
  for (int64_t k = 0; k < 5; ++k) {
    const int64_t r = static_cast<int64_t>(idx.GetDouble(k));
    if (r < 0 || r >= 10) continue;
    for (int64_t j = 0; j < 4; ++j) {
      set[r * 4 + j] = up.GetDouble(k * 4 + j);
      mx[r * 4 + j] = std::max(mx[r * 4 + j], up.GetDouble(k * 4 + j));
    }
  }
  ExpectEqual(out["set"], set);
  ExpectEqual(out["mx"], mx);
}

// bf16 scatters combining in bf16 and, as XLA allows, in f32 (each sum
// rounded to the operand's bf16: of two bf16 values of similar size the f32
// sum is exact, so both give the same bits).
TEST(EvalGatherScatterTest, ScatterAddInBf16AndIntegers) {
  const char* text = R"(HloModule m
addb {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
addf {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
addi {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
ENTRY e {
  x = bf16[6,2] parameter(0)
  idx = s32[4] parameter(1)
  up = bf16[4,2] parameter(2)
  sb = bf16[6,2] scatter(x, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=addb
  sf = bf16[6,2] scatter(x, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=addf
  xi = s32[6] parameter(3)
  ui = s32[4] parameter(4)
  ROOT si = s32[6] scatter(xi, idx, ui), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=addi
})";
  std::mt19937 rng(6);
  HostTensor x = Random("bf16[6,2]", rng), up = Random("bf16[4,2]", rng);
  HostTensor idx = HostTensor::FromDoubles(ParseShape("s32[4]"), std::vector<double>{5, 0, 5, 2});
  HostTensor xi = Random("s32[6]", rng, -50, 50), ui = Random("s32[4]", rng, -50, 50);
  auto out = RunNamed(text, {x, idx, up, xi, ui}, {"sb", "sf", "si"});
  std::vector<double> sb = x.ToDoubles(), si = xi.ToDoubles();
  for (int64_t k = 0; k < 4; ++k) {
    const int64_t r = static_cast<int64_t>(idx.GetDouble(k));
    for (int64_t j = 0; j < 2; ++j) {
      sb[r * 2 + j] = RoundToType(sb[r * 2 + j] + up.GetDouble(k * 2 + j), PrimitiveType::kBF16);
    }
    si[r] += ui.GetDouble(k);
  }
  ExpectEqual(out["sb"], sb);
  ExpectEqual(out["sf"], sb);
  ExpectEqual(out["si"], si);
}

// Variadic scatter: two operands (values and their source positions) and
// two updates, combined by a tuple-returning max-with-position (ties keep
// the lower position), rows clamped out of bounds dropped; and an operand
// that is also an update (the result must not overwrite what it reads).
TEST(EvalGatherScatterTest, VariadicScatterCombinesTuples) {
  const char* text = R"(HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v1, v0), direction=GT
  eq = pred[] compare(v1, v0), direction=EQ
  lt = pred[] compare(i1, i0), direction=LT
  tie = pred[] and(eq, lt)
  take = pred[] or(gt, tie)
  v = f32[] select(take, v1, v0)
  i = s32[] select(take, i1, i0)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  vals = f32[5,3] parameter(0)
  pos = s32[5,3] parameter(1)
  idx = s32[7,1] parameter(2)
  uv = f32[7,3] parameter(3)
  up = s32[7,3] parameter(4)
  s = (f32[5,3], s32[5,3]) scatter(vals, pos, idx, uv, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=argmax
  sv = f32[5,3] get-tuple-element(s), index=0
  si = s32[5,3] get-tuple-element(s), index=1
  idx5 = s32[5,1] slice(idx), slice={[0:5], [0:1]}
  self = (f32[5,3], s32[5,3]) scatter(vals, pos, idx5, vals, pos), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=argmax
  tv = f32[5,3] get-tuple-element(self), index=0
  ti = s32[5,3] get-tuple-element(self), index=1
  ROOT r = (f32[5,3], s32[5,3], f32[5,3], s32[5,3]) tuple(sv, si, tv, ti)
})";
  std::mt19937 rng(31);
  const HostTensor vals = Random("f32[5,3]", rng);
  const HostTensor pos = Random("s32[5,3]", rng, 0, 20);
  // Rows -1 and 5 are out of bounds (dropped); repeats combine.
  const HostTensor idx =
      HostTensor::FromDoubles(ParseShape("s32[7,1]"), std::vector<double>{2, 0, 2, -1, 5, 4, 0});
  HostTensor uv = Random("f32[7,3]", rng);
  {  // a tie with the operand's value at row 2, column 1
    std::vector<double> v = uv.ToDoubles();
    v[0 * 3 + 1] = vals.GetDouble(2 * 3 + 1);
    uv = HostTensor::FromDoubles(uv.shape(), v);
  }
  const HostTensor up = Random("s32[7,3]", rng, 0, 20);
  const std::vector<HostTensor> out = testing::RunText(text, {vals, pos, idx, uv, up});
  ASSERT_EQ(out.size(), 4u);
  auto combine = [](double& v0, double& i0, double v1, double i1) {
    if (v1 > v0 || (v1 == v0 && i1 < i0)) {
      v0 = v1;
      i0 = i1;
    }
  };
  std::vector<double> wv = vals.ToDoubles(), wi = pos.ToDoubles();
  std::vector<double> tv = wv, ti = wi;
  for (int64_t p = 0; p < 7; ++p) {
    const int64_t row = static_cast<int64_t>(idx.GetDouble(p));
    if (row < 0 || row >= 5) continue;
    for (int64_t c = 0; c < 3; ++c) {
      combine(wv[row * 3 + c], wi[row * 3 + c], uv.GetDouble(p * 3 + c), up.GetDouble(p * 3 + c));
      if (p < 5) {  // updates = the operands themselves, their first five rows
        combine(tv[row * 3 + c], ti[row * 3 + c], vals.GetDouble(p * 3 + c),
                pos.GetDouble(p * 3 + c));
      }
    }
  }
  ExpectEqual(out[0], wv, "values");
  ExpectEqual(out[1], wi, "positions");
  ExpectEqual(out[2], tv, "values scattered into themselves");
  ExpectEqual(out[3], ti, "positions scattered into themselves");
}

TEST(EvalGatherScatterTest, FloatIndicesAreRejected) {
  const char* text = R"(HloModule m
ENTRY e {
  table = f32[50,16] parameter(0)
  ids = f32[3,7] parameter(1)
  ROOT rows = f32[3,7,16] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
})";
  HloParseOptions options;
  options.verify = false;
  auto module = ParseHloModule(text, options);
  testing::ExpectErrorContaining([&] { Executor executor(*module); },
                                 {"'rows' (gather)", "indices must be integers"});
}

}  // namespace
}  // namespace weft::runtime

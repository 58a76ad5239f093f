#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "attention_reference.h"
#include "executor_test_util.h"
#include "weft/base/bfloat16.h"
#include "weft/kernels/attention.h"

namespace weft::runtime {
namespace {

using testing::ExpectNear;
using testing::Random;

constexpr int64_t B = 2, Hq = 4, Hkv = 2, S = 40, D = 16;

std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> out;
  for (double v : t.ToDoubles()) out.push_back(static_cast<float>(v));
  return out;
}

std::vector<double> Doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<uint16_t> Bits(const HostTensor& t) {
  const uint16_t* p = t.data<uint16_t>();
  return {p, p + t.element_count()};
}

std::vector<uint16_t> Bits(const std::vector<bf16>& v) {
  std::vector<uint16_t> out;
  for (bf16 x : v) out.push_back(x.bits);
  return out;
}

std::vector<bf16> AsBf16(const HostTensor& t) {
  std::vector<bf16> out;
  for (uint16_t b : Bits(t)) out.push_back(bf16::FromBits(b));
  return out;
}

// Segment ids [B, S]: three documents per row.
HostTensor SegmentIds() {
  std::vector<double> seg;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) seg.push_back(s < 10 + b ? 0 : (s < 25 ? 1 : 2));
  }
  return HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {B, S}), seg);
}

constexpr const char* kForward = R"(HloModule m
ENTRY e {
  q = f32[2,4,40,16] parameter(0)
  k = f32[2,2,40,16] parameter(1)
  v = f32[2,2,40,16] parameter(2)
  seg = s32[2,40] parameter(3)
  bias = f32[4,79] parameter(4)
  fa = (f32[2,4,40,16], f32[2,4,40]) custom-call(q, k, v, seg, bias), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"], "score_mod": "score + bias[h, q_idx - kv_idx + 39]", "score_tensors": ["bias"], "scale": 0.3, "q_block": 16, "kv_block": 16}
  out = f32[2,4,40,16] get-tuple-element(fa), index=0
  lse = f32[2,4,40] get-tuple-element(fa), index=1
  dout = f32[2,4,40,16] parameter(5)
  dlse = f32[2,4,40] parameter(6)
  grads = (f32[2,4,40,16], f32[2,2,40,16], f32[2,2,40,16]) custom-call(q, k, v, out, lse, dout, dlse, seg, bias), custom_call_target="weft.flex_attention_backward", backend_config={"mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"], "score_mod": "score + bias[h, q_idx - kv_idx + 39]", "score_tensors": ["bias"], "scale": 0.3, "q_block": 16, "kv_block": 16, "has_dlse": true}
  dq = f32[2,4,40,16] get-tuple-element(grads), index=0
  dk = f32[2,2,40,16] get-tuple-element(grads), index=1
  ROOT dv = f32[2,2,40,16] get-tuple-element(grads), index=2
})";

TEST(EvalCustomCallTest, AttentionForwardAndBackwardMatchTheKernels) {
  std::mt19937 rng(1);
  HostTensor q = Random("f32[2,4,40,16]", rng), k = Random("f32[2,2,40,16]", rng),
             v = Random("f32[2,2,40,16]", rng), bias = Random("f32[4,79]", rng, -0.5, 0.5),
             dout = Random("f32[2,4,40,16]", rng), dlse = Random("f32[2,4,40]", rng);
  HostTensor seg = SegmentIds();
  auto got = testing::RunNamed(kForward, {q, k, v, seg, bias, dout, dlse},
                               {"out", "lse", "dq", "dk", "dv"});

  // The same through the kernel API.
  kernels::IndexTensor seg_t{{B, S}, {}};
  for (double x : seg.ToDoubles()) seg_t.values.push_back(static_cast<int64_t>(x));
  kernels::ValueTensor bias_t{{Hq, 2 * S - 1}, Floats(bias)};
  auto mask =
      kernels::MaskExpr("q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", {{"seg", seg_t}});
  auto score = kernels::ScoreExpr("score + bias[h, q_idx - kv_idx + 39]", {{"bias", bias_t}});
  auto block_mask = kernels::BlockMask::Create(mask, B, Hq, S, S, 16, 16);
  kernels::AttentionDims dims{B, Hq, Hkv, S, S, D, D};
  kernels::AttentionOptions options;
  options.scale = 0.3f;
  options.score_mod = score.get();
  options.block_mask = &block_mask;
  options.enable_gqa = true;
  const std::vector<float> qf = Floats(q), kf = Floats(k), vf = Floats(v);
  std::vector<float> out(B * Hq * S * D), lse(B * Hq * S);
  kernels::FlexAttentionForward(dims, qf.data(), kf.data(), vf.data(), options, out.data(),
                                lse.data());
  std::vector<float> dq(qf.size()), dk(kf.size()), dv(vf.size());
  const std::vector<float> doutf = Floats(dout), dlsef = Floats(dlse);
  kernels::FlexAttentionBackward(dims, qf.data(), kf.data(), vf.data(), out.data(), lse.data(),
                                 doutf.data(), dlsef.data(), options, dq.data(), dk.data(),
                                 dv.data());
  ExpectNear(got["out"], Doubles(out), 1e-6, 1e-7, "out");
  ExpectNear(got["lse"], Doubles(lse), 1e-6, 1e-7, "lse");
  ExpectNear(got["dq"], Doubles(dq), 1e-5, 1e-6, "dq");
  ExpectNear(got["dk"], Doubles(dk), 1e-5, 1e-6, "dk");
  ExpectNear(got["dv"], Doubles(dv), 1e-5, 1e-6, "dv");
}

TEST(EvalCustomCallTest, Bf16InputsWithStaticMaskAndArrayResult) {
  const char* text = R"(HloModule m
ENTRY e {
  q = bf16[1,2,24,8] parameter(0)
  k = bf16[1,2,24,8] parameter(1)
  v = bf16[1,2,24,8] parameter(2)
  ROOT out = bf16[1,2,24,8] custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= kv_idx"}
})";
  std::mt19937 rng(2);
  HostTensor q = Random("bf16[1,2,24,8]", rng), k = Random("bf16[1,2,24,8]", rng),
             v = Random("bf16[1,2,24,8]", rng);
  auto module = testing::Parse(text);
  Executor executor(*module);
  HostTensor first = executor.Run({q, k, v})[0];
  HostTensor again = executor.Run({q, k, v})[0];  // the cached block mask
  auto block_mask = kernels::BlockMask::Create(kernels::CausalMask(), 1, 1, 24, 24);
  kernels::AttentionDims dims{1, 2, 2, 24, 24, 8, 8};
  kernels::AttentionOptions options;
  options.block_mask = &block_mask;
  // The bf16 kernel on the bf16 inputs (its lse, not returned, is scratch).
  std::vector<bf16> out(2 * 24 * 8);
  std::vector<float> lse(2 * 24);
  const std::vector<bf16> qb = AsBf16(q), kb = AsBf16(k), vb = AsBf16(v);
  kernels::FlexAttentionForwardBf16(dims, qb.data(), kb.data(), vb.data(), options, out.data(),
                                    lse.data());
  EXPECT_EQ(Bits(first), Bits(out));
  EXPECT_EQ(Bits(again), Bits(out));
}

// bf16 attention through the executor: the forward returns (bf16 out,
// f32 lse), the backward bf16 dq, dk, dv from bf16 out and dout and f32 lse
// and dlse (the types the bf16 kernels read and write).
std::string Bf16AttentionModule(const std::string& out_type, const std::string& lse_type,
                                const std::string& grad_types) {
  const std::string config =
      R"("mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"], "scale": 0.3, "q_block": 16, "kv_block": 16)";
  return fmt::format(R"(HloModule m
ENTRY e {{
  q = bf16[2,4,40,16] parameter(0)
  k = bf16[2,2,40,16] parameter(1)
  v = bf16[2,2,40,16] parameter(2)
  seg = s32[2,40] parameter(3)
  fa = ({0}[2,4,40,16], {1}[2,4,40]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={{{3}}}
  out = {0}[2,4,40,16] get-tuple-element(fa), index=0
  lse = {1}[2,4,40] get-tuple-element(fa), index=1
  dout = bf16[2,4,40,16] parameter(4)
  dlse = f32[2,4,40] parameter(5)
  grads = ({2}) custom-call(q, k, v, out, lse, dout, dlse, seg), custom_call_target="weft.flex_attention_backward", backend_config={{{3}, "has_dlse": true}}
  dq = bf16[2,4,40,16] get-tuple-element(grads), index=0
  dk = bf16[2,2,40,16] get-tuple-element(grads), index=1
  dv = bf16[2,2,40,16] get-tuple-element(grads), index=2
  ROOT t = ({0}[2,4,40,16], {1}[2,4,40], bf16[2,4,40,16], bf16[2,2,40,16], bf16[2,2,40,16]) tuple(out, lse, dq, dk, dv)
}}
)",
                     out_type, lse_type, grad_types, config);
}

// Against the float64 reference of the same bf16 values, with errors as
// max |got - want| / max |want| (kernels/attention_reference.h): within
// 1e-2 for what the kernels round to bf16 (out, and the gradients, whose
// GEMMs also read P and dS rounded to bf16), 1e-6 for the f32 lse. And bit
// for bit what the bf16 kernels give when called directly, with no scratch
// outside the memory plan: no f32 copies were made.
TEST(EvalCustomCallTest, Bf16AttentionRunsTheBf16KernelsAndMatchesFloat64) {
  std::mt19937 rng(5);
  const HostTensor q = Random("bf16[2,4,40,16]", rng), k = Random("bf16[2,2,40,16]", rng),
                   v = Random("bf16[2,2,40,16]", rng), dout = Random("bf16[2,4,40,16]", rng),
                   dlse = Random("f32[2,4,40]", rng);
  const HostTensor seg = SegmentIds();
  auto module = testing::Parse(
      Bf16AttentionModule("bf16", "f32", "bf16[2,4,40,16], bf16[2,2,40,16], bf16[2,2,40,16]"));
  ExecutorStats stats;
  const std::vector<HostTensor> got = testing::Run(*module, {q, k, v, seg, dout, dlse}, &stats);
  EXPECT_EQ(stats.unplanned_bytes, 0);
  EXPECT_EQ(stats.misplaced_results, 0);

  const std::vector<double> seg_v = seg.ToDoubles();
  kernels::testing::RefMods mods;
  mods.mask = [&](int64_t b, int64_t, int64_t i, int64_t j) {
    return i >= j && seg_v[b * S + i] == seg_v[b * S + j];
  };
  const kernels::AttentionDims dims{B, Hq, Hkv, S, S, D, D};
  const auto ref = kernels::testing::ReferenceAttention(dims, Floats(q), Floats(k), Floats(v), 0.3,
                                                        mods, Floats(dout), Floats(dlse));
  using kernels::testing::RelativeError;
  EXPECT_LE(RelativeError(Floats(got[0]), ref.out), 1e-2);
  EXPECT_LE(RelativeError(Floats(got[1]), ref.lse), 1e-6);
  EXPECT_LE(RelativeError(Floats(got[2]), ref.dq), 1e-2);
  EXPECT_LE(RelativeError(Floats(got[3]), ref.dk), 1e-2);
  EXPECT_LE(RelativeError(Floats(got[4]), ref.dv), 1e-2);

  // The bf16 kernels called directly.
  kernels::IndexTensor seg_t{{B, S}, {}};
  for (double x : seg_v) seg_t.values.push_back(static_cast<int64_t>(x));
  auto block_mask = kernels::BlockMask::Create(
      kernels::MaskExpr("q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", {{"seg", seg_t}}), B,
      Hq, S, S, 16, 16);
  kernels::AttentionOptions options;
  options.scale = 0.3f;
  options.block_mask = &block_mask;
  options.enable_gqa = true;
  const std::vector<bf16> qb = AsBf16(q), kb = AsBf16(k), vb = AsBf16(v), doutb = AsBf16(dout);
  std::vector<bf16> out(B * Hq * S * D), dq(qb.size()), dk(kb.size()), dv(vb.size());
  std::vector<float> lse(B * Hq * S);
  kernels::FlexAttentionForwardBf16(dims, qb.data(), kb.data(), vb.data(), options, out.data(),
                                    lse.data());
  const std::vector<float> dlse_f = Floats(dlse);
  kernels::FlexAttentionBackwardBf16(dims, qb.data(), kb.data(), vb.data(), out.data(), lse.data(),
                                     doutb.data(), dlse_f.data(), options, dq.data(), dk.data(),
                                     dv.data());
  EXPECT_EQ(Bits(got[0]), Bits(out));
  EXPECT_EQ(Floats(got[1]), lse);
  EXPECT_EQ(Bits(got[2]), Bits(dq));
  EXPECT_EQ(Bits(got[3]), Bits(dk));
  EXPECT_EQ(Bits(got[4]), Bits(dv));
}

// Results of other types than the bf16 kernels write (f32 out, bf16 lse, an
// f32 out returned alone, f32 dq and dv) are the kernels' values converted,
// through scratch the compiler reserved (nothing outside the plan); the
// backward reads an f32 out, converted back to bf16: the same bits.
TEST(EvalCustomCallTest, Bf16AttentionConvertsResultsOfOtherTypes) {
  std::mt19937 rng(6);
  const std::vector<HostTensor> inputs = {
      Random("bf16[2,4,40,16]", rng), Random("bf16[2,2,40,16]", rng),
      Random("bf16[2,2,40,16]", rng), SegmentIds(),
      Random("bf16[2,4,40,16]", rng), Random("f32[2,4,40]", rng)};
  auto native = testing::Parse(
      Bf16AttentionModule("bf16", "f32", "bf16[2,4,40,16], bf16[2,2,40,16], bf16[2,2,40,16]"));
  const std::vector<HostTensor> want = testing::Run(*native, inputs);
  const std::string config =
      R"("mask": "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]", "mask_tensors": ["seg"], "scale": 0.3, "q_block": 16, "kv_block": 16)";
  auto mixed = testing::Parse(fmt::format(R"(HloModule m
ENTRY e {{
  q = bf16[2,4,40,16] parameter(0)
  k = bf16[2,2,40,16] parameter(1)
  v = bf16[2,2,40,16] parameter(2)
  seg = s32[2,40] parameter(3)
  fa = (f32[2,4,40,16], bf16[2,4,40]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={{{0}}}
  out = f32[2,4,40,16] get-tuple-element(fa), index=0
  lse16 = bf16[2,4,40] get-tuple-element(fa), index=1
  alone = f32[2,4,40,16] custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={{{0}}}
  fb = (bf16[2,4,40,16], f32[2,4,40]) custom-call(q, k, v, seg), custom_call_target="weft.flex_attention", backend_config={{{0}}}
  lse = f32[2,4,40] get-tuple-element(fb), index=1
  dout = bf16[2,4,40,16] parameter(4)
  dlse = f32[2,4,40] parameter(5)
  grads = (f32[2,4,40,16], bf16[2,2,40,16], f32[2,2,40,16]) custom-call(q, k, v, out, lse, dout, dlse, seg), custom_call_target="weft.flex_attention_backward", backend_config={{{0}, "has_dlse": true}}
  dq = f32[2,4,40,16] get-tuple-element(grads), index=0
  dk = bf16[2,2,40,16] get-tuple-element(grads), index=1
  dv = f32[2,2,40,16] get-tuple-element(grads), index=2
  ROOT t = (f32[2,4,40,16], bf16[2,4,40], f32[2,4,40,16], f32[2,4,40,16], bf16[2,2,40,16], f32[2,2,40,16]) tuple(out, lse16, alone, dq, dk, dv)
}}
)",
                                          config));
  ExecutorStats stats;
  const std::vector<HostTensor> got = testing::Run(*mixed, inputs, &stats);
  EXPECT_EQ(stats.unplanned_bytes, 0);
  EXPECT_EQ(stats.misplaced_results, 0);
  // got: out, lse, out again, dq, dk, dv; want: out, lse, dq, dk, dv.
  const int from[] = {0, 1, 0, 2, 3, 4};
  for (size_t i = 0; i < got.size(); ++i) {
    std::vector<double> w;
    for (double x : want[from[i]].ToDoubles()) w.push_back(RoundToType(x, got[i].element_type()));
    testing::ExpectEqual(got[i], w, "result " + std::to_string(i));
  }
}

// A query-sharded backward's last tile (global_q_len 12, this device's rows
// from 8: rows 4..7 are padding) with NaN in the padding rows of q, out, lse
// and dout: the rows are cleaned before the kernels see them, in bf16 as in
// f32, so dk and dv are the reference's over the valid rows and dq's padding
// rows are 0.
TEST(EvalCustomCallTest, PaddingRowsAreCleanInBf16AndF32) {
  for (const std::string type : {"bf16", "f32"}) {
    SCOPED_TRACE(type);
    const std::string text = fmt::format(R"(HloModule m
ENTRY e {{
  q = {0}[1,2,8,8] parameter(0)
  k = {0}[1,2,12,8] parameter(1)
  v = {0}[1,2,12,8] parameter(2)
  out = {0}[1,2,8,8] parameter(3)
  lse = f32[1,2,8] parameter(4)
  dout = {0}[1,2,8,8] parameter(5)
  offset = s32[] parameter(6)
  ROOT grads = ({0}[1,2,8,8], {0}[1,2,12,8], {0}[1,2,12,8]) custom-call(q, k, v, out, lse, dout, offset), custom_call_target="weft.flex_attention_backward", backend_config={{"mask": "q_idx >= kv_idx", "q_offset_operand": 6, "global_q_len": 12}}
}}
)",
                                         type);
    const int64_t valid = 4, rows = 8, kv = 12, dim = 8, heads = 2;
    std::mt19937 rng(7);
    const Shape q_shape = ParseShape(type + "[1,2,8,8]");
    const HostTensor q = Random(q_shape, rng), k = Random(type + "[1,2,12,8]", rng),
                     v = Random(type + "[1,2,12,8]", rng), dout = Random(q_shape, rng);
    // The reference on the valid rows (global rows 8..11).
    auto valid_rows = [&](const HostTensor& t, int64_t inner) {
      std::vector<float> all = Floats(t), out;
      for (int64_t h = 0; h < heads; ++h) {
        out.insert(out.end(), all.begin() + h * rows * inner,
                   all.begin() + (h * rows + valid) * inner);
      }
      return out;
    };
    kernels::testing::RefMods mods;
    mods.mask = [](int64_t, int64_t, int64_t i, int64_t j) { return i + 8 >= j; };
    const kernels::AttentionDims dims{1, heads, heads, valid, kv, dim, dim};
    const auto ref =
        kernels::testing::ReferenceAttention(dims, valid_rows(q, dim), Floats(k), Floats(v),
                                             1.0 / std::sqrt(8.0), mods, valid_rows(dout, dim));
    // out and lse from the reference on the valid rows, NaN on the padding.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> out_v, lse_v;
    auto with_nan = [&](const HostTensor& t) {
      std::vector<double> x = t.ToDoubles();
      for (int64_t h = 0; h < heads; ++h) {
        std::fill(x.begin() + (h * rows + valid) * dim, x.begin() + (h + 1) * rows * dim, nan);
      }
      return HostTensor::FromDoubles(t.shape(), x);
    };
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r = 0; r < rows; ++r) {
        lse_v.push_back(r < valid ? ref.lse[h * valid + r] : nan);
        for (int64_t c = 0; c < dim; ++c) {
          out_v.push_back(r < valid ? ref.out[(h * valid + r) * dim + c] : nan);
        }
      }
    }
    const HostTensor out = HostTensor::FromDoubles(q_shape, out_v),
                     lse = HostTensor::FromDoubles(ParseShape("f32[1,2,8]"), lse_v),
                     offset = HostTensor::Scalar(PrimitiveType::kS32, 8);
    auto module = testing::Parse(text);
    const std::vector<HostTensor> got =
        testing::Run(*module, {with_nan(q), k, v, out, lse, with_nan(dout), offset});
    const double tol = type == "bf16" ? 1e-2 : 1e-5;
    using kernels::testing::RelativeError;
    EXPECT_LE(RelativeError(valid_rows(got[0], dim), ref.dq), tol);
    EXPECT_LE(RelativeError(Floats(got[1]), ref.dk), tol);
    EXPECT_LE(RelativeError(Floats(got[2]), ref.dv), tol);
    const std::vector<float> dq = Floats(got[0]);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = (h * rows + valid) * dim; i < (h + 1) * rows * dim; ++i) {
        EXPECT_EQ(dq[i], 0.0f) << "dq element " << i;
      }
    }
  }
}

// An executor keeps an attention's block mask across calls while its mask
// tensors hold the same values; new segment ids must give a new mask (kForward
// returns dv, which the forward's and the backward's masks both shape).
TEST(EvalCustomCallTest, ABlockMaskIsRebuiltWhenTheSegmentIdsChange) {
  std::mt19937 rng(7);
  const HostTensor q = Random("f32[2,4,40,16]", rng), k = Random("f32[2,2,40,16]", rng),
                   v = Random("f32[2,2,40,16]", rng), bias = Random("f32[4,79]", rng, -0.5, 0.5),
                   dout = Random("f32[2,4,40,16]", rng), dlse = Random("f32[2,4,40]", rng);
  // Two random documentings of the rows: ids ascend, a new document starts
  // with probability 1/8.
  auto random_segments = [&] {
    std::vector<double> seg;
    std::bernoulli_distribution starts(0.125);
    for (int64_t b = 0; b < B; ++b) {
      int id = 0;
      for (int64_t s = 0; s < S; ++s) seg.push_back(s > 0 && starts(rng) ? ++id : id);
    }
    return HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {B, S}), seg);
  };
  const HostTensor seg_a = random_segments(), seg_b = random_segments();
  ASSERT_NE(seg_a.ToDoubles(), seg_b.ToDoubles());
  auto module = testing::Parse(kForward);
  auto inputs = [&](const HostTensor& seg) {
    return std::vector<HostTensor>{q, k, v, seg, bias, dout, dlse};
  };
  auto fresh = [&](const HostTensor& seg) { return testing::Run(*module, inputs(seg))[0]; };
  const std::vector<double> want_a = fresh(seg_a).ToDoubles(), want_b = fresh(seg_b).ToDoubles();
  EXPECT_NE(want_a, want_b);
  Executor executor(*module);
  for (const HostTensor* seg : {&seg_a, &seg_a, &seg_b, &seg_a}) {
    EXPECT_EQ(executor.Run(inputs(*seg))[0].ToDoubles(), seg == &seg_a ? want_a : want_b);
  }
}

// The attention calls of one executor share their block masks: calls whose
// mask, mask tensors, blocks and shapes agree (a layer loop's forward and
// backward) use one mask. Here one module calls the same mask expression on
// two documentings of the rows, with two block sizes, and the first call
// again: every output must be what the call gives alone in a module of its
// own (a call handed another documenting's mask would not).
TEST(EvalCustomCallTest, CallsShareABlockMaskOnlyWhenEverythingItIsBuiltFromAgrees) {
  std::mt19937 rng(12);
  const HostTensor q = Random("f32[2,4,40,16]", rng), k = Random("f32[2,2,40,16]", rng),
                   v = Random("f32[2,2,40,16]", rng);
  auto segments = [&](int64_t first_break) {
    std::vector<double> seg;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < S; ++s) seg.push_back(s < first_break + 3 * b ? 0 : (s < 30 ? 1 : 2));
    }
    return HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {B, S}), seg);
  };
  const HostTensor seg_a = segments(7), seg_b = segments(18);
  const std::string mask = "q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]";
  auto call = [&](const std::string& name, const std::string& seg, int64_t block) {
    return fmt::format(
        "  {0} = (f32[2,4,40,16], f32[2,4,40]) custom-call(q, k, v, {1}), "
        "custom_call_target=\"weft.flex_attention\", backend_config={{\"mask\": \"{2}\", "
        "\"mask_tensors\": [\"seg\"], \"q_block\": {3}, \"kv_block\": {3}}}\n"
        "  {0}.out = f32[2,4,40,16] get-tuple-element({0}), index=0\n",
        name, seg, mask, block);
  };
  const std::string params =
      "  q = f32[2,4,40,16] parameter(0)\n  k = f32[2,2,40,16] parameter(1)\n"
      "  v = f32[2,2,40,16] parameter(2)\n  sa = s32[2,40] parameter(3)\n"
      "  sb = s32[2,40] parameter(4)\n";
  struct Call {
    const char* name;
    const char* seg;
    int64_t block;
  };
  const std::vector<Call> calls = {
      {"a16", "sa", 16}, {"b16", "sb", 16}, {"a8", "sa", 8}, {"b8", "sb", 8}, {"a16x", "sa", 16}};
  std::string all = "HloModule m\nENTRY e {\n" + params;
  std::string outs;
  for (const Call& c : calls) {
    all += call(c.name, c.seg, c.block);
    outs += (outs.empty() ? "" : ", ") + std::string(c.name) + ".out";
  }
  all +=
      "  ROOT r = (f32[2,4,40,16], f32[2,4,40,16], f32[2,4,40,16], f32[2,4,40,16], "
      "f32[2,4,40,16]) tuple(" +
      outs + ")\n}\n";
  const std::vector<HostTensor> got = testing::Run(*testing::Parse(all), {q, k, v, seg_a, seg_b});
  ASSERT_EQ(got.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string alone = "HloModule m\nENTRY e {\n" + params +
                              call(calls[i].name, calls[i].seg, calls[i].block) +
                              "  ROOT r = f32[2,4,40,16] copy(" + calls[i].name + ".out)\n}\n";
    const HostTensor want = testing::Run(*testing::Parse(alone), {q, k, v, seg_a, seg_b}).at(0);
    EXPECT_EQ(got[i].ToDoubles(), want.ToDoubles()) << calls[i].name;
  }
  // The two documentings do give different outputs.
  EXPECT_NE(got[0].ToDoubles(), got[1].ToDoubles());
}

// "q_block": 8589934592, "kv_block": 8589934592 overflowed their product in
// BlockMask::Create (a small tile written past its end: SIGSEGV in weft
// run). A block longer than the sequence is one block: the same result as
// small blocks.
TEST(EvalCustomCallTest, BlocksLongerThanTheSequenceAreOneBlock) {
  std::mt19937 rng(13);
  const HostTensor q = Random("f32[1,2,40,16]", rng), k = Random("f32[1,2,40,16]", rng),
                   v = Random("f32[1,2,40,16]", rng);
  auto module = [](int64_t block) {
    return testing::Parse(fmt::format(
        "HloModule m\nENTRY e {{\n  q = f32[1,2,40,16] parameter(0)\n"
        "  k = f32[1,2,40,16] parameter(1)\n  v = f32[1,2,40,16] parameter(2)\n"
        "  fa = (f32[1,2,40,16], f32[1,2,40]) custom-call(q, k, v), "
        "custom_call_target=\"weft.flex_attention\", backend_config={{\"mask\": \"q_idx >= "
        "kv_idx\", \"q_block\": {0}, \"kv_block\": {0}}}\n"
        "  ROOT out = f32[1,2,40,16] get-tuple-element(fa), index=0\n}}\n",
        block));
  };
  const HostTensor small = testing::Run(*module(16), {q, k, v}).at(0);
  const HostTensor huge = testing::Run(*module(int64_t{1} << 33), {q, k, v}).at(0);
  const std::vector<double> a = small.ToDoubles(), b = huge.ToDoubles();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

TEST(EvalCustomCallTest, BadTargetsAndConfigsAreErrorsNamingTheInstruction) {
  auto expect_error = [](const std::string& call, const std::vector<std::string>& fragments) {
    const std::string text = R"(HloModule m
ENTRY e {
  q = f32[1,2,8,4] parameter(0)
  k = f32[1,2,8,4] parameter(1)
  v = f32[1,2,8,4] parameter(2)
  ROOT fa = f32[1,2,8,4] )" + call +
                             "\n}\n";
    auto module = testing::Parse(text);
    testing::ExpectErrorContaining([&] { Executor executor(*module); }, fragments);
  };
  expect_error(R"(custom-call(q, k, v), custom_call_target="my.op")",
               {"'fa' (custom-call)", "\"my.op\" is not supported", "weft.flex_attention"});
  expect_error(
      R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config="{\"mask\": ")",
      {"'fa' (custom-call)", "not valid JSON"});
  expect_error(
      R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= "})",
      {"'fa' (custom-call)", "mask_expr"});
  expect_error(
      R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "seg[b, q_idx] == 0", "mask_tensors": ["seg"]})",
      {"'fa' (custom-call)", "takes 4 operands"});
  expect_error(
      R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"causal": true})",
      {"unknown key 'causal'"});
  // Values of the wrong type are named by key, in weft's words: never the
  // JSON library's exception text.
  const std::pair<const char*, const char*> kWrongTypes[] = {
      {R"({"scale": "abc"})", "key \"scale\" must be a number, got \"abc\""},
      {R"({"mask": 5})", "key \"mask\" must be a string, got 5"},
      {R"({"enable_gqa": "yes"})", "key \"enable_gqa\" must be true or false"},
      {R"({"mask": "q_idx >= 0", "mask_tensors": [1]})",
       "key \"mask_tensors\" must be a list of names"},
      {R"({"q_block": 1.5})", "key \"q_block\" must be an integer"},
      {R"({"kv_block": 18446744073709551615})", "key \"kv_block\" must be an integer that fits"},
      {R"({"scale": 1e400})", "backend_config is not valid JSON"}};
  for (const auto& [config, message] : kWrongTypes) {
    const std::string call =
        std::string(
            R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config=)") +
        config;
    auto module = testing::Parse(std::string(R"(HloModule m
ENTRY e {
  q = f32[1,2,8,4] parameter(0)
  k = f32[1,2,8,4] parameter(1)
  v = f32[1,2,8,4] parameter(2)
  ROOT fa = f32[1,2,8,4] )") + call +
                                 "\n}\n");
    try {
      Executor executor(*module);
      ADD_FAILURE() << config << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace weft::runtime

#include <gtest/gtest.h>

#include "executor_test_util.h"
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
  auto mask = kernels::MaskExpr("q_idx >= kv_idx && seg[b, q_idx] == seg[b, kv_idx]",
                                {{"seg", seg_t}});
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
  std::vector<float> out(2 * 24 * 8), lse(2 * 24);
  const std::vector<float> qf = Floats(q), kf = Floats(k), vf = Floats(v);
  kernels::FlexAttentionForward(dims, qf.data(), kf.data(), vf.data(), options, out.data(),
                                lse.data());
  std::vector<double> want;
  for (float x : out) want.push_back(RoundToType(x, PrimitiveType::kBF16));
  ExpectNear(first, want, 0, 0, "first run");
  ExpectNear(again, want, 0, 0, "second run");
}

TEST(EvalCustomCallTest, BadTargetsAndConfigsAreErrorsNamingTheInstruction) {
  auto expect_error = [](const std::string& call, const std::vector<std::string>& fragments) {
    const std::string text = R"(HloModule m
ENTRY e {
  q = f32[1,2,8,4] parameter(0)
  k = f32[1,2,8,4] parameter(1)
  v = f32[1,2,8,4] parameter(2)
  ROOT fa = f32[1,2,8,4] )" + call + "\n}\n";
    auto module = testing::Parse(text);
    testing::ExpectErrorContaining([&] { Executor executor(*module); }, fragments);
  };
  expect_error(R"(custom-call(q, k, v), custom_call_target="my.op")",
               {"'fa' (custom-call)", "\"my.op\" is not supported", "weft.flex_attention"});
  expect_error(R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config="{\"mask\": ")",
               {"'fa' (custom-call)", "not valid JSON"});
  expect_error(R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "q_idx >= "})",
               {"'fa' (custom-call)", "mask_expr"});
  expect_error(R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"mask": "seg[b, q_idx] == 0", "mask_tensors": ["seg"]})",
               {"'fa' (custom-call)", "takes 4 operands"});
  expect_error(R"(custom-call(q, k, v), custom_call_target="weft.flex_attention", backend_config={"causal": true})",
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

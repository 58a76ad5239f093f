// The attention custom calls, checked against a naive float64 attention that
// honours the partitioner's "q_offset_operand" convention.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "partitioner_test_util.h"

namespace weft::spmd_test {
namespace {

// Masks: "" or terms joined by " && ": "q_idx >= kv_idx" or
// "A[b, q_idx] == B[b, kv_idx]" (A, B named in "mask_tensors").
struct Attention {
  const HloInstruction& instr;
  const std::vector<Value>& ops;
  nlohmann::json config;
  int64_t q_offset = 0;

  Attention(const HloInstruction& i, const std::vector<Value>& o) : instr(i), ops(o) {
    config = i.attrs().backend_config.empty() ? nlohmann::json::object()
                                              : nlohmann::json::parse(i.attrs().backend_config);
    if (config.contains("q_offset_operand")) {
      q_offset = static_cast<int64_t>(ops.at(config["q_offset_operand"].get<int64_t>()).data[0]);
    }
  }
  const Value& Named(const std::string& name, int64_t first) const {
    const auto& names = config["mask_tensors"];
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return ops.at(first + i);
    }
    Fail("no mask tensor {}", name);
  }
  bool Allowed(int64_t b, int64_t qi, int64_t ki, int64_t first) const {
    std::string mask = config.value("mask", "");
    size_t pos = 0;
    while (pos < mask.size()) {
      size_t end = mask.find(" && ", pos);
      if (end == std::string::npos) end = mask.size();
      const std::string term = mask.substr(pos, end - pos);
      pos = end + 4;
      if (term == "q_idx >= kv_idx") {
        if (qi < ki) return false;
        continue;
      }
      char a[16], c[16];
      if (std::sscanf(term.c_str(), "%15[a-z_][b, q_idx] == %15[a-z_][b, kv_idx]", a, c) != 2) {
        Fail("reference: mask term '{}'", term);
      }
      const Value& qs = Named(a, first);
      const Value& ks = Named(c, first);
      const int64_t sq = qs.shape.dimensions(1), skv = ks.shape.dimensions(1);
      // Padded query rows of the last device lie past the tensor: masked.
      if (qi >= sq || ki >= skv) return false;
      if (qs.data[b * sq + qi] != ks.data[b * skv + ki]) return false;
    }
    return true;
  }

  Value Run(bool backward) const {
    const Value& q = ops[0];
    const Value& k = ops[1];
    const Value& v = ops[2];
    const int64_t B = q.shape.dimensions(0), Hq = q.shape.dimensions(1), Sq = q.shape.dimensions(2),
                  D = q.shape.dimensions(3);
    const int64_t Hkv = k.shape.dimensions(1), Skv = k.shape.dimensions(2),
                  Dv = v.shape.dimensions(3);
    const double scale = config.value("scale", 1.0 / std::sqrt(static_cast<double>(D)));
    const bool has_dlse = config.value("has_dlse", false);
    const int64_t first = backward ? (has_dlse ? 7 : 6) : 3;
    auto at4 = [](const Value& x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) -> double {
      const auto& d = x.shape.dimensions();
      return x.data[((i0 * d[1] + i1) * d[2] + i2) * d[3] + i3];
    };
    Value out = MakeArray(ShapeOf(backward ? 0 : 0)), lse, dq, dk, dv;
    if (backward) {
      dq = MakeArray(q.shape);
      dk = MakeArray(k.shape);
      dv = MakeArray(v.shape);
    } else {
      lse = MakeArray(instr.shape().IsTuple() ? instr.shape().tuple_shapes(1) : Shape());
    }
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / (Hq / Hkv);
        for (int64_t i = 0; i < Sq; ++i) {
          std::vector<double> s(Skv, -INFINITY);
          double mx = -INFINITY;
          for (int64_t j = 0; j < Skv; ++j) {
            if (!Allowed(b, i + q_offset, j, first)) continue;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += at4(q, b, h, i, d) * at4(k, b, hk, j, d);
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < Skv; ++j) sum += std::isinf(s[j]) ? 0 : std::exp(s[j] - mx);
          const double l = sum == 0 ? -INFINITY : mx + std::log(sum);
          if (!backward) {
            for (int64_t j = 0; j < Skv; ++j) {
              if (std::isinf(s[j])) continue;
              const double pij = std::exp(s[j] - l);
              for (int64_t e = 0; e < Dv; ++e) {
                out.data[((b * Hq + h) * Sq + i) * Dv + e] += pij * at4(v, b, hk, j, e);
              }
            }
            if (lse.shape.IsValid()) lse.data[(b * Hq + h) * Sq + i] = l;
            continue;
          }
          // Backward from the given out, lse, dout (and dlse).
          const double given_lse = ops[4].data[(b * Hq + h) * Sq + i];
          const double dlse = has_dlse ? ops[6].data[(b * Hq + h) * Sq + i] : 0;
          double di = 0;
          for (int64_t e = 0; e < Dv; ++e) di += at4(ops[5], b, h, i, e) * at4(ops[3], b, h, i, e);
          for (int64_t j = 0; j < Skv; ++j) {
            if (std::isinf(s[j])) continue;
            const double pij = std::exp(s[j] - given_lse);
            double dp = 0;
            for (int64_t e = 0; e < Dv; ++e) {
              dp += at4(ops[5], b, h, i, e) * at4(v, b, hk, j, e);
              dv.data[((b * Hkv + hk) * Skv + j) * Dv + e] += pij * at4(ops[5], b, h, i, e);
            }
            const double ds = pij * (dp - di + dlse);
            for (int64_t d = 0; d < D; ++d) {
              dq.data[((b * Hq + h) * Sq + i) * D + d] += scale * ds * at4(k, b, hk, j, d);
              dk.data[((b * Hkv + hk) * Skv + j) * D + d] += scale * ds * at4(q, b, h, i, d);
            }
          }
        }
      }
    }
    if (backward) return Value{instr.shape(), {}, {dq, dk, dv}};
    if (!instr.shape().IsTuple()) return out;
    return Value{instr.shape(), {}, {out, lse}};
  }
  Shape ShapeOf(int64_t i) const {
    return instr.shape().IsTuple() ? instr.shape().tuple_shapes(i) : instr.shape();
  }
};

Value ReferenceAttention(const HloInstruction& instr, const std::vector<Value>& ops) {
  const bool backward = instr.attrs().custom_call_target == "weft.flex_attention_backward";
  return Attention(instr, ops).Run(backward);
}

std::string ForwardModule(const std::string& qs, const std::string& kvs, const std::string& segs,
                          const std::string& out_sharding, const std::string& lse_sharding) {
  return fmt::format(R"(
HloModule attn
ENTRY main {{
  q = f32[2,4,6,3] parameter(0), sharding={0}
  k = f32[2,2,6,3] parameter(1), sharding={1}
  v = f32[2,2,6,3] parameter(2), sharding={1}
  qs = s32[2,6] parameter(3), sharding={2}
  ks = s32[2,6] parameter(4), sharding={2}
  ROOT fa = (f32[2,4,6,3], f32[2,4,6]) custom-call(q, k, v, qs, ks), custom_call_target="weft.flex_attention", backend_config={{"mask": "q_idx >= kv_idx && qs[b, q_idx] == ks[b, kv_idx]", "mask_tensors": ["qs", "ks"]}}, sharding={{{3}, {4}}}
}}
)",
                     qs, kvs, segs, out_sharding, lse_sharding);
}

TEST(SpmdAttentionTest, BatchAndHeadShardingRunLocally) {
  auto m = ExpectShardedEqualsUnsharded(
      ForwardModule("{devices=[2,2,1,1]<=[4]}", "{devices=[2,2,1,1]<=[4]}",
                    "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "{devices=[2,2,1,1]<=[4]}",
                    "{devices=[2,2,1]<=[4]}"),
      4, 3, ReferenceAttention);
  EXPECT_EQ(CountCollectives(*m), 0);
  const HloInstruction* fa = FindNamed(*m, "fa");
  ASSERT_NE(fa, nullptr);
  EXPECT_EQ(fa->shape(), ParseShape("(f32[1,2,6,3], f32[1,2,6])"));
}

TEST(SpmdAttentionTest, QuerySequenceShardingGathersKeysAndPassesTheOffset) {
  auto m = ExpectShardedEqualsUnsharded(
      ForwardModule("{devices=[1,1,4,1]<=[4]}", "{devices=[1,1,4,1]<=[4]}", "{devices=[1,4]<=[4]}",
                    "{devices=[1,1,4,1]<=[4]}", "{devices=[1,1,4]<=[4]}"),
      4, 5, ReferenceAttention);
  const HloInstruction* fa = FindNamed(*m, "fa");
  ASSERT_NE(fa, nullptr);
  EXPECT_EQ(fa->operand(0)->shape(), ParseShape("f32[2,4,2,3]"));
  EXPECT_EQ(fa->operand(1)->shape(), ParseShape("f32[2,2,6,3]"));
  EXPECT_EQ(fa->operand_count(), 6);
  EXPECT_EQ(fa->operand(5)->shape(), ParseShape("s32[]"));
  EXPECT_NE(fa->attrs().backend_config.find("\"q_offset_operand\":5"), std::string::npos);
  EXPECT_GE(FindAll(*m, HloOpcode::kAllGather).size(), 2u);
}

TEST(SpmdAttentionTest, QuerySequenceOnThreeDevicesWithReplicatedKeys) {
  ExpectShardedEqualsUnsharded(
      ForwardModule("{devices=[1,1,3,1]<=[3]}", "{replicated}", "{replicated}",
                    "{devices=[1,1,3,1]<=[3]}", "{devices=[1,1,3]<=[3]}"),
      3, 9, ReferenceAttention);
}

TEST(SpmdAttentionTest, BackwardReduceScattersKeyGradients) {
  const std::string text = R"(
HloModule attn_bwd
ENTRY main {
  q = f32[2,2,8,3] parameter(0), sharding={devices=[2,1,2,1]<=[4]}
  k = f32[2,2,8,3] parameter(1), sharding={devices=[2,1,2,1]<=[4]}
  v = f32[2,2,8,3] parameter(2), sharding={devices=[2,1,2,1]<=[4]}
  o = f32[2,2,8,3] parameter(3), sharding={devices=[2,1,2,1]<=[4]}
  l = f32[2,2,8] parameter(4), sharding={devices=[2,1,2]<=[4]}
  g = f32[2,2,8,3] parameter(5), sharding={devices=[2,1,2,1]<=[4]}
  ROOT bwd = (f32[2,2,8,3], f32[2,2,8,3], f32[2,2,8,3]) custom-call(q, k, v, o, l, g), custom_call_target="weft.flex_attention_backward", backend_config={"mask": "q_idx >= kv_idx"}, sharding={{devices=[2,1,2,1]<=[4]}, {devices=[2,1,2,1]<=[4]}, {devices=[2,1,2,1]<=[4]}}
}
)";
  auto m = ExpectShardedEqualsUnsharded(text, 4, 13, ReferenceAttention);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  ASSERT_EQ(scatters.size(), 2u);
  EXPECT_EQ(scatters[0]->dimensions(), std::vector<int64_t>{2});
  EXPECT_EQ(scatters[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllReduce).size(), 0u);
}

}  // namespace
}  // namespace weft::spmd_test
